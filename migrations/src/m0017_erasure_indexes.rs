//! Indexes on the mirror's foreign keys that had none. Deleting an issue, a pull request, an item
//! event or a review thread makes Postgres find the rows that reference it (to cascade, or to set
//! NULL) once per deleted row; without an index on the referencing column each lookup scans the
//! whole referencing table, so erasing a repository took time quadratic in its size
//! (`cargo xtask bench eraser`). The columns that already lead an index (`repository_id`, and
//! `pull_request_id` of review, review_thread and review_comment) need none. Raw webhooks the
//! same: deleting a connection's `inbound_message` rows looks up replays of each (`replay_of`).

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE INDEX IF NOT EXISTS comment_issue ON comment (issue_id) WHERE issue_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS comment_pull_request
    ON comment (pull_request_id) WHERE pull_request_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS review_comment_thread
    ON review_comment (thread_id) WHERE thread_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS item_event_issue ON item_event (issue_id) WHERE issue_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS item_event_pull_request
    ON item_event (pull_request_id) WHERE pull_request_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS activity_event_issue
    ON activity_event (issue_id) WHERE issue_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS activity_event_pull_request
    ON activity_event (pull_request_id) WHERE pull_request_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS activity_event_item_event
    ON activity_event (item_event_id) WHERE item_event_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS inbound_message_replay_of
    ON inbound_message (replay_of) WHERE replay_of IS NOT NULL;
CREATE INDEX IF NOT EXISTS inbound_message_endpoint ON inbound_message (endpoint_id);
"#;
