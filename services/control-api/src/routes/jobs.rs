//! Sync jobs. Operators may start RECONCILIATION and BACKFILL (where the connection's vendor runs
//! it); INITIAL jobs belong to activation. The job row and its `jobs.<kind>.<id>.<type>` message commit together.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use lifecycle_core::job::{JobTypeError, SyncJobType};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, QueryFilter, QuerySelect, TransactionTrait,
};
use serde::{Deserialize, Serialize};
use store::entity::{ConnectionStatus, JobStatus, JobTrigger, JobType, sync_job};
use uuid::Uuid;

use super::connections::{find_connection, status_name};
use super::{ConnectionPath, rfc3339};
use crate::AppState;
use crate::auth::{Admin, Caller};
use crate::error::{
    ApiError, BadRequest, ErrorBody, Forbidden, JsonBody, PathParams, PayloadTooLarge, QueryParams,
    Unauthorized, UnsupportedMediaType,
};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateJob {
    /// RECONCILIATION or BACKFILL.
    #[serde(rename = "type")]
    pub job_type: String,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobView {
    pub id: Uuid,
    pub connection_id: Uuid,
    #[serde(rename = "type")]
    pub job_type: String,
    pub trigger: String,
    /// queued, running, succeeded, failed or canceled.
    pub status: String,
    /// Items the current pass has listed.
    pub progress_done: i64,
    pub progress_total: Option<i64>,
    /// Passes started: a manual BACKFILL repeats an incomplete pass until one lists everything.
    pub passes: i32,
    pub error: Option<String>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

fn name<T: Serialize>(v: T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

impl From<sync_job::Model> for JobView {
    fn from(m: sync_job::Model) -> Self {
        JobView {
            id: m.id,
            connection_id: m.connection_id,
            job_type: m.job_type.as_str().to_owned(),
            trigger: name(m.trigger),
            status: name(m.status),
            progress_done: m.progress_done,
            progress_total: m.progress_total,
            passes: m.passes,
            error: m.error,
            created_at: rfc3339(m.created_at),
            started_at: m.started_at.map(rfc3339),
            finished_at: m.finished_at.map(rfc3339),
        }
    }
}

fn client_job_type(requested: &str) -> Result<JobType, ApiError> {
    // Reconciliation-only rule lives in lifecycle-core: clients never start INITIAL jobs.
    match SyncJobType::parse_client_request(requested) {
        Ok(job) => Ok(job.into()),
        Err(e @ JobTypeError::NotClientTriggerable(SyncJobType::Initial)) => {
            Err(ApiError::unprocessable(
                "initial_not_allowed",
                format!("{e}: INITIAL jobs are started by activating the connection"),
            ))
        }
        Err(e @ JobTypeError::NotClientTriggerable(_)) => Err(ApiError::unprocessable(
            "not_client_triggerable",
            e.to_string(),
        )),
        Err(e @ JobTypeError::Unknown(_)) => Err(ApiError::bad_request(e.to_string())),
    }
}

/// Start a sync job
///
/// RECONCILIATION or BACKFILL of an active connection; INITIAL jobs start with activation.
#[utoipa::path(post, path = "/workspaces/{workspace_id}/connections/{connection_id}/sync",
    operation_id = "createSyncJob", params(ConnectionPath), request_body = CreateJob,
    responses((status = 202, description = "The job, queued; or the job of that type already waiting for this connection (at most one waits at a time).", body = JobView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such connection in a workspace this token reaches.", body = ErrorBody),
              (status = 409, description = "The connection is not active (`connection_not_active`).", body = ErrorBody),
              (status = 413, response = PayloadTooLarge), (status = 415, response = UnsupportedMediaType),
              (status = 422, description = "The job type cannot be started by a client (`initial_not_allowed`, `not_client_triggerable`), or the connection's vendor does not run it (`job_type_not_supported`).", body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, connection_id)): PathParams<(Uuid, Uuid)>,
    JsonBody(body): JsonBody<CreateJob>,
) -> Result<(StatusCode, Json<JobView>), ApiError> {
    let job_type = client_job_type(&body.job_type)?;
    let txn = state.db.begin().await?;
    // Locked, so a concurrent transition cannot slip between the check and the insert.
    let conn = find_connection(&txn, &caller, workspace_id, connection_id, true).await?;
    // The vendor declares the job types it refuses (lifecycle-core's vendor modules).
    if let Some(refusal) = conn.kind.jobs().refusal(job_type.into()) {
        return Err(ApiError::unprocessable(
            "job_type_not_supported",
            refusal.to_string(),
        ));
    }
    if conn.status != ConnectionStatus::Active {
        return Err(ApiError::conflict(
            "connection_not_active",
            format!(
                "the connection is {}; only an active connection syncs",
                status_name(conn.status)
            ),
        ));
    }
    // The job row and its message commit together (store::jobs is the one way to queue). At
    // most one job per connection and type waits at a time: a second request is answered with
    // the one already queued (the connection row is locked, so the two cannot race).
    let job = match store::jobs::queue(&txn, &conn, job_type, JobTrigger::Manual, None).await? {
        Some(job) => job,
        None => store::jobs::queued(&txn, conn.id, job_type)
            .await?
            .ok_or_else(|| ApiError::internal("a job was neither queued nor found waiting"))?,
    };
    txn.commit().await?;
    tracing::info!(%workspace_id, %connection_id, job_id = %job.id, job_type = job_type.as_str(), actor = %caller.sub, "sync job queued");
    Ok((StatusCode::ACCEPTED, Json(job.into())))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Page {
    /// At most this many jobs, newest first (default 50, at most 500).
    pub limit: Option<u64>,
}

/// List a connection's sync jobs
#[utoipa::path(get, path = "/workspaces/{workspace_id}/connections/{connection_id}/jobs",
    operation_id = "listSyncJobs", params(ConnectionPath, Page),
    responses((status = 200, description = "The connection's jobs, newest first.", body = Vec<JobView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such connection in a workspace this token reaches.", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams((workspace_id, connection_id)): PathParams<(Uuid, Uuid)>,
    QueryParams(page): QueryParams<Page>,
) -> Result<Json<Vec<JobView>>, ApiError> {
    find_connection(&state.db, &caller, workspace_id, connection_id, false).await?;
    let rows = sync_job::of_connection(workspace_id, connection_id)
        .limit(page.limit.unwrap_or(50).min(500))
        .all(&state.db)
        .await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

/// Cancel a sync job
///
/// A queued job never starts; a running one stops at its next page.
#[utoipa::path(post, path = "/workspaces/{workspace_id}/connections/{connection_id}/jobs/{job_id}/cancel",
    operation_id = "cancelSyncJob",
    params(ConnectionPath, ("job_id" = Uuid, Path, description = "The job's id.")),
    responses((status = 200, description = "The job, canceled.", body = JobView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such job of a connection in a workspace this token reaches.", body = ErrorBody),
              (status = 409, description = "The job already finished (`job_finished`).", body = ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, connection_id, job_id)): PathParams<(Uuid, Uuid, Uuid)>,
) -> Result<Json<JobView>, ApiError> {
    let txn = state.db.begin().await?;
    find_connection(&txn, &caller, workspace_id, connection_id, false).await?;
    let job = sync_job::of_connection(workspace_id, connection_id)
        .filter(sync_job::Column::Id.eq(job_id))
        .lock_exclusive()
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    if !matches!(job.status, JobStatus::Queued | JobStatus::Running) {
        return Err(ApiError::conflict(
            "job_finished",
            format!(
                "the job is already {}; only queued or running jobs can be canceled",
                name(job.status)
            ),
        ));
    }
    // The worker reads this at its next page and stops there; a queued job never starts.
    let mut active: sync_job::ActiveModel = job.into();
    active.status = Set(JobStatus::Canceled);
    active.updated_at = Set(time::OffsetDateTime::now_utc());
    let job = active.update(&txn).await?;
    txn.commit().await?;
    tracing::info!(%workspace_id, %connection_id, %job_id, actor = %caller.sub, "sync job canceled");
    Ok(Json(job.into()))
}
