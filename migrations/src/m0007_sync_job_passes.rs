//! How many passes a sync job has started: a manual BACKFILL repeats an incomplete pass.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str =
    "ALTER TABLE sync_job ADD COLUMN IF NOT EXISTS passes integer NOT NULL DEFAULT 0";
