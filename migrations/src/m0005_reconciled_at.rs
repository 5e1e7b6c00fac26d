//! When a repository last finished a complete reconcile, for the scheduled pass's cooldown.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str =
    "ALTER TABLE repository ADD COLUMN IF NOT EXISTS reconciled_at timestamptz";
