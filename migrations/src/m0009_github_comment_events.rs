//! Item events of comments, reviews and threads, and the dated resolution state of a thread.
//!
//! A comment edit, a review dismissal and a thread resolution belong to a comment, a review or
//! a thread, not to the version of the item they are filed under: two edits of one comment in
//! the same second are two edits, and two threads resolved at one pull request version are two
//! resolutions. Their source keys identify them, so they leave the (item, name, version) key,
//! as a checks completion already does.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
DROP INDEX IF EXISTS item_event_version;
CREATE UNIQUE INDEX IF NOT EXISTS item_event_version
    ON item_event (item_id, name, version)
    WHERE name NOT IN ('scm.pull_request.checks_completed',
                       'scm.issue.comment_edited', 'scm.pull_request.comment_edited',
                       'scm.pull_request.review_dismissed', 'scm.pull_request.thread_resolved');

-- When we received the thread's resolution state (JetStream store time): a resolved or
-- unresolved delivery received earlier than the stored one changes nothing.
ALTER TABLE review_thread ADD COLUMN IF NOT EXISTS resolution_received_at timestamptz;
"#;
