//! GitLab merge request approvals: the people whose approval stands on a merge request (one row
//! each, dated by the act that recorded it), and on the merge request's row the review decision
//! (null: unknown) and when the approver list was last read whole. Keyed by the shared
//! `pull_request` row, so the eraser removes them with it.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS review_decision text
    CHECK (review_decision IN ('approved', 'changes_requested', 'review_required'));
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS approval_read_at timestamptz;
CREATE TABLE IF NOT EXISTS merge_request_approval (
    pull_request_id  uuid NOT NULL REFERENCES pull_request (id) ON DELETE CASCADE,
    username         text NOT NULL,
    approved_at      timestamptz NOT NULL,
    PRIMARY KEY (pull_request_id, username)
);
"#;
