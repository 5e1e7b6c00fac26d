//! `connection_activity`: what happened to a connection, for people (a sync's tombstones and
//! held sweeps, a webhook that changed nothing, ...). The one writer every service uses.

use uuid::Uuid;

/// Records one activity of a connection, in the caller's transaction or on a pool.
pub async fn record<'e, E>(
    executor: E,
    connection_id: Uuid,
    workspace_id: Uuid,
    activity: &str,
    detail: serde_json::Value,
) -> Result<(), sqlx::Error>
where
    E: sqlx::PgExecutor<'e>,
{
    sqlx::query(
        "INSERT INTO connection_activity (id, connection_id, workspace_id, activity, detail)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(Uuid::now_v7())
    .bind(connection_id)
    .bind(workspace_id)
    .bind(activity)
    .bind(sqlx::types::Json(detail))
    .execute(executor)
    .await?;
    Ok(())
}

/// [`record`] for a connection named by id alone (its workspace read in the same statement); a
/// connection that is gone records nothing.
pub async fn record_for_connection<'e, E>(
    executor: E,
    connection_id: Uuid,
    activity: &str,
    detail: serde_json::Value,
) -> Result<(), sqlx::Error>
where
    E: sqlx::PgExecutor<'e>,
{
    sqlx::query(
        "INSERT INTO connection_activity (id, connection_id, workspace_id, activity, detail)
         SELECT $1, c.id, c.workspace_id, $3, $4 FROM connection c WHERE c.id = $2",
    )
    .bind(Uuid::now_v7())
    .bind(connection_id)
    .bind(activity)
    .bind(sqlx::types::Json(detail))
    .execute(executor)
    .await?;
    Ok(())
}
