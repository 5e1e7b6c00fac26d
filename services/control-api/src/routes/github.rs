//! Reads of the GitHub mirror for one workspace. Mirrored repositories are shared between
//! workspaces, so every read goes through `store::scm_scope`: a workspace sees only what its
//! monitors cover while its GitHub connection authorises reads.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use store::entity::ConnectionKind;
use store::scm_scope::{self, CoveredRepository};
use uuid::Uuid;

use super::KeysetPage;
use super::scm::{IssuePage, IssueView, covered, issue_page};
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

/// List the workspace's mirrored GitHub repositories
///
/// Those its monitors cover while its GitHub connection authorises reads.
#[utoipa::path(get, path = "/workspaces/{workspace_id}/github/repositories",
    operation_id = "listGithubRepositories", params(WorkspacePath, KeysetPage),
    responses((status = 200, description = "The repositories the workspace sees.", body = Vec<RepositoryView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace reachable with this token.", body = ErrorBody)))]
pub async fn repositories(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams(workspace_id): PathParams<Uuid>,
    QueryParams(page): QueryParams<KeysetPage>,
) -> Result<Json<Vec<RepositoryView>>, ApiError> {
    find_reachable(&state.db, &caller, workspace_id, false).await?;
    let rows = scm_scope::covered_repositories(
        &state.db,
        workspace_id,
        ConnectionKind::Github,
        page.after,
        page.limit(),
    )
    .await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
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
    let repository = covered(
        &state,
        &caller,
        workspace_id,
        ConnectionKind::Github,
        repository_id,
    )
    .await?;
    issue_page(&state, &repository, &page).await
}
