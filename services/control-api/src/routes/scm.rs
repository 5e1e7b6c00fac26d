//! What the SCM mirror reads share between vendors (GitHub, GitLab): the scope check of one
//! repository and the issue page. Every read goes through `store::scm_scope`.

use axum::Json;
use serde::{Deserialize, Serialize};
use store::entity::ConnectionKind;
use store::scm_scope::{self, CoveredRepository, MirroredIssue};
use uuid::Uuid;

use super::rfc3339;
use super::workspaces::find_reachable;
use crate::AppState;
use crate::auth::Claims;
use crate::error::ApiError;

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct IssueView {
    pub id: Uuid,
    /// The vendor's issue id (GitHub's, or GitLab's global id).
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
    /// Null when the vendor could not report it (unknown, not zero).
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

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct IssuePage {
    /// Items numbered after this one (the last `number` of the previous page).
    pub after: Option<i32>,
    /// At most this many items, by number (default 100, at most 1000).
    pub limit: Option<u64>,
}

impl IssuePage {
    /// The page size asked for, within bounds.
    pub fn limit(&self) -> u64 {
        self.limit.unwrap_or(100).min(1000)
    }
}

/// The repository (GitLab: project) `repository_id` of `kind`, if the caller may read the
/// workspace and the workspace's monitors cover it. Outside the scope a repository answers as if
/// it did not exist.
pub async fn covered(
    state: &AppState,
    caller: &Claims,
    workspace_id: Uuid,
    kind: ConnectionKind,
    repository_id: Uuid,
) -> Result<CoveredRepository, ApiError> {
    find_reachable(&state.db, caller, workspace_id, false).await?;
    scm_scope::covered_repository(&state.db, workspace_id, kind, repository_id)
        .await?
        .ok_or_else(|| ApiError::not_found("repository"))
}

/// A page of a covered repository's issues.
pub async fn issue_page(
    state: &AppState,
    repository: &CoveredRepository,
    page: &IssuePage,
) -> Result<Json<Vec<IssueView>>, ApiError> {
    let rows = scm_scope::issues(&state.db, repository, page.after, page.limit()).await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}
