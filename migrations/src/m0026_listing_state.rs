//! The sync engine's per-scope listing state, one row per scope and item class, for every
//! vendor: the incremental watermark (the newest change a clean listing read, held back by what
//! was not read whole; it only advances) and a requested BACKFILL's batch position (pending,
//! where it resumes, its last batch). A scope is named by its kind and id (`repository`, a
//! channel, a collection), so no vendor widens a CHECK or a foreign key to use it; a vendor
//! declares the rows of its scopes for erasure.
//!
//! GitLab's `gitlab_listing_state` rows move here (scope kind `repository`). The old table stays,
//! empty, until a later migration drops it.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS listing_state (
    scope_kind             text NOT NULL,
    scope_id               uuid NOT NULL,
    class                  text NOT NULL,
    watermark              timestamptz,
    backfill_pending       boolean NOT NULL DEFAULT false,
    backfill_cursor        text,
    backfill_requested_by  uuid,
    backfill_batch_job     uuid,
    backfill_batch_at      timestamptz,
    PRIMARY KEY (scope_kind, scope_id, class)
);

INSERT INTO listing_state
       (scope_kind, scope_id, class, watermark, backfill_pending, backfill_cursor,
        backfill_requested_by, backfill_batch_job, backfill_batch_at)
SELECT 'repository', repository_id, class, watermark, backfill_pending, backfill_cursor,
       backfill_requested_by, backfill_batch_job, backfill_batch_at
  FROM gitlab_listing_state
    ON CONFLICT (scope_kind, scope_id, class) DO NOTHING;

DELETE FROM gitlab_listing_state;
"#;
