//! OAuth authorization bound to the connection before the redirect (`oauth_state`), and the
//! Slack code exchanges it starts (`slack_exchange`).
//!
//! A state row is the one thing a callback is checked against: only the hash of the state we
//! handed the vendor is stored, with the connection, its version and lifecycle generation at
//! the redirect, an expiry and when it was used (once). An exchange row is written before the
//! code is sent to Slack; what Slack returned (team, bot user, token fingerprint) is stored on it
//! before the token is checked, and the row goes in the transaction that adopts the token. A row
//! left behind is an attempt whose outcome is unknown, for an admin.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS oauth_state (
    id                    uuid PRIMARY KEY,
    state_hash            text NOT NULL UNIQUE,
    workspace_id          uuid NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    connection_id         uuid NOT NULL REFERENCES connection (id) ON DELETE CASCADE,
    connection_version    bigint NOT NULL,
    lifecycle_generation  bigint NOT NULL,
    redirect_uri          text NOT NULL,
    created_at            timestamptz NOT NULL DEFAULT now(),
    expires_at            timestamptz NOT NULL,
    used_at               timestamptz
);
CREATE INDEX IF NOT EXISTS oauth_state_connection ON oauth_state (connection_id);

CREATE TABLE IF NOT EXISTS slack_exchange (
    id                 uuid PRIMARY KEY,
    state_id           uuid NOT NULL UNIQUE REFERENCES oauth_state (id) ON DELETE CASCADE,
    workspace_id       uuid NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    connection_id      uuid NOT NULL REFERENCES connection (id) ON DELETE CASCADE,
    -- dispatched: the code is (about to be) sent; exchanged: Slack answered with a token, its
    -- team, bot user and fingerprint stored here before auth.test; uncertain: no answer, or a
    -- failure after the token was issued.
    status             text NOT NULL DEFAULT 'dispatched'
                           CHECK (status IN ('dispatched', 'exchanged', 'uncertain')),
    team_id            text,
    bot_user_id        text,
    token_fingerprint  text,
    detail             text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CHECK ((status = 'exchanged') <= (token_fingerprint IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS slack_exchange_connection ON slack_exchange (connection_id);
"#;
