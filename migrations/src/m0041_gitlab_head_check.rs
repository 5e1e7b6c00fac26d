//! The commit a merge request's head check is about and when it was observed (a read's request
//! time, a Pipeline Hook's JetStream time), beside the state m0010 added: an older observation
//! changes nothing.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS head_check_sha text;
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS head_check_observed_at timestamptz;
"#;
