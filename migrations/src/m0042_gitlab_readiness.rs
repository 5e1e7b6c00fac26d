//! A GitLab merge request's readiness as its post-hook read or a sync page last stated it, on its
//! `pull_request` row (null: unknown): its reviewers with their review state, approval-derived
//! mergeability and detailed merge status, and the merge facts a merge hook lacks (merge commit,
//! merger). `review_decision` and `approval_read_at` came with m0039.
//!
//! Reviewers are a jsonb array `[{username, state}]` with the time it was received
//! (`reviewers_received_at`), not a child table: the list is a dated snapshot, only ever read and
//! replaced whole under the merge request's row lock and never queried per reviewer, so one
//! column written with the row keeps the compare-and-write one step and erases with the row.
//!
//! A standing approval's `approved_at` becomes nullable: an approval the read or sync finds in
//! GitLab's approver list has a date only where GitLab's approvals route names one (unknown is
//! null, never the read's time).

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS reviewers jsonb
    CHECK (reviewers IS NULL OR jsonb_typeof(reviewers) = 'array');
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS reviewers_received_at timestamptz;
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS review_decision text
    CHECK (review_decision IN ('approved', 'changes_requested', 'review_required'));
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS approval_read_at timestamptz;
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS mergeable boolean;
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS merge_status text;
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS merge_commit_sha text;
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS merged_by text;
ALTER TABLE merge_request_approval ALTER COLUMN approved_at DROP NOT NULL;
"#;
