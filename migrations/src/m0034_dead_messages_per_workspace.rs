//! Dead messages are kept per workspace up to a quota: a tenant whose deliveries all fail
//! (on purpose or not) displaces only its own oldest ones, never another's, and cannot grow the
//! table without bound. The index finds a workspace's dead messages, newest first.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE INDEX IF NOT EXISTS dead_message_workspace
    ON dead_message ((headers ->> 'Forgesync-Workspace'), created_at DESC, id DESC)
    WHERE headers ? 'Forgesync-Workspace';
"#;
