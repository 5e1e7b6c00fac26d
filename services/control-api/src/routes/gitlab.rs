//! Reads of the GitLab mirror for one workspace: projects, their issues and merge requests, a
//! merge request's notes and threads. Mirrored projects are shared between workspaces (one row
//! per project on a GitLab server), so every read goes through `store::scm_scope`: a workspace
//! sees only the projects its monitors bind by GitLab's project id, on the server of a GitLab
//! connection that authorises reads.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use store::entity::ConnectionKind;
use store::scm_scope::{
    self, CoveredRepository, MirroredApproval, MirroredComment, MirroredHeadCheck,
    MirroredPullRequest, MirroredReviewComment, MirroredThread,
};
use uuid::Uuid;

use super::KeysetPage;
use super::scm::{IssuePage, IssueView, covered, issue_page};
use super::workspaces::find_reachable;
use super::{WorkspacePath, rfc3339};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, BadRequest, ErrorBody, PathParams, QueryParams, Unauthorized};

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectView {
    pub id: Uuid,
    /// GitLab's project id: what a project is matched by (its path can change).
    pub native_id: i64,
    /// The full path of the project's namespace (group and subgroups), as last seen.
    pub namespace: String,
    /// The project's path within its namespace, as last seen.
    pub path: String,
    /// Unknown (null) until GitLab reported it.
    pub archived: Option<bool>,
    pub deleted_at: Option<String>,
    /// When a reconcile last listed every issue and merge request of it.
    pub reconciled_at: Option<String>,
}

impl From<CoveredRepository> for ProjectView {
    fn from(r: CoveredRepository) -> Self {
        ProjectView {
            id: r.id,
            native_id: r.native_id,
            namespace: r.owner,
            path: r.name,
            archived: r.archived,
            deleted_at: r.deleted_at.map(rfc3339),
            reconciled_at: r.reconciled_at.map(rfc3339),
        }
    }
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MergeRequestView {
    pub id: Uuid,
    /// GitLab's global merge request id.
    pub native_id: i64,
    /// The merge request's iid within its project.
    pub number: i32,
    /// Null once the merge request is tombstoned.
    pub title: Option<String>,
    pub body: Option<String>,
    /// open, closed or merged.
    pub state: String,
    pub draft: Option<bool>,
    pub author: Option<String>,
    pub locked: Option<bool>,
    /// User notes as GitLab counted them; null when GitLab could not report it (unknown, not
    /// zero).
    pub comment_count: Option<i32>,
    pub source_branch: Option<String>,
    pub head_sha: Option<String>,
    pub target_branch: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub closed_at: Option<String>,
    pub merged_at: Option<String>,
    /// Set when a reconcile found the merge request gone upstream; cleared if it reappears.
    pub deleted_at: Option<String>,
}

impl From<MirroredPullRequest> for MergeRequestView {
    fn from(p: MirroredPullRequest) -> Self {
        MergeRequestView {
            id: p.id,
            native_id: p.native_id,
            number: p.number,
            title: p.title,
            body: p.body,
            state: p.state,
            draft: p.draft,
            author: p.author,
            locked: p.locked,
            comment_count: p.comment_count,
            source_branch: p.head_ref,
            head_sha: p.head_sha,
            target_branch: p.base_ref,
            created_at: rfc3339(p.upstream_created_at),
            updated_at: rfc3339(p.upstream_updated_at),
            closed_at: p.closed_at.map(rfc3339),
            merged_at: p.merged_at.map(rfc3339),
            deleted_at: p.deleted_at.map(rfc3339),
        }
    }
}

/// A note on the merge request itself (not on its diff).
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NoteView {
    pub id: Uuid,
    /// GitLab's note id.
    pub native_id: i64,
    pub author: Option<String>,
    /// Null once the note is tombstoned.
    pub body: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub deleted_at: Option<String>,
}

impl From<MirroredComment> for NoteView {
    fn from(c: MirroredComment) -> Self {
        NoteView {
            id: c.id,
            native_id: c.native_id,
            author: c.author,
            body: c.body,
            created_at: rfc3339(c.upstream_created_at),
            updated_at: rfc3339(c.upstream_updated_at),
            deleted_at: c.deleted_at.map(rfc3339),
        }
    }
}

/// A note on the diff: the first of its thread or a reply.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DiffNoteView {
    pub id: Uuid,
    /// GitLab's note id.
    pub native_id: i64,
    /// The note it replies to, when it is a reply.
    pub in_reply_to: Option<i64>,
    pub path: Option<String>,
    pub line: Option<i32>,
    pub commit_sha: Option<String>,
    pub author: Option<String>,
    pub body: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub deleted_at: Option<String>,
}

impl From<MirroredReviewComment> for DiffNoteView {
    fn from(c: MirroredReviewComment) -> Self {
        DiffNoteView {
            id: c.id,
            native_id: c.native_id,
            in_reply_to: c.in_reply_to,
            path: c.path,
            line: c.line,
            commit_sha: c.commit_sha,
            author: c.author,
            body: c.body,
            created_at: rfc3339(c.upstream_created_at),
            updated_at: rfc3339(c.upstream_updated_at),
            deleted_at: c.deleted_at.map(rfc3339),
        }
    }
}

/// A discussion on the diff and its notes, oldest first.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ThreadView {
    pub id: Uuid,
    /// GitLab's discussion id.
    pub discussion_id: String,
    pub path: Option<String>,
    /// Null until GitLab reported it.
    pub resolved: Option<bool>,
    pub resolved_at: Option<String>,
    pub resolved_by: Option<String>,
    pub notes: Vec<DiffNoteView>,
}

/// A merge request with its notes and diff threads.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MergeRequestDetail {
    #[serde(flatten)]
    pub merge_request: MergeRequestView,
    /// Notes on the merge request itself, oldest first.
    pub notes: Vec<NoteView>,
    /// Discussions on the diff.
    pub threads: Vec<ThreadView>,
    /// Diff notes whose discussion is not mirrored (yet), oldest first.
    pub unthreaded_notes: Vec<DiffNoteView>,
    /// The head's check as last observed (GitLab: its pipeline); null while unknown.
    pub head_check: Option<HeadCheckView>,
    /// The people whose approval stands, oldest first.
    pub approvals: Vec<ApprovalView>,
    /// `approved`, `changes_requested` or `review_required`; null while unknown (an approval
    /// act leaves it unknown until GitLab's readiness is read).
    pub review_decision: Option<String>,
    /// The reviewers as last read whole, with their review state; null while never read.
    pub reviewers: Option<Vec<ReviewerView>>,
    /// Whether GitLab said it can be merged; null while unknown (an act, a push, or GitLab
    /// still checking).
    pub mergeable: Option<bool>,
    /// GitLab's detailed merge status, lowercased (`mergeable`, `not_approved`, ...); null
    /// while unknown.
    pub merge_status: Option<String>,
    /// When the standing approver list was last read whole; null before any read.
    pub approval_read_at: Option<String>,
    /// The merge commit; null before the merge or while unknown.
    pub merge_commit_sha: Option<String>,
    /// Who merged it; null before the merge or while unknown.
    pub merged_by: Option<String>,
}

/// A reviewer of a merge request.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReviewerView {
    pub username: String,
    /// `unreviewed`, `reviewing`, `reviewed`, `requested_changes`, `approved` or
    /// `unapproved`; null while unknown (GitLab before 18.6 names reviewers without one).
    pub state: Option<String>,
}

/// A standing approval of a merge request.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApprovalView {
    pub username: String,
    /// When the approval was given (GitLab's date, else the approving hook's updated_at);
    /// null while unknown.
    pub approved_at: Option<String>,
}

impl From<MirroredApproval> for ApprovalView {
    fn from(a: MirroredApproval) -> Self {
        ApprovalView {
            username: a.username,
            approved_at: a.approved_at.map(rfc3339),
        }
    }
}

/// A head's check state, the commit it is about and when it was observed.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HeadCheckView {
    /// `success`, `failure`, `pending`, `skipped`, `no_pipeline` or `none`.
    pub state: String,
    pub sha: Option<String>,
    pub observed_at: Option<String>,
}

impl From<MirroredHeadCheck> for HeadCheckView {
    fn from(c: MirroredHeadCheck) -> Self {
        HeadCheckView {
            state: c.state,
            sha: c.sha,
            observed_at: c.observed_at.map(rfc3339),
        }
    }
}

impl MergeRequestDetail {
    fn new(
        merge_request: MirroredPullRequest,
        notes: Vec<MirroredComment>,
        threads: Vec<MirroredThread>,
        diff_notes: Vec<MirroredReviewComment>,
        approvals: Vec<MirroredApproval>,
    ) -> Self {
        let review_decision = merge_request.review_decision.clone();
        let mut threads: Vec<ThreadView> = threads
            .into_iter()
            .map(|t| ThreadView {
                id: t.id,
                discussion_id: t.node_id,
                path: t.path,
                resolved: t.resolved,
                resolved_at: t.resolved_at.map(rfc3339),
                resolved_by: t.resolved_by,
                notes: Vec::new(),
            })
            .collect();
        let mut unthreaded_notes = Vec::new();
        for note in diff_notes {
            match note
                .thread_id
                .and_then(|id| threads.iter_mut().find(|t| t.id == id))
            {
                Some(thread) => thread.notes.push(note.into()),
                None => unthreaded_notes.push(note.into()),
            }
        }
        MergeRequestDetail {
            merge_request: merge_request.into(),
            notes: notes.into_iter().map(Into::into).collect(),
            threads,
            unthreaded_notes,
            head_check: None,
            approvals: approvals.into_iter().map(Into::into).collect(),
            review_decision,
            reviewers: None,
            mergeable: None,
            merge_status: None,
            approval_read_at: None,
            merge_commit_sha: None,
            merged_by: None,
        }
    }
}

/// List the workspace's mirrored GitLab projects
///
/// Those its monitors bind by GitLab's project id, on the server of a GitLab connection that
/// authorises reads (active, suspended or paused).
#[utoipa::path(get, path = "/workspaces/{workspace_id}/gitlab/projects",
    operation_id = "listGitlabProjects", params(WorkspacePath, KeysetPage),
    responses((status = 200, description = "The projects the workspace sees, by namespace and path.", body = Vec<ProjectView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace reachable with this token.", body = ErrorBody)))]
pub async fn projects(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams(workspace_id): PathParams<Uuid>,
    QueryParams(page): QueryParams<KeysetPage>,
) -> Result<Json<Vec<ProjectView>>, ApiError> {
    find_reachable(&state.db, &caller, workspace_id, false).await?;
    let rows = scm_scope::covered_repositories(
        &state.db,
        workspace_id,
        ConnectionKind::Gitlab,
        page.after,
        page.limit(),
    )
    .await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

/// List a mirrored GitLab project's issues
#[utoipa::path(get, path = "/workspaces/{workspace_id}/gitlab/projects/{project_id}/issues",
    operation_id = "listGitlabIssues",
    params(WorkspacePath, ("project_id" = Uuid, Path, description = "The project's id (not GitLab's)."), IssuePage),
    responses((status = 200, description = "A page of issues, by iid.", body = Vec<IssueView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace, or no such project in its scope.", body = ErrorBody)))]
pub async fn issues(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams((workspace_id, project_id)): PathParams<(Uuid, Uuid)>,
    QueryParams(page): QueryParams<IssuePage>,
) -> Result<Json<Vec<IssueView>>, ApiError> {
    let project = covered(
        &state,
        &caller,
        workspace_id,
        ConnectionKind::Gitlab,
        project_id,
    )
    .await?;
    issue_page(&state, &project, &page).await
}

/// List a mirrored GitLab project's merge requests
#[utoipa::path(get, path = "/workspaces/{workspace_id}/gitlab/projects/{project_id}/merge-requests",
    operation_id = "listGitlabMergeRequests",
    params(WorkspacePath, ("project_id" = Uuid, Path, description = "The project's id (not GitLab's)."), IssuePage),
    responses((status = 200, description = "A page of merge requests, by iid.", body = Vec<MergeRequestView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace, or no such project in its scope.", body = ErrorBody)))]
pub async fn merge_requests(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams((workspace_id, project_id)): PathParams<(Uuid, Uuid)>,
    QueryParams(page): QueryParams<IssuePage>,
) -> Result<Json<Vec<MergeRequestView>>, ApiError> {
    let project = covered(
        &state,
        &caller,
        workspace_id,
        ConnectionKind::Gitlab,
        project_id,
    )
    .await?;
    let rows = scm_scope::pull_requests(&state.db, &project, page.after, page.limit()).await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

/// Get a mirrored GitLab merge request with its notes and diff threads
#[utoipa::path(get, path = "/workspaces/{workspace_id}/gitlab/projects/{project_id}/merge-requests/{merge_request_id}",
    operation_id = "getGitlabMergeRequest",
    params(WorkspacePath,
        ("project_id" = Uuid, Path, description = "The project's id (not GitLab's)."),
        ("merge_request_id" = Uuid, Path, description = "The merge request's id (not GitLab's).")),
    responses((status = 200, description = "The merge request, its notes and threads, its reviewers, standing approvals, review decision, readiness and merge facts (null while unknown).", body = MergeRequestDetail),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace, no such project in its scope, or no such merge request in the project.", body = ErrorBody)))]
pub async fn merge_request(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams((workspace_id, project_id, merge_request_id)): PathParams<(Uuid, Uuid, Uuid)>,
) -> Result<Json<MergeRequestDetail>, ApiError> {
    let project = covered(
        &state,
        &caller,
        workspace_id,
        ConnectionKind::Gitlab,
        project_id,
    )
    .await?;
    let merge_request = scm_scope::pull_request(&state.db, &project, merge_request_id)
        .await?
        .ok_or_else(|| ApiError::not_found("merge request"))?;
    let notes = scm_scope::pull_request_comments(&state.db, &merge_request).await?;
    let threads = scm_scope::pull_request_threads(&state.db, &merge_request).await?;
    let diff_notes = scm_scope::pull_request_review_comments(&state.db, &merge_request).await?;
    let approvals = scm_scope::pull_request_approvals(&state.db, &merge_request).await?;
    let head_check = scm_scope::pull_request_head_check(&state.db, &merge_request).await?;
    let readiness = scm_scope::pull_request_readiness(&state.db, &merge_request).await?;
    let mut detail = MergeRequestDetail::new(merge_request, notes, threads, diff_notes, approvals);
    detail.head_check = head_check.map(Into::into);
    if let Some(r) = readiness {
        // Unknown is null: a stored list that does not parse is not a list.
        detail.reviewers = r
            .reviewers
            .and_then(|json| serde_json::from_str::<Vec<ReviewerView>>(&json).ok());
        detail.mergeable = r.mergeable;
        detail.merge_status = r.merge_status;
        detail.approval_read_at = r.approval_read_at.map(rfc3339);
        detail.merge_commit_sha = r.merge_commit_sha;
        detail.merged_by = r.merged_by;
    }
    Ok(Json(detail))
}
