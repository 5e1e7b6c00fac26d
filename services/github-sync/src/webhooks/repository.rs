//! `repository` webhooks (owner-level subject). `deleted` removes the repository's mirror (its
//! items and everything derived from them cascade) and every monitor of it on that instance;
//! `renamed` re-keys the mirrored row and every monitor of it by native id, so the consumer
//! filters follow; `transferred` is left to the next reconcile.

use serde::Deserialize;
use sqlx::PgPool;

use super::payload::Repository;
use super::{Outcome, Webhook, WebhookError, parse};
use crate::monitors;

#[derive(Debug, Deserialize)]
struct RepositoryEvent {
    action: String,
    repository: Repository,
    #[serde(default)]
    changes: Option<Changes>,
}

/// `changes` of `renamed`: `{"repository": {"name": {"from": "old"}}}`.
#[derive(Debug, Default, Deserialize)]
struct Changes {
    #[serde(default)]
    repository: Option<RenamedFrom>,
}

#[derive(Debug, Deserialize)]
struct RenamedFrom {
    name: From,
}

#[derive(Debug, Deserialize)]
struct From {
    from: String,
}

/// Handles a `repository` delivery.
pub async fn handle(pool: &PgPool, hook: &Webhook<'_>) -> Result<Outcome, WebhookError> {
    let event: RepositoryEvent = parse(hook)?;
    match event.action.as_str() {
        "deleted" => {
            let removed = delete(pool, hook.provider_instance_id, event.repository.id).await?;
            tracing::info!(
                native_id = event.repository.id,
                removed,
                "repository deleted upstream; mirror removed"
            );
            Ok(Outcome::Applied)
        }
        "renamed" => {
            let repo = &event.repository;
            let previous = event
                .changes
                .and_then(|c| c.repository)
                .map(|r| r.name.from);
            let mut txn = pool.begin().await?;
            // Rename within an owner: re-keyed now by native id (legacy monitors by the old name).
            let previous: Vec<(&str, &str)> = previous
                .as_deref()
                .map(|name| (repo.owner.login.as_str(), name))
                .into_iter()
                .collect();
            let done = monitors::rekey(
                &mut txn,
                hook.provider_instance_id,
                repo.id,
                &repo.owner.login,
                &repo.name,
                &previous,
                // A delivery proves no connection's access: legacy monitors follow the name only.
                None,
            )
            .await?;
            txn.commit().await?;
            tracing::info!(
                native_id = repo.id,
                to = %format!("{}/{}", repo.owner.login, repo.name),
                moved = done.moved,
                merged = done.merged,
                blocked = done.blocked,
                "repository renamed upstream; mirror and monitors re-keyed"
            );
            Ok(if done.moved + done.merged > 0 {
                Outcome::Applied
            } else {
                Outcome::Unchanged
            })
        }
        // Cross-owner transfer heals on the next reconcile by native id (the new owner's
        // subject reaches no filter of a workspace that monitored the old name).
        "transferred" => {
            tracing::info!(
                native_id = event.repository.id,
                to = %format!("{}/{}", event.repository.owner.login, event.repository.name),
                "repository transferred upstream; the next reconcile re-keys its monitors"
            );
            Ok(Outcome::Ignored)
        }
        _ => Ok(Outcome::Ignored),
    }
}

async fn delete(
    pool: &PgPool,
    provider_instance_id: uuid::Uuid,
    native_id: i64,
) -> Result<u64, sqlx::Error> {
    let mut txn = pool.begin().await?;
    sqlx::query(
        "DELETE FROM repository_to_monitor WHERE native_id = $2
            AND connection_id IN (SELECT id FROM connection WHERE provider_instance_id = $1)",
    )
    .bind(provider_instance_id)
    .bind(native_id)
    .execute(&mut *txn)
    .await?;
    let removed =
        sqlx::query("DELETE FROM repository WHERE provider_instance_id = $1 AND native_id = $2")
            .bind(provider_instance_id)
            .bind(native_id)
            .execute(&mut *txn)
            .await?
            .rows_affected();
    txn.commit().await?;
    Ok(removed)
}
