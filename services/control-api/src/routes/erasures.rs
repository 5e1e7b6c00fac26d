//! Erasure progress and the erasure-completeness scan. The eraser does the work; here operators
//! read its records (steps done, counts, end) and ask what of a workspace still remains.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::workspaces::find_reachable;
use super::{WorkspacePath, rfc3339};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, BadRequest, ErrorBody, Forbidden, PathParams, Unauthorized};

/// One erasure: a connection's, or (without `connection_id`) the purged workspace's own part.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErasureView {
    pub id: Uuid,
    pub connection_id: Option<Uuid>,
    /// `disconnect` or `purge`: whichever started it.
    pub trigger: String,
    /// `running` or `done`.
    pub status: String,
    /// The steps done so far, in order.
    #[schema(value_type = Vec<String>)]
    pub steps_done: serde_json::Value,
    /// What each place lost: `table:<name>`, `stream:<name>`, `repositories_deleted`, ...
    #[schema(value_type = Object)]
    pub counts: serde_json::Value,
    pub started_at: String,
    pub updated_at: String,
    pub finished_at: Option<String>,
}

impl From<store::erasure::ErasureRecord> for ErasureView {
    fn from(r: store::erasure::ErasureRecord) -> Self {
        ErasureView {
            id: r.id,
            connection_id: r.connection_id,
            trigger: r.trigger,
            status: r.status,
            steps_done: r.steps_done,
            counts: r.counts,
            started_at: rfc3339(r.started_at),
            updated_at: rfc3339(r.updated_at),
            finished_at: r.finished_at.map(rfc3339),
        }
    }
}

/// List a workspace's erasures
///
/// Each disconnected connection's erasure and, once purged, the workspace's own; with the steps
/// done and what each place lost.
#[utoipa::path(get, path = "/workspaces/{workspace_id}/erasures", operation_id = "listErasures",
    params(WorkspacePath),
    responses((status = 200, description = "The connections' erasures, oldest first, then the workspace's own.", body = Vec<ErasureView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace reachable with this token.", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams(workspace_id): PathParams<Uuid>,
) -> Result<Json<Vec<ErasureView>>, ApiError> {
    find_reachable(&state.db, &caller, workspace_id, false).await?;
    let records = store::erasure::of_workspace(&state.db, workspace_id).await?;
    Ok(Json(records.into_iter().map(Into::into).collect()))
}

/// One place the scan searched.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScanPlaceView {
    /// `table:<name>`, `stream:<name>` or `subject:<filter>`.
    pub place: String,
    pub count: i64,
    /// Whether a holder registered it with the eraser; an unregistered place with rows is a
    /// content table the eraser does not know.
    pub registered: bool,
}

/// What of a workspace's connections remains, per place; zero everywhere after erasure.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScanView {
    pub workspace_id: Uuid,
    pub connections: Vec<Uuid>,
    pub places: Vec<ScanPlaceView>,
    pub total: i64,
}

/// Scan what of a workspace remains
///
/// Operator tokens only. Counts, per table, stream and subject, what of the workspace's
/// connections' content is still stored; zero everywhere once their erasure is done.
#[utoipa::path(get, path = "/workspaces/{workspace_id}/erasure-scan", operation_id = "scanErasure",
    params(WorkspacePath),
    responses((status = 200, description = "What remains, per place.", body = ScanView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such workspace reachable with this token.", body = ErrorBody)))]
pub async fn scan(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams(workspace_id): PathParams<Uuid>,
) -> Result<Json<ScanView>, ApiError> {
    // The scan reads across tenants' shared tables: operators only.
    caller.require_operator()?;
    find_reachable(&state.db, &caller, workspace_id, false).await?;
    let report = vendors::scan::scan(&state.db, &state.bus, vendors::holders(), workspace_id)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(ScanView {
        workspace_id: report.workspace_id,
        connections: report.connections,
        places: report
            .places
            .into_iter()
            .map(|p| ScanPlaceView {
                place: p.place,
                count: p.count,
                registered: p.registered,
            })
            .collect(),
        total: report.total,
    }))
}
