//! What erasure keeps, kept bounded: `sync_job` and `connection_activity` hold no third-party
//! content and survive erasure, capped to the newest rows per connection. Unfinished jobs are
//! never pruned; `connection_audit` is never pruned (it is the audit).

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};

/// Deletes, `batch` at most per table, the rows of each connection beyond its newest `keep`
/// finished jobs and newest `keep` activity entries; returns how many it deleted.
pub async fn prune<C: ConnectionTrait>(db: &C, keep: u64, batch: u64) -> Result<u64, DbErr> {
    let mut pruned = 0;
    for sql in [
        "DELETE FROM sync_job WHERE id IN (
           SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY connection_id
                                                         ORDER BY created_at DESC, id DESC) AS n
                             FROM sync_job WHERE status IN ('succeeded', 'failed', 'canceled')) r
            WHERE n > $1 LIMIT $2)",
        "DELETE FROM connection_activity WHERE id IN (
           SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY connection_id
                                                         ORDER BY created_at DESC, id DESC) AS n
                             FROM connection_activity) r
            WHERE n > $1 LIMIT $2)",
    ] {
        pruned += db
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                [(keep as i64).into(), (batch as i64).into()],
            ))
            .await?
            .rows_affected();
    }
    Ok(pruned)
}
