//! GitHub webhooks github-sync acts on in this part: `repository.deleted` removes the
//! repository's mirror (its issues and pull requests go with it) and every monitor of it on that
//! GitHub instance. Other repository actions are acknowledged; live item webhooks come later.

use bus::consumer::{Delivery, Handler, headers};
use sea_orm::{ConnectionTrait, DatabaseConnection, EntityTrait, Statement, TransactionTrait};
use serde::Deserialize;
use store::entity::connection;
use uuid::Uuid;

#[derive(Debug, Deserialize)]
struct RepositoryEvent {
    action: String,
    repository: EventRepository,
}

#[derive(Debug, Deserialize)]
struct EventRepository {
    id: i64,
}

/// Consumes `github.<owner>.?.repository`.
pub struct RepositoryHandler {
    pub db: DatabaseConnection,
}

/// The delivery's body: inline, or by reference to the stored raw body.
async fn body(
    db: &DatabaseConnection,
    delivery: &Delivery,
) -> Result<Option<Vec<u8>>, sea_orm::DbErr> {
    let Some(reference) = delivery.header(store::inbound::BODY_REF_HEADER) else {
        return Ok(Some(delivery.payload().to_vec()));
    };
    let Ok(message_id) = reference.parse::<Uuid>() else {
        return Ok(None);
    };
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            sea_orm::DbBackend::Postgres,
            "SELECT body FROM inbound_message_body WHERE message_id = $1",
            [message_id.into()],
        ))
        .await?;
    row.map(|r| r.try_get::<Vec<u8>>("", "body")).transpose()
}

impl Handler for RepositoryHandler {
    async fn handle(&self, delivery: Delivery) {
        let body = match body(&self.db, &delivery).await {
            Ok(Some(b)) => b,
            // Erased by retention or erasure: nothing left to act on.
            Ok(None) => {
                delivery
                    .reject("the delivery's body is no longer stored")
                    .await;
                return;
            }
            Err(e) => {
                delivery
                    .retry(&format!("reading the stored body: {e}"))
                    .await;
                return;
            }
        };
        let Ok(event) = serde_json::from_slice::<RepositoryEvent>(&body) else {
            delivery
                .reject("not a GitHub repository event (no action or repository.id)")
                .await;
            return;
        };
        if event.action != "deleted" {
            // Renames and transfers are handled by the live-webhook part.
            let _ = delivery.ack().await;
            return;
        }
        let Some(connection_id) = delivery
            .header(headers::CONNECTION)
            .and_then(|c| c.parse::<Uuid>().ok())
        else {
            delivery
                .reject("repository event without a connection header")
                .await;
            return;
        };
        match self
            .delete_repository(connection_id, event.repository.id)
            .await
        {
            Ok(removed) => {
                tracing::info!(
                    native_id = event.repository.id,
                    removed,
                    "repository deleted upstream; mirror removed"
                );
                let _ = delivery.ack().await;
            }
            Err(e) => {
                delivery
                    .retry(&format!("removing the repository: {e}"))
                    .await
            }
        }
    }
}

impl RepositoryHandler {
    async fn delete_repository(
        &self,
        connection_id: Uuid,
        native_id: i64,
    ) -> Result<u64, sea_orm::DbErr> {
        let Some(conn) = connection::Entity::find_by_id(connection_id)
            .one(&self.db)
            .await?
        else {
            return Ok(0);
        };
        let txn = self.db.begin().await?;
        txn.execute_raw(Statement::from_sql_and_values(
            sea_orm::DbBackend::Postgres,
            "DELETE FROM repository_to_monitor WHERE native_id = $2
                AND connection_id IN (SELECT id FROM connection WHERE provider_instance_id = $1)",
            [conn.provider_instance_id.into(), native_id.into()],
        ))
        .await?;
        let removed = txn
            .execute_raw(Statement::from_sql_and_values(
                sea_orm::DbBackend::Postgres,
                "DELETE FROM repository WHERE provider_instance_id = $1 AND native_id = $2",
                [conn.provider_instance_id.into(), native_id.into()],
            ))
            .await?
            .rows_affected();
        txn.commit().await?;
        Ok(removed)
    }
}
