//! Erasure records: one per erased connection (and one for a purged workspace's own part), with
//! the steps done and the rows and messages each removed, so an erasure interrupted anywhere
//! resumes where it stopped and a repeated trigger finds it done. The repositories a
//! connection's monitors were bound to are captured once, before the monitors go, each with its
//! fate under the orphan guard. These rows hold ids and counts only, never third-party content.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS erasure (
    id             uuid PRIMARY KEY,
    workspace_id   uuid NOT NULL,
    -- NULL: the workspace's own part of a purge (its event stream, then the purged mark).
    connection_id  uuid,
    trigger        text NOT NULL CHECK (trigger IN ('disconnect', 'purge')),
    status         text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done')),
    steps_done     jsonb NOT NULL DEFAULT '[]'::jsonb,
    counts         jsonb NOT NULL DEFAULT '{}'::jsonb,
    started_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS erasure_connection
    ON erasure (connection_id) WHERE connection_id IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS erasure_workspace
    ON erasure (workspace_id) WHERE connection_id IS NULL;
CREATE INDEX IF NOT EXISTS erasure_workspace_all ON erasure (workspace_id, started_at);

-- `workspace_lost`: no other monitor of the same workspace covered it at capture, so the
-- workspace's own derived rows and events of it go even when the repository is kept.
CREATE TABLE IF NOT EXISTS erasure_repository (
    erasure_id      uuid NOT NULL REFERENCES erasure (id),
    repository_id   uuid NOT NULL,
    workspace_lost  boolean NOT NULL,
    fate            text CHECK (fate IN ('deleted', 'kept')),
    PRIMARY KEY (erasure_id, repository_id)
);
"#;
