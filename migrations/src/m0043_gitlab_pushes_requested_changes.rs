//! GitLab pushes and requested changes.
//!
//! A push is identified by its move (head before, head after), not by the version of the merge
//! request it is filed under: two pushes in one second are two pushes, and a Push Hook names no
//! version at all. So `scm.pull_request.synchronized` leaves the (item, name, version) key, as
//! a comment edit did in m0009; its source key still absorbs a second report of the same move.
//!
//! `merge_request_requested_change`: who requested changes on a merge request, one row per
//! person, taken only from GitLab's "requested changes" system note naming them (its note id
//! and time). Keyed by the shared `pull_request` row, so the eraser removes it with it.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
DROP INDEX IF EXISTS item_event_version;
CREATE UNIQUE INDEX IF NOT EXISTS item_event_version
    ON item_event (item_id, name, version)
    WHERE name NOT IN ('scm.pull_request.checks_completed',
                       'scm.issue.comment_edited', 'scm.pull_request.comment_edited',
                       'scm.pull_request.review_dismissed', 'scm.pull_request.thread_resolved',
                       'scm.pull_request.synchronized');

CREATE TABLE IF NOT EXISTS merge_request_requested_change (
    pull_request_id  uuid NOT NULL REFERENCES pull_request (id) ON DELETE CASCADE,
    username         text NOT NULL,
    note_id          bigint NOT NULL,
    requested_at     timestamptz NOT NULL,
    PRIMARY KEY (pull_request_id, username)
);
"#;
