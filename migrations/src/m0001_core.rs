//! Core tables: tenancy, connections and their secrets, sync jobs, audit, the outbox and dead
//! messages. Enumerations are `text` with CHECK constraints so a new state is one migration away
//! and an unknown state can never be written.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS workspace (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    status      text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'purging', 'purged')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A NULL server_url is the kind's registered default instance (github.com, gitlab.com, ...).
CREATE TABLE IF NOT EXISTS provider_instance (
    id          uuid PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('github', 'gitlab', 'slack', 'outline')),
    server_url  text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS provider_instance_kind_url
    ON provider_instance (kind, COALESCE(server_url, ''));

CREATE TABLE IF NOT EXISTS connection (
    id                    uuid PRIMARY KEY,
    workspace_id          uuid NOT NULL REFERENCES workspace (id),
    kind                  text NOT NULL CHECK (kind IN ('github', 'gitlab', 'slack', 'outline')),
    status                text NOT NULL DEFAULT 'pending' CHECK (status IN
                              ('pending', 'active', 'suspended', 'paused', 'uninstalled', 'disconnected')),
    version               bigint NOT NULL DEFAULT 1,
    lifecycle_generation  bigint NOT NULL DEFAULT 0,
    provider_instance_id  uuid NOT NULL REFERENCES provider_instance (id),
    settings              jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS connection_workspace ON connection (workspace_id);

-- Secrets are AES-256-GCM ciphertexts; the key lives outside the database.
CREATE TABLE IF NOT EXISTS connection_secret (
    connection_id  uuid NOT NULL REFERENCES connection (id) ON DELETE CASCADE,
    name           text NOT NULL,
    key_id         text NOT NULL,
    nonce          bytea NOT NULL,
    ciphertext     bytea NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (connection_id, name)
);

-- sync_job, connection_activity and connection_audit hold no third-party content and survive
-- erasure, so they carry the connection id without a foreign key.
CREATE TABLE IF NOT EXISTS sync_job (
    id              uuid PRIMARY KEY,
    connection_id   uuid NOT NULL,
    workspace_id    uuid NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('github', 'gitlab', 'slack', 'outline')),
    job_type        text NOT NULL CHECK (job_type IN ('INITIAL', 'RECONCILIATION', 'BACKFILL')),
    trigger         text NOT NULL CHECK (trigger IN ('scheduled', 'manual', 'lifecycle')),
    status          text NOT NULL DEFAULT 'queued' CHECK (status IN
                        ('queued', 'running', 'succeeded', 'failed', 'canceled')),
    progress_done   bigint NOT NULL DEFAULT 0,
    progress_total  bigint,
    error           text,
    claimed_by      text,
    lease_until     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS sync_job_connection ON sync_job (connection_id, created_at DESC);
CREATE INDEX IF NOT EXISTS sync_job_queued ON sync_job (created_at) WHERE status = 'queued';

CREATE TABLE IF NOT EXISTS connection_activity (
    id             uuid PRIMARY KEY,
    connection_id  uuid NOT NULL,
    workspace_id   uuid NOT NULL,
    activity       text NOT NULL,
    detail         jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS connection_activity_connection
    ON connection_activity (connection_id, created_at DESC);

CREATE TABLE IF NOT EXISTS connection_audit (
    id             uuid PRIMARY KEY,
    connection_id  uuid NOT NULL,
    workspace_id   uuid NOT NULL,
    actor          text NOT NULL,
    action         text NOT NULL,
    before_status  text,
    after_status   text,
    version        bigint NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS connection_audit_connection
    ON connection_audit (connection_id, created_at DESC);

-- The transactional outbox: a row commits with the state change it announces; the relay
-- publishes it with its id as Nats-Msg-Id and stamps published_at.
CREATE TABLE IF NOT EXISTS outbox (
    id            uuid PRIMARY KEY,
    subject       text NOT NULL,
    headers       jsonb NOT NULL DEFAULT '{}'::jsonb,
    payload       bytea NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (created_at, id) WHERE published_at IS NULL;

CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox', '');
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS outbox_notify ON outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- A message no consumer could process within its delivery budget, kept for inspection and replay.
CREATE TABLE IF NOT EXISTS dead_message (
    id            uuid PRIMARY KEY,
    stream        text NOT NULL,
    consumer      text NOT NULL,
    subject       text NOT NULL,
    headers       jsonb NOT NULL DEFAULT '{}'::jsonb,
    payload       bytea NOT NULL,
    reason        text NOT NULL,
    attempts      bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    replayed_at   timestamptz,
    replay_count  integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS dead_message_created ON dead_message (created_at DESC);
"#;
