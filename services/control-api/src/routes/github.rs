//! Reads of the GitHub mirror for one workspace. Mirrored repositories are shared between
//! workspaces, so every read goes through `store::scm_scope`: a workspace sees only what its
//! monitors cover while its GitHub connection authorises reads.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use store::entity::ConnectionKind;
use store::scm_scope::{self, CoveredRepository, MirroredIssue};
use uuid::Uuid;

use super::workspaces::find_reachable;
use super::{WorkspacePath, rfc3339};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, BadRequest, ErrorBody, PathParams, QueryParams, Unauthorized};

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RepositoryView {
    pub id: Uuid,
    /// GitHub's repository id.
    pub native_id: i64,
    pub owner: String,
    pub name: String,
    /// Unknown (null) until GitHub reported it.
    pub archived: Option<bool>,
    pub deleted_at: Option<String>,
    /// When a reconcile last listed every issue and pull request of it.
    pub reconciled_at: Option<String>,
}

impl From<CoveredRepository> for RepositoryView {
    fn from(r: CoveredRepository) -> Self {
        RepositoryView {
            id: r.id,
            native_id: r.native_id,
            owner: r.owner,
            name: r.name,
            archived: r.archived,
            deleted_at: r.deleted_at.map(rfc3339),
            reconciled_at: r.reconciled_at.map(rfc3339),
        }
    }
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct IssueView {
    pub id: Uuid,
    /// GitHub's issue id.
    pub native_id: i64,
    pub number: i32,
    /// Null once the issue is tombstoned.
    pub title: Option<String>,
    pub body: Option<String>,
    /// open or closed.
    pub state: String,
    pub state_reason: Option<String>,
    pub author: Option<String>,
    pub locked: Option<bool>,
    /// Null when GitHub could not report it (unknown, not zero).
    pub comment_count: Option<i32>,
    pub created_at: String,
    pub updated_at: String,
    pub closed_at: Option<String>,
    /// Set when a reconcile found the issue gone upstream; cleared if it reappears.
    pub deleted_at: Option<String>,
}

impl From<MirroredIssue> for IssueView {
    fn from(i: MirroredIssue) -> Self {
        IssueView {
            id: i.id,
            native_id: i.native_id,
            number: i.number,
            title: i.title,
            body: i.body,
            state: i.state,
            state_reason: i.state_reason,
            author: i.author,
            locked: i.locked,
            comment_count: i.comment_count,
            created_at: rfc3339(i.upstream_created_at),
            updated_at: rfc3339(i.upstream_updated_at),
            closed_at: i.closed_at.map(rfc3339),
            deleted_at: i.deleted_at.map(rfc3339),
        }
    }
}

/// List the workspace's mirrored GitHub repositories
///
/// Those its monitors cover while its GitHub connection authorises reads.
#[utoipa::path(get, path = "/workspaces/{workspace_id}/github/repositories",
    operation_id = "listGithubRepositories", params(WorkspacePath),
    responses((status = 200, description = "The repositories the workspace sees.", body = Vec<RepositoryView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace reachable with this token.", body = ErrorBody)))]
pub async fn repositories(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams(workspace_id): PathParams<Uuid>,
) -> Result<Json<Vec<RepositoryView>>, ApiError> {
    find_reachable(&state.db, &caller, workspace_id, false).await?;
    let rows =
        scm_scope::covered_repositories(&state.db, workspace_id, ConnectionKind::Github).await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct IssuePage {
    /// Issues numbered after this one (the last `number` of the previous page).
    pub after: Option<i32>,
    /// At most this many issues, by number (default 100, at most 1000).
    pub limit: Option<u64>,
}

/// List a mirrored GitHub repository's issues
#[utoipa::path(get, path = "/workspaces/{workspace_id}/github/repositories/{repository_id}/issues",
    operation_id = "listGithubIssues",
    params(WorkspacePath, ("repository_id" = Uuid, Path, description = "The repository's id (not GitHub's)."), IssuePage),
    responses((status = 200, description = "A page of issues, by number.", body = Vec<IssueView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace, or no such repository in its scope.", body = ErrorBody)))]
pub async fn issues(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams((workspace_id, repository_id)): PathParams<(Uuid, Uuid)>,
    QueryParams(page): QueryParams<IssuePage>,
) -> Result<Json<Vec<IssueView>>, ApiError> {
    find_reachable(&state.db, &caller, workspace_id, false).await?;
    // Outside the workspace's scope a repository answers as if it did not exist.
    let repository = scm_scope::covered_repository(
        &state.db,
        workspace_id,
        ConnectionKind::Github,
        repository_id,
    )
    .await?
    .ok_or_else(|| ApiError::not_found("repository"))?;
    let rows = scm_scope::issues(
        &state.db,
        &repository,
        page.after,
        page.limit.unwrap_or(100).min(1000),
    )
    .await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}
