//! When a Slack channel was paused: a message said before the pause but handled after it is
//! still covered by the consent it was said under.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
ALTER TABLE slack_channel ADD COLUMN IF NOT EXISTS paused_ts numeric(16,6);
"#;
