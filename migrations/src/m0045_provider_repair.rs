//! Provider repair: what we created at a vendor and must remove, fenced until the removal is
//! proven (`provider_resource_repair`), and each workspace's reference to it with the sealed
//! credential the removal uses (`connection_provider_repair`).
//!
//! The fence row is pseudonymous: a resource identity (provider, instance, resource) and the
//! proof of ownership to check before a removal, with no workspace, connection or person column,
//! so it can outlive a purged workspace. The reference row goes with its workspace (cascade);
//! its credential is cleared once the fence it serves is resolved or released.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS provider_resource_repair (
    id               uuid PRIMARY KEY,
    -- The identity: the vendor kind, its instance (server URL, '' for the default) and the
    -- resource (`<resource kind>:<vendor id>`).
    provider         text NOT NULL CHECK (provider ~ '^[a-z][a-z0-9_]*$'),
    instance         text NOT NULL,
    resource         text NOT NULL,
    -- The advisory-lock key of the identity (lifecycle_core::repair::identity_hash).
    identity_hash    bigint NOT NULL,
    -- The ownership proof a removal checks first: the kind, where it lives at the vendor (a
    -- GitLab group id), its vendor id, and what only our resource carries (a marker in its URL,
    -- the URL's hash).
    resource_kind    text NOT NULL CHECK (resource_kind ~ '^[a-z][a-z0-9_]*$'),
    target           text NOT NULL,
    vendor_id        text NOT NULL,
    marker           text,
    url_hash         text,
    status           text NOT NULL DEFAULT 'pending'
                         CHECK (status IN ('pending', 'needs_authorization', 'awaiting_admin',
                                           'resolved', 'released')),
    -- The fence: an inspection's epoch, permits taken, the attempts whose outcome is unknown,
    -- failed tries in a row (the backoff).
    epoch            bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    attempts         bigint NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    uncertain        bigint[] NOT NULL DEFAULT '{}',
    failures         integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
    next_attempt_at  timestamptz,
    -- Set when the capture was written in the lifecycle transition's own transaction; a fence
    -- without it assumes an earlier uncertain call.
    capture_receipt  uuid,
    last_outcome     text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    settled_at       timestamptz,
    UNIQUE (provider, instance, resource),
    CHECK ((status IN ('resolved', 'released')) = (settled_at IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS provider_resource_repair_due
    ON provider_resource_repair (next_attempt_at)
    WHERE status IN ('pending', 'needs_authorization');
CREATE INDEX IF NOT EXISTS provider_resource_repair_identity
    ON provider_resource_repair (identity_hash);

CREATE TABLE IF NOT EXISTS connection_provider_repair (
    id                     uuid PRIMARY KEY,
    repair_id              uuid NOT NULL REFERENCES provider_resource_repair (id)
                               ON DELETE CASCADE,
    workspace_id           uuid NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    connection_id          uuid NOT NULL REFERENCES connection (id) ON DELETE CASCADE,
    -- The creation record the target came from, when it came from one.
    registration_id        uuid,
    -- The transition that captured it and the connection version it wrote.
    transition             text NOT NULL,
    connection_version     bigint NOT NULL,
    -- The removal credential, sealed as the connection's secret of this name was (the
    -- connection id and the name are its associated data); cleared when the fence settles.
    credential_name        text,
    credential_key_id      text,
    credential_nonce       bytea,
    credential_ciphertext  bytea,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    UNIQUE (repair_id, connection_id),
    CHECK ((credential_key_id IS NULL) = (credential_ciphertext IS NULL)),
    CHECK ((credential_key_id IS NULL) = (credential_nonce IS NULL)),
    CHECK (credential_key_id IS NULL OR credential_name IS NOT NULL)
);
CREATE INDEX IF NOT EXISTS connection_provider_repair_connection
    ON connection_provider_repair (connection_id);
CREATE INDEX IF NOT EXISTS connection_provider_repair_workspace
    ON connection_provider_repair (workspace_id);
"#;
