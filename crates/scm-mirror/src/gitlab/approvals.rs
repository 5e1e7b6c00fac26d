//! A GitLab merge request's standing approvals (`merge_request_approval`) and its review
//! decision, read locked as `lifecycle_core`'s [`ReviewFacts`] inside the transaction that holds
//! the merge request's row locked, and written back after its rules decided. The version and head
//! are the item row's: its own writer moves them.

use std::collections::{BTreeMap, BTreeSet};

use lifecycle_core::gitlab::review::{Readiness, ReviewDecision, ReviewFacts};
use time::OffsetDateTime;
use uuid::Uuid;

/// The stored text of a review decision.
pub fn decision_text(decision: ReviewDecision) -> &'static str {
    match decision {
        ReviewDecision::Approved => "approved",
        ReviewDecision::ChangesRequested => "changes_requested",
        ReviewDecision::ReviewRequired => "review_required",
    }
}

/// A stored decision; `None` (unknown) for a text this build does not know.
pub fn parse_decision(text: &str) -> Option<ReviewDecision> {
    match text {
        "approved" => Some(ReviewDecision::Approved),
        "changes_requested" => Some(ReviewDecision::ChangesRequested),
        "review_required" => Some(ReviewDecision::ReviewRequired),
        _ => None,
    }
}

/// The stored review facts of one merge request, and when each standing approval was recorded
/// where that is known (an approval a read found without GitLab naming its date has none here,
/// but stands in `facts.approvals`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredApprovals {
    pub facts: ReviewFacts<String>,
    pub approved_at: BTreeMap<String, OffsetDateTime>,
}

#[derive(sqlx::FromRow)]
struct Row {
    upstream_updated_at: OffsetDateTime,
    head_sha: Option<String>,
    approval_read_at: Option<OffsetDateTime>,
    review_decision: Option<String>,
    mergeable: Option<bool>,
    merge_status: Option<String>,
}

impl StoredApprovals {
    /// Reads the facts of merge request `pull_request_id`, its row and approvals locked;
    /// `None` when the row does not exist.
    pub async fn lock(
        txn: &mut sqlx::PgConnection,
        pull_request_id: Uuid,
    ) -> Result<Option<StoredApprovals>, sqlx::Error> {
        let row: Option<Row> = sqlx::query_as(
            "SELECT upstream_updated_at, head_sha, approval_read_at, review_decision, mergeable,
                    merge_status
               FROM pull_request WHERE id = $1 FOR UPDATE",
        )
        .bind(pull_request_id)
        .fetch_optional(&mut *txn)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let approvals: Vec<(String, Option<OffsetDateTime>)> = sqlx::query_as(
            "SELECT username, approved_at FROM merge_request_approval
              WHERE pull_request_id = $1 ORDER BY username FOR UPDATE",
        )
        .bind(pull_request_id)
        .fetch_all(&mut *txn)
        .await?;
        let standing: BTreeSet<String> = approvals.iter().map(|(u, _)| u.clone()).collect();
        let approved_at: BTreeMap<String, OffsetDateTime> = approvals
            .into_iter()
            .filter_map(|(u, at)| Some((u, at?)))
            .collect();
        Ok(Some(StoredApprovals {
            facts: ReviewFacts {
                version: row.upstream_updated_at,
                head: row.head_sha.unwrap_or_default(),
                approvals: standing,
                approval_read_at: row.approval_read_at,
                readiness: Readiness {
                    decision: row.review_decision.as_deref().and_then(parse_decision),
                    mergeable: row.mergeable,
                    merge_status: row.merge_status,
                },
            },
            approved_at,
        }))
    }

    /// Writes `facts` over this stored state: approvals that no longer stand go, new ones are
    /// dated `at`, and the decision, mergeability, merge status and approval read time are
    /// replaced.
    pub async fn write(
        &self,
        txn: &mut sqlx::PgConnection,
        pull_request_id: Uuid,
        facts: &ReviewFacts<String>,
        at: OffsetDateTime,
    ) -> Result<(), sqlx::Error> {
        self.write_dated(txn, pull_request_id, facts, |_| Some(at))
            .await
    }

    /// [`StoredApprovals::write`], each new approval dated by `dated` (`None`: unknown).
    pub async fn write_dated(
        &self,
        txn: &mut sqlx::PgConnection,
        pull_request_id: Uuid,
        facts: &ReviewFacts<String>,
        dated: impl Fn(&str) -> Option<OffsetDateTime>,
    ) -> Result<(), sqlx::Error> {
        let gone: Vec<&String> = self
            .facts
            .approvals
            .iter()
            .filter(|u| !facts.approvals.contains(*u))
            .collect();
        let new: Vec<&String> = facts
            .approvals
            .iter()
            .filter(|u| !self.facts.approvals.contains(*u))
            .collect();
        if !gone.is_empty() {
            sqlx::query(
                "DELETE FROM merge_request_approval
                  WHERE pull_request_id = $1 AND username = ANY($2)",
            )
            .bind(pull_request_id)
            .bind(gone)
            .execute(&mut *txn)
            .await?;
        }
        if !new.is_empty() {
            let dates: Vec<Option<OffsetDateTime>> = new.iter().map(|u| dated(u)).collect();
            sqlx::query(
                "INSERT INTO merge_request_approval (pull_request_id, username, approved_at)
                 SELECT $1, u, d FROM unnest($2::text[], $3::timestamptz[]) AS n (u, d)
                 ON CONFLICT DO NOTHING",
            )
            .bind(pull_request_id)
            .bind(new)
            .bind(dates)
            .execute(&mut *txn)
            .await?;
        }
        sqlx::query(
            "UPDATE pull_request
                SET review_decision = $2, approval_read_at = $3, mergeable = $4, merge_status = $5
              WHERE id = $1",
        )
        .bind(pull_request_id)
        .bind(facts.readiness.decision.map(decision_text))
        .bind(facts.approval_read_at)
        .bind(facts.readiness.mergeable)
        .bind(facts.readiness.merge_status.as_deref())
        .execute(&mut *txn)
        .await?;
        Ok(())
    }
}
