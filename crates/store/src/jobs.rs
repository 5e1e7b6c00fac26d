//! Queueing a sync job: the `sync_job` row and its `jobs.<kind>.<connectionId>.<type>` message
//! commit in the caller's transaction. The one way every service queues a job.

use sea_orm::{ActiveValue::Set, ConnectionTrait, DbErr, EntityTrait, sea_query::OnConflict};
use uuid::Uuid;

use crate::entity::{JobStatus, JobTrigger, JobType, connection, sync_job};
use crate::headers;
use crate::outbox::{self, OutboxMessage};

/// Inserts a queued job and enqueues its message. With a `dedup_key`, a job already queued under
/// that key wins and `None` is returned (a redelivered activation queues nothing twice).
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
    let trigger_name = serde_json::to_value(trigger).unwrap_or_default();
    let subject =
        lifecycle_core::subject::jobs(conn.kind.as_str(), &conn.id.to_string(), job_type.as_str());
    outbox::enqueue(
        db,
        OutboxMessage::json(
            subject,
            &serde_json::json!({
                "job_id": id,
                "connection_id": conn.id,
                "workspace_id": conn.workspace_id,
                "kind": conn.kind.as_str(),
                "type": job_type.as_str(),
                "trigger": trigger_name,
            }),
        )
        .header(headers::WORKSPACE, conn.workspace_id.to_string())
        .header(headers::CONNECTION, conn.id.to_string()),
    )
    .await?;
    Ok(Some(job))
}
