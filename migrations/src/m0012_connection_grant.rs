//! What a connection has verified with its vendor using its own credentials, beyond the
//! repositories its monitors are bound to: a GitHub App installation it obtained an
//! installation token for. Write admission checks installation events against it; a settings
//! value a tenant typed is not verification.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
-- One row per connection and grant kind: the vendor's id of what the connection verified, and
-- when it last did. Removed with the connection.
CREATE TABLE IF NOT EXISTS connection_grant (
    connection_id  uuid NOT NULL REFERENCES connection (id) ON DELETE CASCADE,
    kind           text NOT NULL CHECK (kind IN ('github_installation')),
    grant_id       text NOT NULL,
    verified_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (connection_id, kind)
);
"#;
