//! Workspaces: the tenants. Purge closes the workspace (its endpoints disabled, its connections
//! disconnected) and starts erasure by announcing `lifecycle.workspace.<id>.purged`, in one
//! transaction: no delivery is accepted for it once the purge is answered.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use bus::contracts::WorkspacePurged;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, TransactionTrait,
};
use serde::{Deserialize, Serialize};
use store::entity::{WorkspaceStatus, workspace};
use store::outbox;
use uuid::Uuid;

use super::KeysetPage;
use super::WorkspacePath;
use super::rfc3339;
use crate::AppState;
use crate::auth::{Admin, Caller};
use crate::error::QueryParams;
use crate::error::{
    ApiError, BadRequest, ErrorBody, Forbidden, JsonBody, PathParams, PayloadTooLarge,
    Unauthorized, UnsupportedMediaType,
};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWorkspace {
    /// A name for people; need not be unique.
    pub name: String,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkspaceView {
    pub id: Uuid,
    pub name: String,
    /// active, purging or purged.
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
}

impl From<workspace::Model> for WorkspaceView {
    fn from(m: workspace::Model) -> Self {
        WorkspaceView {
            id: m.id,
            name: m.name,
            status: serde_json::to_value(m.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            created_at: rfc3339(m.created_at),
            updated_at: rfc3339(m.updated_at),
        }
    }
}

/// The workspace, if this caller reaches it; otherwise 404 as if it did not exist.
pub(crate) async fn find_reachable<C: sea_orm::ConnectionTrait>(
    db: &C,
    caller: &crate::Claims,
    workspace_id: Uuid,
    lock: bool,
) -> Result<workspace::Model, ApiError> {
    if !caller.reaches(workspace_id) {
        return Err(ApiError::not_found("workspace"));
    }
    let mut q = workspace::Entity::find_by_id(workspace_id);
    if lock {
        q = q.lock_exclusive();
    }
    q.one(db)
        .await?
        .ok_or_else(|| ApiError::not_found("workspace"))
}

/// Create a workspace
///
/// Operator tokens only.
#[utoipa::path(post, path = "/workspaces", operation_id = "createWorkspace", request_body = CreateWorkspace,
    responses((status = 201, description = "The workspace, created.", body = WorkspaceView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden), (status = 413, response = PayloadTooLarge),
              (status = 415, response = UnsupportedMediaType)))]
pub async fn create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    JsonBody(body): JsonBody<CreateWorkspace>,
) -> Result<(StatusCode, Json<WorkspaceView>), ApiError> {
    caller.require_operator()?;
    let name = body.name.trim();
    if name.is_empty() || name.len() > 200 {
        return Err(ApiError::bad_request("name must be 1 to 200 characters"));
    }
    let row = workspace::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set(name.to_owned()),
        status: Set(WorkspaceStatus::Active),
        ..Default::default()
    }
    .insert(&state.db)
    .await?;
    tracing::info!(workspace_id = %row.id, actor = %caller.sub, "workspace created");
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// List workspaces
///
/// Every workspace for an operator token; a workspace token's own otherwise.
#[utoipa::path(get, path = "/workspaces", operation_id = "listWorkspaces", params(KeysetPage),
    responses((status = 200, description = "A page of the workspaces the token reaches, oldest first.", body = Vec<WorkspaceView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized)))]
pub async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    QueryParams(page): QueryParams<KeysetPage>,
) -> Result<Json<Vec<WorkspaceView>>, ApiError> {
    // Ids are time-ordered (v7): by id is by creation, and a keyset.
    let mut q = workspace::Entity::find()
        .order_by_asc(workspace::Column::Id)
        .limit(page.limit());
    if let Some(after) = page.after {
        q = q.filter(workspace::Column::Id.gt(after));
    }
    if !caller.operator {
        q = q.filter(workspace::Column::Id.is_in(caller.workspace_id));
    }
    let rows = q.all(&state.db).await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

/// Get a workspace
#[utoipa::path(get, path = "/workspaces/{workspace_id}", operation_id = "getWorkspace",
    params(WorkspacePath),
    responses((status = 200, description = "The workspace.", body = WorkspaceView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace reachable with this token.", body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams(workspace_id): PathParams<Uuid>,
) -> Result<Json<WorkspaceView>, ApiError> {
    Ok(Json(
        find_reachable(&state.db, &caller, workspace_id, false)
            .await?
            .into(),
    ))
}

/// Purge a workspace
///
/// Marks it purging and announces the purge; its mirrored data is erased asynchronously.
#[utoipa::path(post, path = "/workspaces/{workspace_id}/purge", operation_id = "purgeWorkspace",
    params(WorkspacePath),
    responses((status = 202, description = "The purge started; the workspace is purging.", body = WorkspaceView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such workspace reachable with this token.", body = ErrorBody),
              (status = 409, description = "The workspace is already purging or purged (`already_purging`).", body = ErrorBody)))]
pub async fn purge(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams(workspace_id): PathParams<Uuid>,
) -> Result<(StatusCode, Json<WorkspaceView>), ApiError> {
    let txn = state.db.begin().await?;
    let row = find_reachable(&txn, &caller, workspace_id, true).await?;
    if row.status != WorkspaceStatus::Active {
        return Err(ApiError::conflict(
            "already_purging",
            "this workspace is already being purged or has been purged",
        ));
    }
    let mut active: workspace::ActiveModel = row.into();
    active.status = Set(WorkspaceStatus::Purging);
    active.updated_at = Set(time::OffsetDateTime::now_utc());
    let row = active.update(&txn).await?;
    store::lifecycle::close_workspace(&txn, workspace_id, &caller.sub).await?;
    let message = WorkspacePurged::new(workspace_id, caller.sub.clone(), rfc3339(row.updated_at));
    outbox::enqueue_contract(&txn, &message).await?;
    txn.commit().await?;
    tracing::info!(%workspace_id, actor = %caller.sub, "workspace purge started");
    Ok((StatusCode::ACCEPTED, Json(row.into())))
}
