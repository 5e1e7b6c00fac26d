//! What a workspace stored a day (UTC, by the database's clock), of deliveries it signed itself:
//! the figure its daily quota is checked against. Written in the transaction that stores the
//! delivery, so a refused or rolled-back delivery counts nothing.

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use uuid::Uuid;

/// Adds one delivery of `bytes` to `workspace`'s day; returns the bytes the day holds now.
pub async fn add_stored<C: ConnectionTrait>(
    db: &C,
    workspace: Uuid,
    bytes: i64,
) -> Result<i64, DbErr> {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO workspace_usage (workspace_id, day, stored_bytes, deliveries)
             VALUES ($1, (now() AT TIME ZONE 'UTC')::date, $2, 1)
             ON CONFLICT (workspace_id, day) DO UPDATE
                SET stored_bytes = workspace_usage.stored_bytes + excluded.stored_bytes,
                    deliveries = workspace_usage.deliveries + 1
             RETURNING stored_bytes",
            [workspace.into(), bytes.into()],
        ))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("workspace_usage after upsert".into()))?;
    row.try_get_by_index(0)
}

/// Deletes the days before yesterday; returns how many rows went.
pub async fn prune<C: ConnectionTrait>(db: &C) -> Result<u64, DbErr> {
    Ok(db
        .execute_raw(Statement::from_string(
            DbBackend::Postgres,
            "DELETE FROM workspace_usage WHERE day < (now() AT TIME ZONE 'UTC')::date - 1",
        ))
        .await?
        .rows_affected())
}
