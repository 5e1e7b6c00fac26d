//! Jobs take turns. A job whose connection already runs one, or whose workspace runs as many as
//! it may, is not run and not left waiting on the bus either: its message is settled and the row
//! marked `deferred_at`, and a finished job (or the periodic sweep) queues its message again.
//! The indexes serve the two questions a claim asks (what runs for this workspace, what waits).

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
ALTER TABLE sync_job ADD COLUMN IF NOT EXISTS deferred_at timestamptz;
CREATE INDEX IF NOT EXISTS sync_job_running_by_workspace
    ON sync_job (workspace_id, kind) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS sync_job_deferred
    ON sync_job (kind, deferred_at) WHERE deferred_at IS NOT NULL;
"#;
