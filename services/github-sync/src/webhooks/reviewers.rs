//! Reviewer requests of a pull request (people and teams) as dated snapshots: every list arrives
//! whole and is dated by when we received it, so a backlogged or reordered delivery cannot
//! remove, re-add or restate a request over a list received later.

use lifecycle_core::snapshot::{self, DatedSnapshot, ListRead, SnapshotOutcome};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use super::payload;

/// GitHub's single page of review requests: a longer list may be missing entries.
pub const PAGE: usize = 100;

/// One review request, as stored in `pull_request.requested_reviewers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reviewer {
    /// A person, by login.
    User(String),
    /// A team, by slug.
    Team(String),
}

/// The whole list a pull request payload carries, or `None` when it carries no lists.
pub fn read(pr: &payload::PullRequest) -> Option<ListRead<Reviewer>> {
    let (users, teams) = (
        pr.requested_reviewers.as_ref()?,
        pr.requested_teams.as_ref()?,
    );
    if users.len() + teams.len() > PAGE {
        // Incomplete list: more than one page may hide requests, so it is not applied.
        return Some(ListRead::Partial);
    }
    let entries = users
        .iter()
        .map(|u| Reviewer::User(u.login.clone()))
        .chain(teams.iter().map(|t| Reviewer::Team(t.slug.clone())))
        .collect();
    Some(ListRead::Whole(entries))
}

/// A pull request's stored reviewer list and when it was received.
#[derive(sqlx::FromRow)]
struct StoredReviewers {
    requested_reviewers: Option<serde_json::Value>,
    requested_reviewers_received_at: Option<OffsetDateTime>,
}

/// Applies a list received at `received_at` to the pull request `pull_request_id`, with its row
/// locked, inside the caller's transaction.
pub async fn apply(
    txn: &mut sqlx::PgConnection,
    pull_request_id: Uuid,
    received_at: OffsetDateTime,
    read: ListRead<Reviewer>,
) -> Result<SnapshotOutcome, sqlx::Error> {
    Ok(apply_counted(txn, pull_request_id, received_at, read)
        .await?
        .0)
}

/// [`apply`], and whether the stored entries changed.
pub async fn apply_counted(
    txn: &mut sqlx::PgConnection,
    pull_request_id: Uuid,
    received_at: OffsetDateTime,
    read: ListRead<Reviewer>,
) -> Result<(SnapshotOutcome, bool), sqlx::Error> {
    // Stored with microsecond precision: compare at the precision the row keeps.
    let received_at = super::micros(received_at);
    let row: Option<StoredReviewers> = sqlx::query_as(
        "SELECT requested_reviewers, requested_reviewers_received_at FROM pull_request
          WHERE id = $1 FOR UPDATE",
    )
    .bind(pull_request_id)
    .fetch_optional(&mut *txn)
    .await?;
    let Some(row) = row else {
        return Ok((SnapshotOutcome::Stale, false));
    };
    let mut stored = row.requested_reviewers_received_at.map(|at| DatedSnapshot {
        received_at: at,
        entries: row
            .requested_reviewers
            .and_then(|e| serde_json::from_value::<Vec<Reviewer>>(e).ok())
            .unwrap_or_default(),
    });
    let before = stored.as_ref().map(|s| s.entries.clone());
    // Dated snapshot: received earlier changes nothing, the same instant restates.
    let outcome = snapshot::apply(&mut stored, received_at, read);
    let changed = outcome == SnapshotOutcome::Applied
        && before.as_ref() != stored.as_ref().map(|s| &s.entries);
    if let (SnapshotOutcome::Applied, Some(snapshot)) = (outcome, stored) {
        sqlx::query(
            "UPDATE pull_request SET requested_reviewers = $2, requested_reviewers_received_at = $3
              WHERE id = $1",
        )
        .bind(pull_request_id)
        .bind(serde_json::to_value(&snapshot.entries).unwrap_or_default())
        .bind(snapshot.received_at)
        .execute(&mut *txn)
        .await?;
    }
    metrics::counter!("github_reviewer_snapshots_total", "outcome" => match outcome {
        SnapshotOutcome::Applied => "applied",
        SnapshotOutcome::Stale => "stale",
        SnapshotOutcome::Incomplete => "incomplete",
    })
    .increment(1);
    Ok((outcome, changed))
}

/// Applies the lists a pull request payload carries, if it carries them.
pub async fn apply_payload(
    txn: &mut sqlx::PgConnection,
    pull_request_id: Uuid,
    received_at: OffsetDateTime,
    pr: &payload::PullRequest,
) -> Result<Option<SnapshotOutcome>, sqlx::Error> {
    match read(pr) {
        Some(list) => Ok(Some(apply(txn, pull_request_id, received_at, list).await?)),
        None => Ok(None),
    }
}
