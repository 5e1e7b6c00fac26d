//! Queueing a sync job: the `sync_job` row and its `jobs.<kind>.<connectionId>.<type>` message
//! commit in the caller's transaction. The one way every service queues a job.

use sea_orm::{ActiveValue::Set, ConnectionTrait, DbErr, EntityTrait, sea_query::OnConflict};
use uuid::Uuid;

use crate::contracts::JobQueued;
use crate::entity::{JobStatus, JobTrigger, JobType, connection, sync_job};
use crate::outbox;

/// Inserts a queued job and enqueues its message. With a `dedup_key`, a job already queued under
/// that key wins and `None` is returned (a redelivered activation queues nothing twice); so does
/// a job of the same type already waiting for the connection (at most one waits at a time).
pub async fn queue<C: ConnectionTrait>(
    db: &C,
    conn: &connection::Model,
    job_type: JobType,
    trigger: JobTrigger,
    dedup_key: Option<String>,
) -> Result<Option<sync_job::Model>, DbErr> {
    let id = Uuid::now_v7();
    let inserted = sync_job::Entity::insert(sync_job::ActiveModel {
        id: Set(id),
        connection_id: Set(conn.id),
        workspace_id: Set(conn.workspace_id),
        kind: Set(conn.kind),
        job_type: Set(job_type),
        trigger: Set(trigger),
        status: Set(JobStatus::Queued),
        progress_done: Set(0),
        dedup_key: Set(dedup_key),
        // The request or schedule queueing the job: its spans continue this trace.
        trace_context: Set(trace_json(crate::trace::current())),
        ..Default::default()
    })
    .on_conflict(OnConflict::new().do_nothing().to_owned())
    .exec_without_returning(db)
    .await?;
    if inserted == 0 {
        return Ok(None);
    }
    let job = sync_job::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound(format!("sync_job {id} after insert")))?;
    let message = JobQueued {
        job_id: id,
        connection_id: conn.id,
        workspace_id: conn.workspace_id,
        kind: conn.kind.as_str().to_owned(),
        job_type: job_type.as_str().to_owned(),
        trigger,
    };
    outbox::enqueue_contract(db, &message).await?;
    Ok(Some(job))
}

/// The job of `job_type` waiting for `connection_id`, if one is (at most one is: index
/// `sync_job_one_queued`).
pub async fn queued<C: ConnectionTrait>(
    db: &C,
    connection_id: Uuid,
    job_type: JobType,
) -> Result<Option<sync_job::Model>, DbErr> {
    use sea_orm::{ColumnTrait, QueryFilter};
    sync_job::Entity::find()
        .filter(sync_job::Column::ConnectionId.eq(connection_id))
        .filter(sync_job::Column::JobType.eq(job_type))
        .filter(sync_job::Column::Status.eq(JobStatus::Queued))
        .one(db)
        .await
}

/// A trace context as the JSON object stored on the row; `None` when not traced.
fn trace_json(headers: std::collections::BTreeMap<String, String>) -> Option<serde_json::Value> {
    (!headers.is_empty()).then(|| serde_json::json!(headers))
}
