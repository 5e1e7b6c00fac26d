//! `repository` webhooks (owner-level subject): `deleted` removes the repository's mirror (its
//! items and everything derived from them cascade) and every monitor of it on that instance.

use serde::Deserialize;
use sqlx::PgPool;

use super::{Outcome, Webhook, WebhookError, parse};

#[derive(Debug, Deserialize)]
struct RepositoryEvent {
    action: String,
    repository: RepositoryId,
}

#[derive(Debug, Deserialize)]
struct RepositoryId {
    id: i64,
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
