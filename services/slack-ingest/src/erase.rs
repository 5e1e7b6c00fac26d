//! Erasing a channel's stored deliveries: when Slack deletes the channel or its consent is
//! withdrawn, every raw delivery of it the connection received goes, with its stream copies.

use sea_orm::DatabaseConnection;
use sqlx::PgPool;
use uuid::Uuid;

/// Erases every delivery of `connection_id` routed to the channel `slack_id` of `team`;
/// returns how many. Idempotent.
pub async fn channel_deliveries(
    bus: &bus::Bus,
    pool: &PgPool,
    connection_id: Uuid,
    team: &str,
    slack_id: &str,
) -> anyhow::Result<usize> {
    // The channel's subjects share one prefix: `slack.<team>.<channel>.`.
    let probe = lifecycle_core::subject::slack(team, Some(slack_id), "x")?;
    let prefix = probe.strip_suffix('x').unwrap_or(&probe).to_owned();
    let ids: Vec<(Uuid,)> = sqlx::query_as(
        "SELECT id FROM inbound_message
          WHERE connection_id = $1 AND left(subject, length($2)) = $2",
    )
    .bind(connection_id)
    .bind(&prefix)
    .fetch_all(pool)
    .await?;
    let db: DatabaseConnection =
        sea_orm::SqlxPostgresConnector::from_sqlx_postgres_pool(pool.clone());
    for (id,) in &ids {
        bus::erasure::erase_delivery(bus, &db, connection_id, *id, None).await?;
    }
    Ok(ids.len())
}
