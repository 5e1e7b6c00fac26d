//! A GitLab merge request's readiness as one read states it (a `MergeRequestReadiness` read after
//! a hook, or a node of a sync page), and its write over the stored row: reviewers as a dated
//! snapshot (`snapshot::apply` with `merge_reviewer_state`), approvals and the decision through
//! `ReviewFacts::apply_read`, the head check through `checks::observe`, and the merge facts a
//! merge hook lacks. Every fact is judged at its own GraphQL error path: a failed one is unknown,
//! never a value.

use std::collections::BTreeMap;

use gitlab_client::{
    DetailedMergeStatus, GitlabClient, MergeRequestNode, MergeRequestState, Page, ReviewState,
};
use lifecycle_core::checks::{self, CheckState, HeadCheck};
use lifecycle_core::gitlab::checks::gitlab_pipeline_state;
use lifecycle_core::gitlab::review::{
    ReadinessRead, ReviewOutcome, ReviewerState, StatedReview, merge_reviewer_state,
};
use lifecycle_core::partial::Field;
use lifecycle_core::snapshot::{self, DatedSnapshot, ListRead, SnapshotOutcome};
use scm_mirror::gitlab::approvals::StoredApprovals;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::webhooks::pipelines::{state_text, stored_state};

/// One reviewer as `pull_request.reviewers` stores them (m0042).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredReviewer {
    pub username: String,
    /// The review state; `None` when unknown.
    pub state: Option<String>,
}

/// The stored text of a reviewer state.
pub fn reviewer_state_text(state: ReviewerState) -> &'static str {
    match state {
        ReviewerState::Unreviewed => "unreviewed",
        ReviewerState::Reviewing => "reviewing",
        ReviewerState::Reviewed => "reviewed",
        ReviewerState::RequestedChanges => "requested_changes",
        ReviewerState::Approved => "approved",
        ReviewerState::Unapproved => "unapproved",
    }
}

/// The reviewer state a stored text names; `None` for one this build does not know.
pub fn stored_reviewer_state(text: &str) -> Option<ReviewerState> {
    Some(match text {
        "unreviewed" => ReviewerState::Unreviewed,
        "reviewing" => ReviewerState::Reviewing,
        "reviewed" => ReviewerState::Reviewed,
        "requested_changes" => ReviewerState::RequestedChanges,
        "approved" => ReviewerState::Approved,
        "unapproved" => ReviewerState::Unapproved,
        _ => return None,
    })
}

fn stated(state: Option<&ReviewState>) -> StatedReview<ReviewerState> {
    match state {
        // GitLab named the reviewer without a state.
        None => StatedReview::NotStated,
        Some(ReviewState::Unreviewed) => StatedReview::Known(ReviewerState::Unreviewed),
        Some(ReviewState::ReviewStarted) => StatedReview::Known(ReviewerState::Reviewing),
        Some(ReviewState::Reviewed) => StatedReview::Known(ReviewerState::Reviewed),
        Some(ReviewState::RequestedChanges) => StatedReview::Known(ReviewerState::RequestedChanges),
        Some(ReviewState::Approved) => StatedReview::Known(ReviewerState::Approved),
        Some(ReviewState::Unapproved) => StatedReview::Known(ReviewerState::Unapproved),
        Some(ReviewState::Other(_)) => StatedReview::Unrecognized,
    }
}

/// GitLab's detailed merge status as stored (`mergeable`, `not_approved`, ...).
pub fn merge_status_text(status: &DetailedMergeStatus) -> String {
    let text = match status {
        DetailedMergeStatus::BlockedStatus => "blocked_status",
        DetailedMergeStatus::BrokenStatus => "broken_status",
        DetailedMergeStatus::Checking => "checking",
        DetailedMergeStatus::CiMustPass => "ci_must_pass",
        DetailedMergeStatus::CiStillRunning => "ci_still_running",
        DetailedMergeStatus::DiscussionsNotResolved => "discussions_not_resolved",
        DetailedMergeStatus::DraftStatus => "draft_status",
        DetailedMergeStatus::ExternalStatusChecks => "external_status_checks",
        DetailedMergeStatus::Mergeable => "mergeable",
        DetailedMergeStatus::NotApproved => "not_approved",
        DetailedMergeStatus::NotOpen => "not_open",
        DetailedMergeStatus::PoliciesDenied => "policies_denied",
        DetailedMergeStatus::Preparing => "preparing",
        DetailedMergeStatus::Unchecked => "unchecked",
        DetailedMergeStatus::RequestedChanges => "requested_changes",
        DetailedMergeStatus::ApprovalsSyncing => "approvals_syncing",
        DetailedMergeStatus::Other(other) => return other.to_ascii_lowercase(),
    };
    text.to_owned()
}

/// What one read states about a merge request's readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadFacts {
    /// When the read was requested (the page's `fetched_at`).
    pub requested_at: OffsetDateTime,
    /// The merge request's native id.
    pub native_id: i64,
    /// `open`, `closed` or `merged`.
    pub state: &'static str,
    /// Its `updatedAt`.
    pub version: OffsetDateTime,
    /// Its head (`diffHeadSha`); `None` when failed or absent: no head-specific fact is taken.
    pub head: Option<String>,
    /// Not `checking` nor `approvals_syncing`.
    pub settled: bool,
    pub reviewers: ListRead<(String, StatedReview<ReviewerState>)>,
    pub approvers: ListRead<String>,
    pub approved: Field<bool>,
    pub requested_changes_status: Field<bool>,
    pub mergeable: Field<bool>,
    pub merge_status: Field<String>,
    /// The head check the read observed and the commit it is about; `None` records none.
    pub head_check: Option<(CheckState, String)>,
    pub merged_at: Option<OffsetDateTime>,
    pub merge_commit_sha: Option<String>,
    pub merged_by: Option<String>,
}

impl ReadFacts {
    /// The facts node `i` of `page` states; `None` when it states none (a state this build does
    /// not know, a malformed id).
    pub fn of(page: &Page<MergeRequestNode>, i: usize, node: &MergeRequestNode) -> Option<Self> {
        let unknown = |field: &str| page.field_unknown(i, field);
        let state = match node.state {
            MergeRequestState::Opened | MergeRequestState::Locked => "open",
            MergeRequestState::Closed => "closed",
            MergeRequestState::Merged => "merged",
            _ => return None,
        };
        let head = node
            .diff_head_sha
            .clone()
            .filter(|_| !unknown("diffHeadSha"));
        let status = if unknown("detailedMergeStatus") {
            Field::Unknown
        } else {
            match &node.detailed_merge_status {
                Some(s) => Field::Known(s.clone()),
                None => Field::Absent,
            }
        };
        // GitLab still checking or syncing approvals: unsettled, nothing approval-derived.
        let settled = !matches!(
            status,
            Field::Known(DetailedMergeStatus::Checking | DetailedMergeStatus::ApprovalsSyncing)
        );
        let reviewers = match &node.reviewers {
            // A failed or incomplete list is not a list.
            Some(c) if !unknown("reviewers") && !c.page_info.has_next_page => {
                match c
                    .nodes
                    .as_ref()
                    .map(|n| n.iter().cloned().collect::<Option<Vec<_>>>())
                {
                    Some(Some(nodes)) => ListRead::Whole(
                        nodes
                            .into_iter()
                            .map(|r| {
                                let state = r
                                    .merge_request_interaction
                                    .as_ref()
                                    .and_then(|m| m.review_state.as_ref());
                                (r.username, stated(state))
                            })
                            .collect(),
                    ),
                    _ => ListRead::Partial,
                }
            }
            _ => ListRead::Partial,
        };
        let approvers = match &node.approved_by {
            // A failed approver list is not an empty list.
            Some(c) if !unknown("approvedBy") && !c.page_info.has_next_page => {
                match c
                    .nodes
                    .as_ref()
                    .map(|n| n.iter().cloned().collect::<Option<Vec<_>>>())
                {
                    Some(Some(nodes)) => {
                        ListRead::Whole(nodes.into_iter().map(|a| a.username).collect())
                    }
                    _ => ListRead::Partial,
                }
            }
            _ => ListRead::Partial,
        };
        let head_check = if unknown("headPipeline") {
            // A failed headPipeline records no check state.
            None
        } else {
            match &node.head_pipeline {
                Some(p) => {
                    let state = gitlab_pipeline_state(Field::Known(Some(p.status.as_str())));
                    // A pipeline the read names with its commit is recorded for that commit.
                    let sha = p.sha.clone().or_else(|| head.clone());
                    state.zip(sha)
                }
                // Only null without an error means no pipeline, for the head read.
                None => head.clone().map(|h| (CheckState::NoPipeline, h)),
            }
        };
        let known_text = |field: &str, v: Option<String>| v.filter(|_| !unknown(field));
        Some(ReadFacts {
            requested_at: page.fetched_at,
            native_id: crate::mirror::gid_number(node.id.inner())?,
            state,
            version: node.updated_at.0,
            head,
            settled,
            reviewers,
            approvers,
            approved: if unknown("approved") {
                Field::Unknown
            } else {
                Field::Known(node.approved)
            },
            requested_changes_status: match &status {
                Field::Known(s) => Field::Known(*s == DetailedMergeStatus::RequestedChanges),
                Field::Absent => Field::Absent,
                Field::Unknown => Field::Unknown,
            },
            mergeable: match node.mergeable {
                Some(m) if !unknown("mergeable") => Field::Known(m),
                _ => Field::Unknown,
            },
            merge_status: match &status {
                Field::Known(s) => Field::Known(merge_status_text(s)),
                Field::Absent => Field::Absent,
                Field::Unknown => Field::Unknown,
            },
            head_check,
            merged_at: node.merged_at.map(|t| t.0).filter(|_| !unknown("mergedAt")),
            merge_commit_sha: known_text("mergeCommitSha", node.merge_commit_sha.clone()),
            merged_by: known_text(
                "mergeUser",
                node.merge_user.as_ref().map(|u| u.username.clone()),
            ),
        })
    }
}

/// Completes the reviewer lists GitLab left with more pages (`MergeRequestReviewers`), in place.
/// A list whose completion fails keeps `hasNextPage` and so stays incomplete (never applied).
pub async fn complete_reviewers(
    client: &GitlabClient,
    project_path: &str,
    page: &mut Page<MergeRequestNode>,
) {
    for node in page.nodes.iter_mut().flatten() {
        let Some(list) = node.reviewers.as_mut() else {
            continue;
        };
        if !list.page_info.has_next_page {
            continue;
        }
        let Ok(iid) = node.iid.parse::<u64>() else {
            continue;
        };
        let mut after = list.page_info.end_cursor.clone();
        let mut more = Vec::new();
        // Bounded: a list that does not end in 50 pages stays incomplete.
        for _ in 0..50 {
            let Ok((Some(next), errors)) = client
                .merge_request_reviewers_page(
                    project_path,
                    iid,
                    gitlab_client::MAX_PAGE_SIZE,
                    after.as_deref(),
                )
                .await
            else {
                break;
            };
            if !errors.is_empty() {
                break;
            }
            let Some(nodes) = next.nodes else { break };
            more.extend(nodes);
            if !next.page_info.has_next_page {
                list.nodes.get_or_insert_with(Vec::new).append(&mut more);
                list.page_info.has_next_page = false;
                break;
            }
            after = next.page_info.end_cursor;
        }
    }
}

#[derive(sqlx::FromRow)]
struct Row {
    state: String,
    upstream_updated_at: OffsetDateTime,
    head_sha: Option<String>,
    reviewers: Option<sqlx::types::Json<Vec<StoredReviewer>>>,
    reviewers_received_at: Option<OffsetDateTime>,
    merged_at: Option<OffsetDateTime>,
    head_check_state: Option<String>,
    head_check_sha: Option<String>,
    head_check_observed_at: Option<OffsetDateTime>,
}

/// What [`apply`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Applied {
    /// Whether a stored fact changed.
    pub changed: bool,
    /// The merge time stored after the write (a merged request's).
    pub merged_at: Option<OffsetDateTime>,
}

/// Writes `read` over merge request `pull_request_id` (the caller admitted the delivery or the
/// pass for its project, and `read` is about this merge request). `approval_dates`: GitLab's
/// `approved_at` of each standing approval, only when its approvals route named exactly the
/// approvers `read` lists.
pub async fn apply(
    txn: &mut sqlx::PgConnection,
    pull_request_id: Uuid,
    read: &ReadFacts,
    approval_dates: Option<&BTreeMap<String, Option<OffsetDateTime>>>,
) -> Result<Applied, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(
        "SELECT state, upstream_updated_at, head_sha, reviewers, reviewers_received_at, merged_at,
                head_check_state, head_check_sha, head_check_observed_at
           FROM pull_request WHERE id = $1 FOR UPDATE",
    )
    .bind(pull_request_id)
    .fetch_optional(&mut *txn)
    .await?;
    let Some(row) = row else {
        return Ok(Applied::default());
    };
    let mut changed = false;
    // Mutable readiness: both open or both merged, and a version not older than stored.
    let same_state = row.state == read.state && matches!(read.state, "open" | "merged");
    if same_state
        && read.version >= row.upstream_updated_at
        && let ListRead::Whole(named) = &read.reviewers
    {
        changed |= write_reviewers(txn, pull_request_id, &row, read.requested_at, named).await?;
    }
    if same_state && let Some(head) = &read.head {
        changed |= write_review_facts(txn, pull_request_id, read, head, approval_dates).await?;
    }
    if let Some((state, sha)) = &read.head_check {
        let mut stored = match (
            row.head_check_state.as_deref().and_then(stored_state),
            row.head_check_sha.clone(),
        ) {
            (Some(state), Some(head)) => Some(HeadCheck {
                state,
                head,
                observed_at: row.head_check_observed_at,
            }),
            _ => None,
        };
        let observation = HeadCheck {
            state: *state,
            head: sha.clone(),
            observed_at: Some(read.requested_at),
        };
        // Head checks are dated observations: an older read changes nothing.
        if checks::observe(&mut stored, observation) {
            let updated = sqlx::query(
                "UPDATE pull_request
                    SET head_check_state = $2, head_check_sha = $3, head_check_observed_at = $4
                  WHERE id = $1
                    AND (head_check_state, head_check_sha, head_check_observed_at)
                        IS DISTINCT FROM ($2, $3, $4)",
            )
            .bind(pull_request_id)
            .bind(state_text(*state))
            .bind(sha)
            .bind(read.requested_at)
            .execute(&mut *txn)
            .await?;
            changed |= updated.rows_affected() > 0;
        }
    }
    let mut merged_at = row.merged_at.filter(|_| row.state == "merged");
    // Merge facts a merge hook lacks: same request, both merged, the same head; a recorded
    // merger, commit or time is never replaced.
    if row.state == "merged" && read.state == "merged" && read.head == row.head_sha {
        let filled: Option<(Option<OffsetDateTime>, bool)> = sqlx::query_as(
            "UPDATE pull_request
                SET merge_commit_sha = COALESCE(merge_commit_sha, $2),
                    merged_by = COALESCE(merged_by, $3),
                    merged_at = COALESCE(merged_at, $4),
                    closed_at = COALESCE(closed_at, merged_at, $4)
              WHERE id = $1
                AND (merge_commit_sha IS NULL AND $2::text IS NOT NULL
                     OR merged_by IS NULL AND $3::text IS NOT NULL
                     OR merged_at IS NULL AND $4::timestamptz IS NOT NULL)
              RETURNING merged_at, true",
        )
        .bind(pull_request_id)
        .bind(read.merge_commit_sha.as_deref())
        .bind(read.merged_by.as_deref())
        .bind(read.merged_at)
        .fetch_optional(&mut *txn)
        .await?;
        if let Some((at, _)) = filled {
            changed = true;
            merged_at = at;
        }
    }
    Ok(Applied { changed, merged_at })
}

/// The stated review of a reviewer a hook names with `state` (GitLab 18.6+), or without.
pub fn hook_review(state: Option<&str>) -> StatedReview<ReviewerState> {
    match state {
        None => StatedReview::NotStated,
        Some("unreviewed") => StatedReview::Known(ReviewerState::Unreviewed),
        Some("review_started") => StatedReview::Known(ReviewerState::Reviewing),
        Some("reviewed") => StatedReview::Known(ReviewerState::Reviewed),
        Some("requested_changes") => StatedReview::Known(ReviewerState::RequestedChanges),
        Some("approved") => StatedReview::Known(ReviewerState::Approved),
        Some("unapproved") => StatedReview::Known(ReviewerState::Unapproved),
        Some(_) => StatedReview::Unrecognized,
    }
}

/// Writes the whole reviewer list a Merge Request Hook received at `received_at` states, in the
/// hook's transaction (the row locked there): a dated snapshot, like a read's.
pub async fn apply_hook_reviewers(
    txn: &mut sqlx::PgConnection,
    pull_request_id: Uuid,
    version: OffsetDateTime,
    received_at: OffsetDateTime,
    named: Vec<(String, StatedReview<ReviewerState>)>,
) -> Result<bool, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(
        "SELECT state, upstream_updated_at, head_sha, reviewers, reviewers_received_at, merged_at,
                head_check_state, head_check_sha, head_check_observed_at
           FROM pull_request WHERE id = $1 FOR UPDATE",
    )
    .bind(pull_request_id)
    .fetch_optional(&mut *txn)
    .await?;
    let Some(row) = row else {
        return Ok(false);
    };
    // An older payload changes nothing.
    if version < row.upstream_updated_at {
        return Ok(false);
    }
    write_reviewers(txn, pull_request_id, &row, received_at, &named).await
}

/// The reviewer list as a dated snapshot: each named reviewer's state merged with the stored one,
/// applied only if whole and not received before the stored list.
async fn write_reviewers(
    txn: &mut sqlx::PgConnection,
    pull_request_id: Uuid,
    row: &Row,
    received_at: OffsetDateTime,
    named: &[(String, StatedReview<ReviewerState>)],
) -> Result<bool, sqlx::Error> {
    let stored: Vec<StoredReviewer> = row
        .reviewers
        .as_ref()
        .map(|j| j.0.clone())
        .unwrap_or_default();
    let stored_state = |username: &str| {
        stored
            .iter()
            .find(|r| r.username == username)
            .and_then(|r| r.state.as_deref())
            .and_then(stored_reviewer_state)
    };
    let entries: Vec<StoredReviewer> = named
        .iter()
        .map(|(username, state)| StoredReviewer {
            username: username.clone(),
            state: merge_reviewer_state(stored_state(username), *state)
                .map(|s| reviewer_state_text(s).to_owned()),
        })
        .collect();
    let mut snapshot = match (&row.reviewers, row.reviewers_received_at) {
        (Some(_), Some(received_at)) => Some(DatedSnapshot {
            received_at,
            entries: stored.clone(),
        }),
        _ => None,
    };
    if snapshot::apply(&mut snapshot, received_at, ListRead::Whole(entries))
        != SnapshotOutcome::Applied
    {
        return Ok(false);
    }
    let Some(snapshot) = snapshot else {
        return Ok(false);
    };
    let changed = row.reviewers.is_none() || snapshot.entries != stored;
    sqlx::query("UPDATE pull_request SET reviewers = $2, reviewers_received_at = $3 WHERE id = $1")
        .bind(pull_request_id)
        .bind(sqlx::types::Json(&snapshot.entries))
        .bind(snapshot.received_at)
        .execute(&mut *txn)
        .await?;
    Ok(changed)
}

/// Approvals, decision, mergeability and merge status through `ReviewFacts::apply_read`.
async fn write_review_facts(
    txn: &mut sqlx::PgConnection,
    pull_request_id: Uuid,
    read: &ReadFacts,
    head: &str,
    approval_dates: Option<&BTreeMap<String, Option<OffsetDateTime>>>,
) -> Result<bool, sqlx::Error> {
    let Some(stored) = StoredApprovals::lock(&mut *txn, pull_request_id).await? else {
        return Ok(false);
    };
    // The decision reads the reviewers' states as this read states them over the stored ones.
    let reviewers = match &read.reviewers {
        ListRead::Whole(named) => {
            let row: Option<sqlx::types::Json<Vec<StoredReviewer>>> =
                sqlx::query_scalar("SELECT reviewers FROM pull_request WHERE id = $1")
                    .bind(pull_request_id)
                    .fetch_one(&mut *txn)
                    .await?;
            let stored = row.map(|j| j.0).unwrap_or_default();
            ListRead::Whole(
                named
                    .iter()
                    .filter_map(|(username, state)| {
                        let before = stored
                            .iter()
                            .find(|r| &r.username == username)
                            .and_then(|r| r.state.as_deref())
                            .and_then(stored_reviewer_state);
                        merge_reviewer_state(before, *state)
                    })
                    .collect(),
            )
        }
        ListRead::Partial => ListRead::Partial,
    };
    let mut facts = stored.facts.clone();
    let outcome = facts.apply_read(ReadinessRead {
        requested_at: read.requested_at,
        version: read.version,
        head: head.to_owned(),
        settled: read.settled,
        reviewers,
        approvers: read.approvers.clone(),
        approved: read.approved,
        requested_changes_status: read.requested_changes_status,
        mergeable: read.mergeable,
        merge_status: read.merge_status.clone(),
    });
    match outcome {
        ReviewOutcome::Rejected(rejection) => {
            // The version, head and dated-snapshot gates: the read changes no review fact.
            tracing::info!(%pull_request_id, ?rejection, "a readiness read changed no review fact");
            Ok(false)
        }
        ReviewOutcome::Accepted { .. } => {
            let dated = |u: &str| approval_dates.and_then(|d| d.get(u).copied().flatten());
            let mut changed = facts != stored.facts;
            stored
                .write_dated(&mut *txn, pull_request_id, &facts, dated)
                .await?;
            if let (Some(dates), ListRead::Whole(_)) = (approval_dates, &read.approvers) {
                // GitLab's own dates for the standing rows it named exactly: an absent date is
                // unknown.
                for (username, at) in dates {
                    let updated = sqlx::query(
                        "UPDATE merge_request_approval SET approved_at = $3
                          WHERE pull_request_id = $1 AND username = $2
                            AND approved_at IS DISTINCT FROM $3",
                    )
                    .bind(pull_request_id)
                    .bind(username)
                    .bind(at)
                    .execute(&mut *txn)
                    .await?;
                    changed |= updated.rows_affected() > 0;
                }
            }
            Ok(changed)
        }
    }
}
