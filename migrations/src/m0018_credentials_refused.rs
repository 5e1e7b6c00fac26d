//! A connection whose vendor refused its credentials (401, or 403 for a missing permission)
//! carries when and why until an operator replaces its secrets; its schedules skip it meanwhile.
//! `credentials_replaced_at` keeps a refusal of the old secrets from flagging the new ones.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
ALTER TABLE connection ADD COLUMN IF NOT EXISTS credentials_refused_at timestamptz;
ALTER TABLE connection ADD COLUMN IF NOT EXISTS credentials_refusal text;
ALTER TABLE connection ADD COLUMN IF NOT EXISTS credentials_replaced_at timestamptz;
"#;
