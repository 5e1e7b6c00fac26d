//! Who requested changes on a GitLab merge request (`merge_request_requested_change`), taken only
//! from GitLab's "requested changes" system note naming them (its author), whichever path saw the
//! note (the notes pass or a Note Hook). A live request withdraws its author's approval (GitLab
//! withdraws it without a hook of its own) and leaves the review decision unknown until GitLab is
//! read again; the withdrawal records `scm.pull_request.review_dismissed` keyed by the approval,
//! as an unapproval does. Written in the transaction that holds the merge request's row locked.

use lifecycle_core::gitlab::review::Readiness;
use lifecycle_core::source_key::LifecycleChange;
use time::OffsetDateTime;
use uuid::Uuid;

use super::approvals::StoredApprovals;
use crate::events::{self, Item, Origin};

/// One "requested changes" system note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestedChanges {
    /// The note's author: whoever requested changes.
    pub username: String,
    /// The note's native id.
    pub note_id: i64,
    /// The note's creation: when the request was made.
    pub requested_at: OffsetDateTime,
}

/// What recording a note did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Recorded {
    /// A request newer than the stored one of that person was stored.
    pub stored: bool,
    /// That person's approval was withdrawn.
    pub withdrew: bool,
}

/// Records `note` on merge request `item` (its row locked by the caller). A note the person's
/// stored request or approval is newer than changes nothing, so a redelivered, replayed or
/// re-listed note adds nothing.
pub async fn record(
    txn: &mut sqlx::PgConnection,
    item: &Item,
    note: &RequestedChanges,
    origin: Origin,
) -> Result<Recorded, sqlx::Error> {
    let Some(stored) = StoredApprovals::lock(&mut *txn, item.id).await? else {
        return Ok(Recorded::default());
    };
    let approved_at = stored.approved_at.get(&note.username).copied();
    // An approval given after the request replaced it: the note no longer stands.
    if approved_at.is_some_and(|at| at > note.requested_at) {
        return Ok(Recorded::default());
    }
    let upserted = sqlx::query(
        "INSERT INTO merge_request_requested_change (pull_request_id, username, note_id, requested_at)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (pull_request_id, username) DO UPDATE
            SET note_id = excluded.note_id, requested_at = excluded.requested_at
          WHERE (merge_request_requested_change.requested_at, merge_request_requested_change.note_id)
                < (excluded.requested_at, excluded.note_id)",
    )
    .bind(item.id)
    .bind(&note.username)
    .bind(note.note_id)
    .bind(note.requested_at)
    .execute(&mut *txn)
    .await?
    .rows_affected();
    if upserted == 0 {
        return Ok(Recorded::default());
    }
    // A live request changes its author's review: the decision is unknown until GitLab is read,
    // and their approval is withdrawn.
    let mut facts = stored.facts.clone();
    let withdrew = facts.approvals.remove(&note.username);
    facts.readiness = Readiness::default();
    if facts != stored.facts {
        stored
            .write(&mut *txn, item.id, &facts, note.requested_at)
            .await?;
    }
    if let (true, Some(approved_at)) = (withdrew, approved_at) {
        let review = format!("approval:{}", note.username);
        let change = LifecycleChange::Dismissal {
            review: &review,
            review_updated_at: approved_at,
        };
        events::record(&mut *txn, item, &change, note.requested_at, origin).await?;
    }
    Ok(Recorded {
        stored: true,
        withdrew,
    })
}

/// An approval by `username` accepted at `approved_at` ends their request for changes made
/// before it (GitLab moves the reviewer to approved).
pub async fn approved(
    txn: &mut sqlx::PgConnection,
    pull_request_id: Uuid,
    username: &str,
    approved_at: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let gone = sqlx::query(
        "DELETE FROM merge_request_requested_change
          WHERE pull_request_id = $1 AND username = $2 AND requested_at <= $3",
    )
    .bind(pull_request_id)
    .bind(username)
    .bind(approved_at)
    .execute(&mut *txn)
    .await?
    .rows_affected();
    Ok(gone > 0)
}

/// The people whose request for changes stands on `pull_request_id`, oldest first.
pub async fn standing(
    conn: &mut sqlx::PgConnection,
    pull_request_id: Uuid,
) -> Result<Vec<RequestedChanges>, sqlx::Error> {
    let rows: Vec<(String, i64, OffsetDateTime)> = sqlx::query_as(
        "SELECT username, note_id, requested_at FROM merge_request_requested_change
          WHERE pull_request_id = $1 ORDER BY requested_at, username",
    )
    .bind(pull_request_id)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(username, note_id, requested_at)| RequestedChanges {
            username,
            note_id,
            requested_at,
        })
        .collect())
}
