//! The GraphQL operations of the contract, as cynic query structs.
//!
//! Each operation mirrors a document in `queries/` (the documents decide what
//! `schemas/gitlab.graphql` keeps; these structs are checked against that schema at compile
//! time). Operation names are the struct names, so the simulator counts calls per operation.
//! Enums carry a fallback, so a value newer than this build is `Other`, never a default; a
//! field GitLab failed to resolve is `null` with an error at its path (see
//! [`crate::Page::field_unknown`]).

use gitlab_schema::schema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// A GitLab `Time` (ISO 8601 / RFC 3339).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub OffsetDateTime);

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = self.0.format(&Rfc3339).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        OffsetDateTime::parse(&text, &Rfc3339)
            .map(Time)
            .map_err(serde::de::Error::custom)
    }
}

cynic::impl_scalar!(Time, schema::Time);

/// `pageInfo { hasNextPage endCursor }`.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
pub struct PageInfo {
    /// Whether GitLab says another page follows.
    pub has_next_page: bool,
    /// The cursor to pass as `after` for the next page.
    pub end_cursor: Option<String>,
}

/// Variables of the group listings.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct GroupPageVariables {
    /// The group's full path (`top/sub`).
    pub full_path: cynic::Id,
    /// Page size (GitLab allows 1..=100).
    pub first: i32,
    /// The previous page's `endCursor`; `None` for the first page.
    pub after: Option<String>,
}

/// `parent { id }`.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "Group")]
pub struct GroupRef {
    /// Global id (`gid://gitlab/Group/<n>`).
    pub id: cynic::Id,
}

/// One group of a `GroupSubgroups` page.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "Group")]
pub struct GroupNode {
    /// Global id: stable across renames and moves.
    pub id: cynic::Id,
    /// `top/sub/...` now.
    pub full_path: cynic::Id,
    /// Display name.
    pub name: String,
    /// The parent group.
    pub parent: Option<GroupRef>,
}

/// `descendantGroups(...) { pageInfo nodes }` (GitLab gives no count here).
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "GroupConnection")]
pub struct GroupConnection {
    /// Cursor state.
    pub page_info: PageInfo,
    /// The page; a `null` entry is a group GitLab failed to resolve (see the errors).
    pub nodes: Option<Vec<Option<GroupNode>>>,
}

/// The group of a `GroupSubgroups` page.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Group", variables = "GroupPageVariables")]
pub struct SubgroupsGroup {
    /// Global id.
    pub id: cynic::Id,
    /// Full path now.
    pub full_path: cynic::Id,
    /// Every level below, not only children.
    #[arguments(first: $first, after: $after, includeParentDescendants: true)]
    pub descendant_groups: Option<GroupConnection>,
}

/// Operation `GroupSubgroups`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "GroupPageVariables")]
pub struct GroupSubgroups {
    /// `None` when the group is gone or not visible to the token.
    #[arguments(fullPath: $full_path)]
    pub group: Option<SubgroupsGroup>,
}

/// `group { id fullPath }` of a project.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "Group")]
pub struct ProjectGroup {
    /// Global id.
    pub id: cynic::Id,
    /// Full path now.
    pub full_path: cynic::Id,
}

/// A project as discovery and lookups see it.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "Project")]
pub struct ProjectNode {
    /// Global id (`gid://gitlab/Project/<n>`): the native id projects are matched by.
    pub id: cynic::Id,
    /// `group/sub/project` now: changes on rename and move.
    pub full_path: cynic::Id,
    /// Display name.
    pub name: String,
    /// Path segment.
    pub path: String,
    /// Archived; `None` when GitLab could not say.
    pub archived: Option<bool>,
    /// The group it sits in directly (`None` in a user namespace).
    pub group: Option<ProjectGroup>,
}

/// `projects(...) { count pageInfo nodes }`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "ProjectConnection")]
pub struct ProjectConnection {
    /// What GitLab says the full listing holds.
    pub count: i32,
    /// Cursor state.
    pub page_info: PageInfo,
    /// The page; a `null` entry is a project GitLab failed to resolve.
    pub nodes: Option<Vec<Option<ProjectNode>>>,
}

/// The group of a `GroupProjects` page.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Group", variables = "GroupPageVariables")]
pub struct ProjectsGroup {
    /// Global id.
    pub id: cynic::Id,
    /// Full path now.
    pub full_path: cynic::Id,
    /// Direct projects only: each subgroup's are listed under it.
    #[arguments(first: $first, after: $after, includeSubgroups: false)]
    pub projects: ProjectConnection,
}

/// Operation `GroupProjects`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "GroupPageVariables")]
pub struct GroupProjects {
    /// `None` when the group is gone or not visible to the token.
    #[arguments(fullPath: $full_path)]
    pub group: Option<ProjectsGroup>,
}

/// Variables of `GroupProjectCount`.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct GroupPathVariables {
    /// The group's full path.
    pub full_path: cynic::Id,
}

/// `projects(includeSubgroups: true) { count }`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "ProjectConnection")]
pub struct ProjectCount {
    /// Projects in the group and all its subgroups.
    pub count: i32,
}

/// The group of a `GroupProjectCount` answer.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Group")]
pub struct CountGroup {
    /// Global id.
    pub id: cynic::Id,
    /// With every subgroup's projects.
    #[arguments(includeSubgroups: true)]
    pub projects: ProjectCount,
}

/// Operation `GroupProjectCount`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "GroupPathVariables")]
pub struct GroupProjectCount {
    /// `None` when the group is gone or not visible.
    #[arguments(fullPath: $full_path)]
    pub group: Option<CountGroup>,
}

/// Variables of `ProjectById`.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct ProjectByIdVariables {
    /// Global ids.
    pub ids: Option<Vec<cynic::Id>>,
}

/// `projects(ids:) { nodes }`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "ProjectConnection")]
pub struct ProjectList {
    /// The projects found (none when the id names nothing visible).
    pub nodes: Option<Vec<Option<ProjectNode>>>,
}

/// Operation `ProjectById`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "ProjectByIdVariables")]
pub struct ProjectById {
    /// The listing for the ids.
    #[arguments(ids: $ids)]
    pub projects: Option<ProjectList>,
}

/// Variables of the project listings.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct ProjectPageVariables {
    /// The project's full path.
    pub full_path: cynic::Id,
    /// Only items updated after this (the incremental watermark); `None` for all.
    pub updated_after: Option<Time>,
    /// Page size (1..=100).
    pub first: i32,
    /// The previous page's `endCursor`.
    pub after: Option<String>,
}

/// `IssueState`.
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
pub enum IssueState {
    /// Open.
    #[cynic(rename = "opened")]
    Opened,
    /// Closed.
    #[cynic(rename = "closed")]
    Closed,
    /// Locked.
    #[cynic(rename = "locked")]
    Locked,
    /// Only a filter value; GitLab never answers it.
    #[cynic(rename = "all")]
    All,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// `MergeRequestState`.
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
pub enum MergeRequestState {
    /// Open.
    #[cynic(rename = "opened")]
    Opened,
    /// Closed without merging.
    #[cynic(rename = "closed")]
    Closed,
    /// Locked.
    #[cynic(rename = "locked")]
    Locked,
    /// Merged.
    #[cynic(rename = "merged")]
    Merged,
    /// Only a filter value.
    #[cynic(rename = "all")]
    All,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// `DetailedMergeStatus`, with the values newer GitLab added (the supplement).
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
#[cynic(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DetailedMergeStatus {
    /// Blocked by another merge request.
    BlockedStatus,
    /// Cannot merge (conflicts, broken source).
    BrokenStatus,
    /// GitLab is still checking: mergeability unknown.
    Checking,
    /// The pipeline must pass.
    CiMustPass,
    /// The pipeline is still running.
    CiStillRunning,
    /// Unresolved discussions.
    DiscussionsNotResolved,
    /// A draft.
    DraftStatus,
    /// External status checks pending.
    ExternalStatusChecks,
    /// Mergeable.
    Mergeable,
    /// Approvals missing.
    NotApproved,
    /// Not open.
    NotOpen,
    /// Security policies deny it.
    PoliciesDenied,
    /// Being prepared.
    Preparing,
    /// Not checked yet.
    Unchecked,
    /// Someone requested changes (newer GitLab).
    RequestedChanges,
    /// Approvals are syncing: unsettled (newer GitLab).
    ApprovalsSyncing,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// `MergeRequestReviewState`, with the verdicts newer GitLab added (the supplement).
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
#[cynic(
    graphql_type = "MergeRequestReviewState",
    rename_all = "SCREAMING_SNAKE_CASE"
)]
pub enum ReviewState {
    /// Reviewed.
    Reviewed,
    /// Not reviewed yet.
    Unreviewed,
    /// Requested changes.
    RequestedChanges,
    /// Approved.
    Approved,
    /// Approval withdrawn.
    Unapproved,
    /// Review started.
    ReviewStarted,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// An issue's author.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "UserCore")]
pub struct IssueAuthor {
    /// Username.
    pub username: String,
}

/// One issue of a `ProjectIssues` page.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "Issue")]
pub struct IssueNode {
    /// Global id.
    pub id: cynic::Id,
    /// Number within the project.
    pub iid: cynic::Id,
    /// Title.
    pub title: String,
    /// Description (markdown).
    pub description: Option<String>,
    /// State.
    pub state: IssueState,
    /// Created.
    pub created_at: Time,
    /// Last updated: the forward-only comparison key and the incremental watermark.
    pub updated_at: Time,
    /// Closed, if closed.
    pub closed_at: Option<Time>,
    /// Whether the discussion is locked.
    pub discussion_locked: bool,
    /// User notes (system notes excluded).
    pub user_notes_count: i32,
    /// The author.
    pub author: IssueAuthor,
}

/// A merge request's author.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "MergeRequestAuthor")]
pub struct MergeRequestAuthor {
    /// Username.
    pub username: String,
}

/// A reviewer's interaction with the merge request.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "UserMergeRequestInteraction")]
pub struct ReviewerInteraction {
    /// The reviewer's state; `None` when GitLab gives none (or failed: see the errors).
    pub review_state: Option<ReviewState>,
}

/// One reviewer.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "MergeRequestReviewer")]
pub struct Reviewer {
    /// Username.
    pub username: String,
    /// Their interaction.
    pub merge_request_interaction: Option<ReviewerInteraction>,
}

/// `pageInfo { hasNextPage }` of a nested connection.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "PageInfo")]
pub struct NestedPageInfo {
    /// Whether more reviewers follow: then this list is incomplete.
    pub has_next_page: bool,
}

/// `reviewers { pageInfo nodes }`.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "MergeRequestReviewerConnection")]
pub struct ReviewerConnection {
    /// Whether the list is complete, and where `MergeRequestReviewers` continues it.
    pub page_info: PageInfo,
    /// The reviewers.
    pub nodes: Option<Vec<Option<Reviewer>>>,
}

/// An approver (`UserCore`).
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "UserCore")]
pub struct Approver {
    /// Username.
    pub username: String,
}

/// `approvedBy { pageInfo nodes }`: whose approval stands now.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "UserCoreConnection")]
pub struct ApproverConnection {
    /// Whether more approvers follow: then the list is incomplete.
    pub page_info: NestedPageInfo,
    /// The approvers.
    pub nodes: Option<Vec<Option<Approver>>>,
}

/// `PipelineStatusEnum`.
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
#[cynic(
    graphql_type = "PipelineStatusEnum",
    rename_all = "SCREAMING_SNAKE_CASE"
)]
pub enum PipelineStatus {
    /// Canceled.
    Canceled,
    /// Created.
    Created,
    /// Failed.
    Failed,
    /// Waiting for a manual action.
    Manual,
    /// Pending.
    Pending,
    /// Preparing.
    Preparing,
    /// Running.
    Running,
    /// Scheduled.
    Scheduled,
    /// Skipped.
    Skipped,
    /// Succeeded.
    Success,
    /// Waiting for a resource.
    WaitingForResource,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

impl PipelineStatus {
    /// GitLab's spelling, lowercased (as Pipeline Hooks state it).
    pub fn as_str(&self) -> &str {
        match self {
            PipelineStatus::Canceled => "canceled",
            PipelineStatus::Created => "created",
            PipelineStatus::Failed => "failed",
            PipelineStatus::Manual => "manual",
            PipelineStatus::Pending => "pending",
            PipelineStatus::Preparing => "preparing",
            PipelineStatus::Running => "running",
            PipelineStatus::Scheduled => "scheduled",
            PipelineStatus::Skipped => "skipped",
            PipelineStatus::Success => "success",
            PipelineStatus::WaitingForResource => "waiting_for_resource",
            PipelineStatus::Other(other) => other,
        }
    }
}

/// `headPipeline { status sha }`.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "Pipeline")]
pub struct HeadPipeline {
    /// Its status.
    pub status: PipelineStatus,
    /// The commit it ran on.
    pub sha: Option<String>,
}

/// Who merged (`UserCore`).
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "UserCore")]
pub struct MergeUser {
    /// Username.
    pub username: String,
}

/// One merge request of a `ProjectMergeRequests` page. Nullable fields are `None` either
/// because GitLab says so or because it failed to resolve them: tell the two apart with
/// [`crate::Page::field_unknown`].
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "MergeRequest")]
pub struct MergeRequestNode {
    /// Global id.
    pub id: cynic::Id,
    /// Number within the project.
    pub iid: String,
    /// Title.
    pub title: String,
    /// Description (markdown).
    pub description: Option<String>,
    /// State.
    pub state: MergeRequestState,
    /// Whether it is a draft.
    pub draft: bool,
    /// Created.
    pub created_at: Time,
    /// Last updated.
    pub updated_at: Time,
    /// Merged, if merged.
    pub merged_at: Option<Time>,
    /// Whether the discussion is locked.
    pub discussion_locked: bool,
    /// User notes; `None` is unknown, never zero.
    pub user_notes_count: Option<i32>,
    /// Source branch.
    pub source_branch: String,
    /// Target branch.
    pub target_branch: String,
    /// Head commit.
    pub diff_head_sha: Option<String>,
    /// Detailed merge status.
    pub detailed_merge_status: Option<DetailedMergeStatus>,
    /// Whether the approval rules are met (not whether anyone approved).
    pub approved: bool,
    /// The author; `None` for a deleted account.
    pub author: Option<MergeRequestAuthor>,
    /// Whether it can be merged now; `None` when GitLab failed it (see the errors).
    pub mergeable: Option<bool>,
    /// The merge commit, once merged.
    pub merge_commit_sha: Option<String>,
    /// Who merged it; `None` before a merge, or when GitLab does not say.
    pub merge_user: Option<MergeUser>,
    /// The head pipeline; `None` without an error at its path means GitLab reports none.
    pub head_pipeline: Option<HeadPipeline>,
    /// Whose approval stands; `None` when GitLab failed it (unknown, not empty).
    pub approved_by: Option<ApproverConnection>,
    /// The reviewers; `None` when GitLab failed them (unknown, not empty).
    pub reviewers: Option<ReviewerConnection>,
}

/// `issues(...) { count pageInfo nodes }`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "IssueConnection")]
pub struct IssueConnection {
    /// What GitLab says the listing holds.
    pub count: i32,
    /// Cursor state.
    pub page_info: PageInfo,
    /// The page.
    pub nodes: Option<Vec<Option<IssueNode>>>,
}

/// `mergeRequests(...) { count pageInfo nodes }`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "MergeRequestConnection")]
pub struct MergeRequestConnection {
    /// What GitLab says the listing holds.
    pub count: i32,
    /// Cursor state.
    pub page_info: PageInfo,
    /// The page.
    pub nodes: Option<Vec<Option<MergeRequestNode>>>,
}

/// The project of a `ProjectIssues` page.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Project", variables = "ProjectPageVariables")]
pub struct IssuesProject {
    /// Global id.
    pub id: cynic::Id,
    /// Full path now.
    pub full_path: cynic::Id,
    /// Least recently updated first, so a watermark can follow the pages.
    #[arguments(updatedAfter: $updated_after, sort: UPDATED_ASC, first: $first, after: $after)]
    pub issues: Option<IssueConnection>,
}

/// The project of a `ProjectMergeRequests` page.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Project", variables = "ProjectPageVariables")]
pub struct MergeRequestsProject {
    /// Global id.
    pub id: cynic::Id,
    /// Full path now.
    pub full_path: cynic::Id,
    /// Least recently updated first.
    #[arguments(updatedAfter: $updated_after, sort: UPDATED_ASC, first: $first, after: $after)]
    pub merge_requests: Option<MergeRequestConnection>,
}

/// Operation `ProjectIssues`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "ProjectPageVariables")]
pub struct ProjectIssues {
    /// `None` when the project is gone or not visible.
    #[arguments(fullPath: $full_path)]
    pub project: Option<IssuesProject>,
}

/// Operation `ProjectMergeRequests`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "ProjectPageVariables")]
pub struct ProjectMergeRequests {
    /// `None` when the project is gone or not visible.
    #[arguments(fullPath: $full_path)]
    pub project: Option<MergeRequestsProject>,
}

/// Variables of the reads of one item by number.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct ProjectItemVariables {
    /// The project's full path.
    pub full_path: cynic::Id,
    /// The item's number within the project.
    pub iid: String,
}

/// The project of a `ProjectIssue` read.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Project", variables = "ProjectItemVariables")]
pub struct IssueProject {
    /// Global id.
    pub id: cynic::Id,
    /// Full path now.
    pub full_path: cynic::Id,
    /// The issue of that number, if any.
    #[arguments(iids: [$iid], first: 1)]
    pub issues: Option<IssueConnection>,
}

/// The project of a `ProjectMergeRequest` read.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Project", variables = "ProjectItemVariables")]
pub struct MergeRequestProject {
    /// Global id.
    pub id: cynic::Id,
    /// Full path now.
    pub full_path: cynic::Id,
    /// The merge request of that number, if any.
    #[arguments(iids: [$iid], first: 1)]
    pub merge_requests: Option<MergeRequestConnection>,
}

/// Operation `ProjectIssue`: one issue by number.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "ProjectItemVariables")]
pub struct ProjectIssue {
    /// `None` when the project is gone or not visible.
    #[arguments(fullPath: $full_path)]
    pub project: Option<IssueProject>,
}

/// Operation `ProjectMergeRequest`: one merge request by number.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "ProjectItemVariables")]
pub struct ProjectMergeRequest {
    /// `None` when the project is gone or not visible.
    #[arguments(fullPath: $full_path)]
    pub project: Option<MergeRequestProject>,
}

/// A `NoteID`: `gid://gitlab/<Note|DiffNote|DiscussionNote>/<id>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NoteGid(pub String);

impl NoteGid {
    /// The REST note id (the number after the last `/`).
    pub fn number(&self) -> Option<u64> {
        gid_tail(&self.0).parse().ok()
    }
}

/// A `DiscussionID`: `gid://gitlab/Discussion/<40 hex>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DiscussionGid(pub String);

impl DiscussionGid {
    /// The REST discussion id (the hex after the last `/`).
    pub fn tail(&self) -> &str {
        gid_tail(&self.0)
    }
}

fn gid_tail(gid: &str) -> &str {
    gid.rsplit('/').next().unwrap_or_default()
}

cynic::impl_scalar!(NoteGid, schema::NoteID);
cynic::impl_scalar!(DiscussionGid, schema::DiscussionID);

/// Variables of `MergeRequestDiscussions`.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct DiscussionPageVariables {
    /// The project's full path.
    pub full_path: cynic::Id,
    /// The merge request's number within the project.
    pub iid: String,
    /// Page size (1..=100).
    pub first: i32,
    /// The previous page's `endCursor`.
    pub after: Option<String>,
}

/// A note's author (`UserCore`).
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "UserCore")]
pub struct NoteAuthor {
    /// Global id (`gid://gitlab/User/<n>`).
    pub id: cynic::Id,
    /// Username.
    pub username: String,
}

/// Who resolved a discussion.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "UserCore")]
pub struct Resolver {
    /// Username.
    pub username: String,
}

/// `diffRefs`: the versions a diff note was written against.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "DiffRefs")]
pub struct DiffRefs {
    /// Merge base; `None` when GitLab has none.
    pub base_sha: Option<String>,
    /// The target branch's commit the diff starts from.
    pub start_sha: String,
    /// The head commit the note was written on.
    pub head_sha: String,
}

/// A diff note's place in the diff.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "DiffPosition")]
pub struct DiffPosition {
    /// The file (new path, else old).
    pub file_path: String,
    /// Path before the change.
    pub old_path: Option<String>,
    /// Path after the change.
    pub new_path: Option<String>,
    /// Line in the old file (a removed or unchanged line).
    pub old_line: Option<i32>,
    /// Line in the new file (an added or unchanged line).
    pub new_line: Option<i32>,
    /// The diff's versions.
    pub diff_refs: DiffRefs,
}

/// One note of a discussion.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "Note")]
pub struct DiscussionNote {
    /// Global id; [`NoteGid::number`] is the REST note id.
    pub id: NoteGid,
    /// The author.
    pub author: NoteAuthor,
    /// Markdown body.
    pub body: String,
    /// Written by GitLab (state changes, approvals, review requests).
    pub system: bool,
    /// Created.
    pub created_at: Time,
    /// Last updated: the forward-only comparison key.
    pub updated_at: Time,
    /// Whether the note can be resolved (a thread note).
    pub resolvable: bool,
    /// Resolved.
    pub resolved: bool,
    /// Set on a diff note.
    pub position: Option<DiffPosition>,
}

/// `notes { pageInfo nodes }` of a discussion.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "NoteConnection")]
pub struct DiscussionNotes {
    /// Whether more notes follow: then this thread is incomplete.
    pub page_info: NestedPageInfo,
    /// The notes, oldest first.
    pub nodes: Option<Vec<Option<DiscussionNote>>>,
}

/// One discussion (thread).
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "Discussion")]
pub struct Discussion {
    /// Global id; [`DiscussionGid::tail`] is the REST discussion id.
    pub id: DiscussionGid,
    /// Created.
    pub created_at: Time,
    /// Whether it can be resolved (a thread, not a lone note).
    pub resolvable: bool,
    /// Resolved.
    pub resolved: bool,
    /// When resolved.
    pub resolved_at: Option<Time>,
    /// Who resolved it.
    pub resolved_by: Option<Resolver>,
    /// Its notes; the first starts the thread, the rest reply.
    pub notes: DiscussionNotes,
}

/// `discussions(...) { pageInfo nodes }` (GitLab gives no count here).
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "DiscussionConnection")]
pub struct DiscussionConnection {
    /// Cursor state.
    pub page_info: PageInfo,
    /// The page; a `null` entry is a discussion GitLab failed to resolve.
    pub nodes: Option<Vec<Option<Discussion>>>,
}

/// The merge request of a `MergeRequestDiscussions` page.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "MergeRequest", variables = "DiscussionPageVariables")]
pub struct DiscussionsMergeRequest {
    /// Global id.
    pub id: cynic::Id,
    /// Number within the project.
    pub iid: String,
    /// Oldest first.
    #[arguments(first: $first, after: $after)]
    pub discussions: DiscussionConnection,
}

/// The project of a `MergeRequestDiscussions` page.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Project", variables = "DiscussionPageVariables")]
pub struct DiscussionsProject {
    /// Global id.
    pub id: cynic::Id,
    /// `None` when the merge request is gone or not visible.
    #[arguments(iid: $iid)]
    pub merge_request: Option<DiscussionsMergeRequest>,
}

/// Operation `MergeRequestDiscussions`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "DiscussionPageVariables")]
pub struct MergeRequestDiscussions {
    /// `None` when the project is gone or not visible.
    #[arguments(fullPath: $full_path)]
    pub project: Option<DiscussionsProject>,
}

/// The project of a `MergeRequestReadiness` read.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Project", variables = "ProjectItemVariables")]
pub struct ReadinessProject {
    /// Global id.
    pub id: cynic::Id,
    /// Full path now.
    pub full_path: cynic::Id,
    /// The merge request of that number; `None` when gone, not visible, or failed.
    #[arguments(iid: $iid)]
    pub merge_request: Option<MergeRequestNode>,
}

/// Operation `MergeRequestReadiness`: one merge request's readiness after its hook.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "ProjectItemVariables")]
pub struct MergeRequestReadiness {
    /// `None` when the project is gone or not visible.
    #[arguments(fullPath: $full_path)]
    pub project: Option<ReadinessProject>,
}

/// Variables of `MergeRequestReviewers`.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct ReviewerPageVariables {
    /// The project's full path.
    pub full_path: cynic::Id,
    /// The merge request's number within the project.
    pub iid: String,
    /// Page size (1..=100).
    pub first: i32,
    /// The previous page's `endCursor`.
    pub after: Option<String>,
}

/// The merge request of a `MergeRequestReviewers` page.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "MergeRequest", variables = "ReviewerPageVariables")]
pub struct ReviewersMergeRequest {
    /// Global id.
    pub id: cynic::Id,
    /// One page of reviewers; `None` when GitLab failed them.
    #[arguments(first: $first, after: $after)]
    pub reviewers: Option<ReviewerConnection>,
}

/// The project of a `MergeRequestReviewers` page.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Project", variables = "ReviewerPageVariables")]
pub struct ReviewersProject {
    /// Global id.
    pub id: cynic::Id,
    /// `None` when the merge request is gone or not visible.
    #[arguments(iid: $iid)]
    pub merge_request: Option<ReviewersMergeRequest>,
}

/// Operation `MergeRequestReviewers`: completes a merge request's nested reviewer list.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "ReviewerPageVariables")]
pub struct MergeRequestReviewers {
    /// `None` when the project is gone or not visible.
    #[arguments(fullPath: $full_path)]
    pub project: Option<ReviewersProject>,
}
