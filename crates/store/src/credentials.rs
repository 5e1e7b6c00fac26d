//! Credentials a vendor refused: the sync engine flags the connection when a read is refused for
//! authentication or a missing permission, and replacing the connection's secrets clears the
//! flag. A flagged connection's schedules skip it, so a revoked token is not retried forever.

use sea_orm::{ConnectionTrait, DbErr, Statement};
use time::OffsetDateTime;
use uuid::Uuid;

/// Flags the connection as needing new credentials with `reason`, unless its secrets were
/// replaced after `read_since` (the refusal was of the old ones). Returns whether it flagged.
pub async fn refuse<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    connection_id: Uuid,
    read_since: OffsetDateTime,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let flagged = sqlx::query(
        "UPDATE connection SET credentials_refused_at = now(), credentials_refusal = $3,
                updated_at = now()
          WHERE id = $1 AND (credentials_replaced_at IS NULL OR credentials_replaced_at < $2)",
    )
    .bind(connection_id)
    .bind(read_since)
    .bind(reason)
    .execute(executor)
    .await?
    .rows_affected();
    Ok(flagged == 1)
}

/// Records that the connection's secrets were replaced, in the caller's transaction: the flag
/// clears and the schedules take the connection again.
pub async fn replaced<C: ConnectionTrait>(db: &C, connection_id: Uuid) -> Result<(), DbErr> {
    db.execute_raw(Statement::from_sql_and_values(
        db.get_database_backend(),
        "UPDATE connection SET credentials_refused_at = NULL, credentials_refusal = NULL,
                credentials_replaced_at = clock_timestamp(), updated_at = now()
          WHERE id = $1",
        [connection_id.into()],
    ))
    .await?;
    Ok(())
}
