//! When a repository's stored name was last set by a rename delivery (its JetStream store time),
//! so a rename received earlier than the stored one changes nothing.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str =
    "ALTER TABLE repository ADD COLUMN IF NOT EXISTS renamed_at timestamptz";
