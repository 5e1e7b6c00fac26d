//! At most one queued job per connection and type: a second request for the same work is
//! answered with the job already waiting, so a connection cannot queue without bound and take
//! every job slot in turn. Duplicates queued before this are canceled, the oldest kept.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
UPDATE sync_job j
   SET status = 'canceled', finished_at = now(), updated_at = now(),
       error = 'canceled: the same work was already queued for this connection'
 WHERE j.status = 'queued'
   AND EXISTS (SELECT 1 FROM sync_job o
                WHERE o.connection_id = j.connection_id AND o.job_type = j.job_type
                  AND o.status = 'queued'
                  AND (o.created_at, o.id) < (j.created_at, j.id));
CREATE UNIQUE INDEX IF NOT EXISTS sync_job_one_queued
    ON sync_job (connection_id, job_type) WHERE status = 'queued';
"#;
