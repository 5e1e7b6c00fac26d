//! A GitLab merge request's review facts after a push: `ReviewFacts::push` (the decision,
//! mergeability and merge status are unknown for the new head; approvals stay), applied by
//! whichever writer moved the stored head (a Merge Request Hook, a sync page) or saw a push leave
//! it (a Push Hook), in its transaction.

use uuid::Uuid;

use super::approvals::StoredApprovals;

/// Applies `ReviewFacts::push` to merge request `pull_request_id` at its stored head (the caller
/// holds the row locked and wrote any new head already); whether a stored fact changed.
pub async fn head_moved(
    txn: &mut sqlx::PgConnection,
    pull_request_id: Uuid,
) -> Result<bool, sqlx::Error> {
    let Some(stored) = StoredApprovals::lock(&mut *txn, pull_request_id).await? else {
        return Ok(false);
    };
    let mut facts = stored.facts.clone();
    let head = facts.head.clone();
    // A push leaves readiness unknown for the new head; the recorded approvals stay.
    facts.push(&head);
    if facts == stored.facts {
        return Ok(false);
    }
    let version = facts.version;
    stored
        .write(&mut *txn, pull_request_id, &facts, version)
        .await?;
    Ok(true)
}
