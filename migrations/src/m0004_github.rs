//! The GitHub mirror: repositories (global, shared by every workspace that monitors them),
//! monitors (a workspace's wish to mirror a repository), issues and pull requests. Content rows
//! carry the vendor's `updated_at` for forward-only writes and `deleted_at` for tombstones.
//! Unknown values are NULL, never a default.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
-- One INITIAL job per activation, whichever path (redelivery, replica) asks for it.
ALTER TABLE sync_job ADD COLUMN IF NOT EXISTS dedup_key text;
CREATE UNIQUE INDEX IF NOT EXISTS sync_job_dedup ON sync_job (dedup_key) WHERE dedup_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS repository (
    id                    uuid PRIMARY KEY,
    provider_instance_id  uuid NOT NULL REFERENCES provider_instance (id),
    native_id             bigint NOT NULL,
    node_id               text NOT NULL,
    owner                 text NOT NULL,
    name                  text NOT NULL,
    archived              boolean,
    deleted_at            timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider_instance_id, native_id)
);
CREATE INDEX IF NOT EXISTS repository_name
    ON repository (provider_instance_id, lower(owner), lower(name));

-- A monitor names a repository by owner/name until its native id is known; from then on the id
-- decides (a reused name never captures another repository).
CREATE TABLE IF NOT EXISTS repository_to_monitor (
    id             uuid PRIMARY KEY,
    workspace_id   uuid NOT NULL REFERENCES workspace (id),
    connection_id  uuid NOT NULL REFERENCES connection (id),
    owner          text NOT NULL,
    name           text NOT NULL,
    native_id      bigint,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS repository_to_monitor_name
    ON repository_to_monitor (connection_id, lower(owner), lower(name));

CREATE TABLE IF NOT EXISTS issue (
    id                   uuid PRIMARY KEY,
    repository_id        uuid NOT NULL REFERENCES repository (id) ON DELETE CASCADE,
    native_id            bigint NOT NULL,
    node_id              text NOT NULL,
    number               integer NOT NULL,
    title                text,
    body                 text,
    state                text NOT NULL CHECK (state IN ('open', 'closed')),
    state_reason         text,
    author               text,
    locked               boolean,
    lock_reason          text,
    comment_count        integer,
    upstream_created_at  timestamptz NOT NULL,
    upstream_updated_at  timestamptz NOT NULL,
    closed_at            timestamptz,
    deleted_at           timestamptz,
    mirrored_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (repository_id, native_id)
);

CREATE TABLE IF NOT EXISTS pull_request (
    id                   uuid PRIMARY KEY,
    repository_id        uuid NOT NULL REFERENCES repository (id) ON DELETE CASCADE,
    native_id            bigint NOT NULL,
    node_id              text NOT NULL,
    number               integer NOT NULL,
    title                text,
    body                 text,
    state                text NOT NULL CHECK (state IN ('open', 'closed', 'merged')),
    draft                boolean,
    author               text,
    locked               boolean,
    lock_reason          text,
    comment_count        integer,
    review_count         integer,
    head_ref             text,
    head_sha             text,
    base_ref             text,
    upstream_created_at  timestamptz NOT NULL,
    upstream_updated_at  timestamptz NOT NULL,
    closed_at            timestamptz,
    merged_at            timestamptz,
    deleted_at           timestamptz,
    mirrored_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (repository_id, native_id)
);
"#;
