//! gitlab-sync's per-project listing state, one row per project and item class: the incremental
//! watermark (the newest `updatedAt` a clean pass read; the next filtered pass reads from just
//! before it) and a requested BACKFILL's progress (pending, where it resumes, its last batch).
//! The rows belong to the mirrored repository and go with it.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS gitlab_listing_state (
    repository_id          uuid NOT NULL REFERENCES repository (id) ON DELETE CASCADE,
    class                  text NOT NULL CHECK (class IN ('issue', 'pull_request')),
    watermark              timestamptz,
    backfill_pending       boolean NOT NULL DEFAULT false,
    backfill_cursor        text,
    backfill_requested_by  uuid,
    backfill_batch_job     uuid,
    backfill_batch_at      timestamptz,
    PRIMARY KEY (repository_id, class)
);
"#;
