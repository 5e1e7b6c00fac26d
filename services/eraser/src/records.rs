//! Erasure records: one row per erased connection, and one for a purged workspace's own part,
//! holding the steps done and what each removed. Every step runs in a transaction that first
//! locks its record and skips the step when it is already done, and records the step and its
//! counts in the same transaction as its deletes: an erasure killed anywhere resumes at the step
//! it was in, counts nothing twice, and two erasers on one record take turns.

use std::collections::BTreeMap;

use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, FromQueryResult,
    Statement, TransactionTrait,
};
use uuid::Uuid;

/// What an erasure removed, by place (`table:<name>`, `stream:<name>`, `repositories_deleted`,
/// ...).
pub type Counts = BTreeMap<String, i64>;

pub use store::erasure::{COLUMNS, ErasureRecord, of_workspace};

/// The record of `connection_id` (or, with `None`, of the workspace's own part), created as
/// running by `trigger` if there is none yet: a second trigger finds the first one's record.
pub async fn open<C: ConnectionTrait>(
    db: &C,
    workspace_id: Uuid,
    connection_id: Option<Uuid>,
    trigger: lifecycle_core::erasure::ErasureTrigger,
) -> Result<ErasureRecord, DbErr> {
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "INSERT INTO erasure (id, workspace_id, connection_id, trigger) VALUES ($1, $2, $3, $4) \
         ON CONFLICT DO NOTHING",
        [
            Uuid::now_v7().into(),
            workspace_id.into(),
            connection_id.into(),
            trigger.as_str().into(),
        ],
    ))
    .await?;
    let found = ErasureRecord::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        format!(
            "SELECT {COLUMNS} FROM erasure WHERE workspace_id = $1 \
             AND connection_id IS NOT DISTINCT FROM $2"
        ),
        [workspace_id.into(), connection_id.into()],
    ))
    .one(db)
    .await?;
    found.ok_or_else(|| {
        DbErr::Custom(format!(
            "erasure of connection {connection_id:?} belongs to another workspace than {workspace_id}"
        ))
    })
}

/// A step in progress: its transaction holds the record's row lock.
pub struct Step {
    txn: DatabaseTransaction,
    erasure_id: Uuid,
    name: Option<String>,
    counts: Counts,
    added: bool,
}

#[derive(FromQueryResult)]
struct Locked {
    done: bool,
    counts: serde_json::Value,
}

impl Step {
    /// Starts step `name` of erasure `erasure_id`, or returns `None` when it is already done.
    pub async fn begin(
        db: &DatabaseConnection,
        erasure_id: Uuid,
        name: &str,
    ) -> Result<Option<Step>, DbErr> {
        Self::lock(db, erasure_id, Some(name.to_owned())).await
    }

    /// A transaction that only adds to the counts (a batch of a step that repeats until its
    /// work runs out, such as deleting stream messages).
    pub async fn tally(db: &DatabaseConnection, erasure_id: Uuid) -> Result<Step, DbErr> {
        Self::lock(db, erasure_id, None)
            .await?
            .ok_or_else(|| DbErr::Custom("a tally is never done".into()))
    }

    async fn lock(
        db: &DatabaseConnection,
        erasure_id: Uuid,
        name: Option<String>,
    ) -> Result<Option<Step>, DbErr> {
        let txn = db.begin().await?;
        let locked = Locked::find_by_statement(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT (steps_done ? $2) AS done, counts FROM erasure WHERE id = $1 FOR UPDATE",
            [erasure_id.into(), name.clone().unwrap_or_default().into()],
        ))
        .one(&txn)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound(format!("erasure {erasure_id}")))?;
        if name.is_some() && locked.done {
            txn.rollback().await?;
            return Ok(None);
        }
        let counts = serde_json::from_value(locked.counts).unwrap_or_default();
        Ok(Some(Step {
            txn,
            erasure_id,
            name,
            counts,
            added: false,
        }))
    }

    /// The step's transaction: its deletes commit with its record.
    pub fn txn(&self) -> &DatabaseTransaction {
        &self.txn
    }

    /// Adds `n` to the count of `place`.
    pub fn add(&mut self, place: impl Into<String>, n: u64) {
        *self.counts.entry(place.into()).or_default() += i64::try_from(n).unwrap_or(i64::MAX);
        self.added = true;
    }

    /// Records the step as done with its counts, and commits.
    pub async fn finish(self) -> Result<(), DbErr> {
        self.write(false).await
    }

    /// Records the step, marks the whole erasure done, and commits.
    pub async fn finish_erasure(self) -> Result<(), DbErr> {
        self.write(true).await
    }

    async fn write(self, erasure_done: bool) -> Result<(), DbErr> {
        if self.name.is_some() || self.added || erasure_done {
            let counts = serde_json::to_value(&self.counts)
                .map_err(|e| DbErr::Custom(format!("erasure counts: {e}")))?;
            self.txn
                .execute_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "UPDATE erasure SET counts = $2, updated_at = now(), \
                       steps_done = CASE WHEN $3::text IS NULL THEN steps_done \
                                         ELSE steps_done || to_jsonb($3::text) END, \
                       status = CASE WHEN $4 THEN 'done' ELSE status END, \
                       finished_at = CASE WHEN $4 THEN now() ELSE finished_at END \
                     WHERE id = $1",
                    [
                        self.erasure_id.into(),
                        counts.into(),
                        self.name.into(),
                        erasure_done.into(),
                    ],
                ))
                .await?;
        }
        self.txn.commit().await
    }
}
