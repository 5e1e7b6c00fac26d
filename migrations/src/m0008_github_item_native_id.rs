//! Items by native id alone, across repositories: a webhook finds work misfiled under another
//! repository row of the same instance before it writes.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE INDEX IF NOT EXISTS issue_native_id ON issue (native_id);
CREATE INDEX IF NOT EXISTS pull_request_native_id ON pull_request (native_id);
"#;
