//! The GraphQL schema the simulator serves: the part of GitLab's our contract reads, with the
//! same type, field, argument and enum names (the client, generated from
//! `schemas/gitlab.graphql`, is tested against it over HTTP).

use std::sync::{Arc, Mutex, MutexGuard};

use async_graphql::{
    Context, EmptyMutation, EmptySubscription, Enum, ID, InputValueError, InputValueResult, Object,
    Scalar, ScalarType, Schema, SimpleObject, Value,
};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::model::{self, Model, NoteOn};

/// The executable schema.
pub(crate) type GitlabSchema = Schema<Query, EmptyMutation, EmptySubscription>;

/// Builds the schema over the shared model.
pub(crate) fn schema(model: Arc<Mutex<Model>>) -> GitlabSchema {
    Schema::build(Query, EmptyMutation, EmptySubscription)
        .data(model)
        .finish()
}

/// The SDL of what the simulator serves.
pub fn sdl() -> String {
    Schema::build(Query, EmptyMutation, EmptySubscription)
        .finish()
        .sdl()
}

/// GitLab's largest page.
const MAX_PAGE: usize = 100;

fn model<'a>(ctx: &Context<'a>) -> MutexGuard<'a, Model> {
    ctx.data_unchecked::<Arc<Mutex<Model>>>()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// `Time`: RFC 3339, UTC.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Time(OffsetDateTime);

#[Scalar(name = "Time")]
impl ScalarType for Time {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(s) => OffsetDateTime::parse(s, &Rfc3339)
                .map(Time)
                .map_err(|e| InputValueError::custom(e.to_string())),
            _ => Err(InputValueError::expected_type(value)),
        }
    }
    fn to_value(&self) -> Value {
        Value::String(self.0.format(&Rfc3339).unwrap_or_default())
    }
}

/// `pageInfo`.
#[derive(SimpleObject, Clone, Debug)]
pub(crate) struct PageInfo {
    end_cursor: Option<String>,
    has_next_page: bool,
}

/// One page of `items` after the offset cursor `after`; cursors are offsets in text.
fn page<T: Clone>(
    items: &[T],
    first: Option<i32>,
    after: Option<String>,
) -> async_graphql::Result<(Vec<T>, PageInfo)> {
    let first = match first {
        None => MAX_PAGE,
        Some(n) if (1..=MAX_PAGE as i32).contains(&n) => n as usize,
        Some(n) => return Err(format!("first must be between 1 and {MAX_PAGE}, not {n}").into()),
    };
    let start = match after {
        None => 0,
        Some(c) => c.parse::<usize>().map_err(|_| "invalid cursor")?,
    };
    let end = (start + first).min(items.len());
    let slice = items.get(start..end).unwrap_or_default().to_vec();
    Ok((
        slice,
        PageInfo {
            end_cursor: Some(end.to_string()),
            has_next_page: end < items.len(),
        },
    ))
}

fn gid(kind: &str, id: u64) -> ID {
    ID(format!("gid://gitlab/{kind}/{id}"))
}

/// `IssueState`.
#[derive(Enum, Copy, Clone, Eq, PartialEq)]
pub(crate) enum IssueState {
    #[graphql(name = "opened")]
    Opened,
    #[graphql(name = "closed")]
    Closed,
    #[graphql(name = "locked")]
    Locked,
    #[graphql(name = "all")]
    All,
}

/// `MergeRequestState`.
#[derive(Enum, Copy, Clone, Eq, PartialEq)]
pub(crate) enum MergeRequestState {
    #[graphql(name = "opened")]
    Opened,
    #[graphql(name = "closed")]
    Closed,
    #[graphql(name = "locked")]
    Locked,
    #[graphql(name = "merged")]
    Merged,
    #[graphql(name = "all")]
    All,
}

/// `IssueSort`: every value GitLab declares; the simulator orders by creation or update only.
#[derive(Enum, Copy, Clone, Eq, PartialEq)]
pub(crate) enum IssueSort {
    BlockingIssuesAsc,
    BlockingIssuesDesc,
    ClosedAtAsc,
    ClosedAtDesc,
    CreatedAsc,
    CreatedDesc,
    DueDateAsc,
    DueDateDesc,
    EscalationStatusAsc,
    EscalationStatusDesc,
    HealthStatusAsc,
    HealthStatusDesc,
    LabelPriorityAsc,
    LabelPriorityDesc,
    MilestoneDueAsc,
    MilestoneDueDesc,
    PopularityAsc,
    PopularityDesc,
    PriorityAsc,
    PriorityDesc,
    PublishedAsc,
    PublishedDesc,
    RelativePositionAsc,
    SeverityAsc,
    SeverityDesc,
    SlaDueAtAsc,
    SlaDueAtDesc,
    TitleAsc,
    TitleDesc,
    UpdatedAsc,
    UpdatedDesc,
    WeightAsc,
    WeightDesc,
    #[graphql(name = "created_asc", deprecation = "renamed in 13.5")]
    LegacyCreatedAsc,
    #[graphql(name = "created_desc", deprecation = "renamed in 13.5")]
    LegacyCreatedDesc,
    #[graphql(name = "updated_asc", deprecation = "renamed in 13.5")]
    LegacyUpdatedAsc,
    #[graphql(name = "updated_desc", deprecation = "renamed in 13.5")]
    LegacyUpdatedDesc,
}

/// `MergeRequestSort`: every value GitLab declares; the simulator orders by creation or update
/// only.
#[derive(Enum, Copy, Clone, Eq, PartialEq)]
pub(crate) enum MergeRequestSort {
    ClosedAtAsc,
    ClosedAtDesc,
    CreatedAsc,
    CreatedDesc,
    LabelPriorityAsc,
    LabelPriorityDesc,
    MergedAtAsc,
    MergedAtDesc,
    MilestoneDueAsc,
    MilestoneDueDesc,
    PriorityAsc,
    PriorityDesc,
    TitleAsc,
    TitleDesc,
    UpdatedAsc,
    UpdatedDesc,
    #[graphql(name = "created_asc", deprecation = "renamed in 13.5")]
    LegacyCreatedAsc,
    #[graphql(name = "created_desc", deprecation = "renamed in 13.5")]
    LegacyCreatedDesc,
    #[graphql(name = "updated_asc", deprecation = "renamed in 13.5")]
    LegacyUpdatedAsc,
    #[graphql(name = "updated_desc", deprecation = "renamed in 13.5")]
    LegacyUpdatedDesc,
}

/// `DetailedMergeStatus`, newer values included.
#[derive(Enum, Copy, Clone, Eq, PartialEq)]
pub(crate) enum DetailedMergeStatus {
    BlockedStatus,
    BrokenStatus,
    Checking,
    CiMustPass,
    CiStillRunning,
    DiscussionsNotResolved,
    DraftStatus,
    ExternalStatusChecks,
    Mergeable,
    NotApproved,
    NotOpen,
    PoliciesDenied,
    Preparing,
    Unchecked,
    RequestedChanges,
    ApprovalsSyncing,
}

/// `MergeRequestReviewState`, newer values included.
#[derive(Enum, Copy, Clone, Eq, PartialEq)]
pub(crate) enum MergeRequestReviewState {
    Reviewed,
    Unreviewed,
    RequestedChanges,
    Approved,
    Unapproved,
    ReviewStarted,
}

fn enum_value<E: async_graphql::resolver_utils::EnumType>(text: &str) -> Option<E> {
    E::items().iter().find(|i| i.name == text).map(|i| i.value)
}

/// `group(fullPath:)`.
pub(crate) struct Group(model::Group, String);

#[Object]
impl Group {
    async fn id(&self) -> ID {
        gid("Group", self.0.id)
    }
    async fn full_path(&self) -> ID {
        ID(self.1.clone())
    }
    async fn name(&self) -> &str {
        &self.0.name
    }
    async fn parent(&self, ctx: &Context<'_>) -> Option<Group> {
        let m = model(ctx);
        group(&m, self.0.parent?)
    }
    async fn descendant_groups(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        first: Option<i32>,
        #[graphql(default_with = "Some(true)")] include_parent_descendants: Option<bool>,
    ) -> async_graphql::Result<Option<GroupConnection>> {
        let m = model(ctx);
        let ids: Vec<u64> = if include_parent_descendants.unwrap_or(true) {
            m.descendants(self.0.id)
        } else {
            m.groups
                .values()
                .filter(|g| g.parent == Some(self.0.id))
                .map(|g| g.id)
                .collect()
        };
        let (ids, page_info) = page(&ids, first, after)?;
        Ok(Some(GroupConnection {
            nodes: Some(ids.into_iter().map(|id| group(&m, id)).collect()),
            page_info,
        }))
    }
    async fn projects(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        first: Option<i32>,
        #[graphql(default_with = "Some(false)")] include_subgroups: Option<bool>,
    ) -> async_graphql::Result<ProjectConnection> {
        let m = model(ctx);
        let mut groups = vec![self.0.id];
        if include_subgroups.unwrap_or(false) {
            groups.extend(m.descendants(self.0.id));
        }
        let ids: Vec<u64> = m
            .projects
            .values()
            .filter(|p| groups.contains(&p.group))
            .map(|p| p.id)
            .collect();
        let (page_ids, page_info) = page(&ids, first, after)?;
        Ok(ProjectConnection {
            count: ids.len() as i32,
            nodes: Some(page_ids.into_iter().map(|id| project(&m, id)).collect()),
            page_info,
        })
    }
}

fn group(m: &Model, id: u64) -> Option<Group> {
    Some(Group(m.groups.get(&id)?.clone(), m.group_path(id)?))
}

fn project(m: &Model, id: u64) -> Option<Project> {
    Some(Project(m.projects.get(&id)?.clone(), m.project_path(id)?))
}

/// `GroupConnection` (GitLab gives it no count).
#[derive(SimpleObject)]
pub(crate) struct GroupConnection {
    nodes: Option<Vec<Option<Group>>>,
    page_info: PageInfo,
}

/// `ProjectConnection`.
#[derive(SimpleObject)]
pub(crate) struct ProjectConnection {
    count: i32,
    nodes: Option<Vec<Option<Project>>>,
    page_info: PageInfo,
}

/// A project.
pub(crate) struct Project(model::Project, String);

#[Object]
impl Project {
    async fn id(&self) -> ID {
        gid("Project", self.0.id)
    }
    async fn full_path(&self) -> ID {
        ID(self.1.clone())
    }
    async fn name(&self) -> &str {
        &self.0.name
    }
    async fn path(&self) -> &str {
        &self.0.path
    }
    async fn archived(&self) -> Option<bool> {
        Some(self.0.archived)
    }
    async fn group(&self, ctx: &Context<'_>) -> Option<Group> {
        group(&model(ctx), self.0.group)
    }
    async fn issues(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        first: Option<i32>,
        #[graphql(default_with = "Some(IssueSort::LegacyCreatedDesc)")] sort: Option<IssueSort>,
        updated_after: Option<Time>,
        iids: Option<Vec<String>>,
    ) -> async_graphql::Result<Option<IssueConnection>> {
        let m = model(ctx);
        let mut items: Vec<model::Issue> = m
            .issues
            .values()
            .filter(|i| i.project == self.0.id)
            .filter(|i| updated_after.is_none_or(|t| i.updated_at > t.0))
            .filter(|i| numbered(iids.as_deref(), i.iid))
            .cloned()
            .collect();
        match sort.unwrap_or(IssueSort::LegacyCreatedDesc) {
            IssueSort::UpdatedAsc | IssueSort::LegacyUpdatedAsc => {
                items.sort_by_key(|i| (i.updated_at, i.id))
            }
            IssueSort::UpdatedDesc | IssueSort::LegacyUpdatedDesc => {
                items.sort_by_key(|i| std::cmp::Reverse((i.updated_at, i.id)))
            }
            IssueSort::CreatedAsc | IssueSort::LegacyCreatedAsc => {
                items.sort_by_key(|i| (i.created_at, i.id))
            }
            IssueSort::CreatedDesc | IssueSort::LegacyCreatedDesc => {
                items.sort_by_key(|i| std::cmp::Reverse((i.created_at, i.id)))
            }
            _ => return Err("the simulator orders issues by CREATED_* or UPDATED_* only".into()),
        }
        let (page_items, page_info) = page(&items, first, after)?;
        let nodes = page_items
            .into_iter()
            .map(|i| {
                let notes = m.user_notes_count(NoteOn::Issue(i.project, i.iid)) as i32;
                Some(Issue(i, notes))
            })
            .collect();
        Ok(Some(IssueConnection {
            count: items.len() as i32,
            nodes: Some(nodes),
            page_info,
        }))
    }
    async fn merge_request(&self, ctx: &Context<'_>, iid: String) -> Option<MergeRequest> {
        let m = model(ctx);
        let iid: u64 = iid.parse().ok()?;
        let mr = m.merge_requests.get(&(self.0.id, iid))?.clone();
        let notes = m.user_notes_count(NoteOn::MergeRequest(mr.project, mr.iid)) as i32;
        Some(MergeRequest(mr, notes))
    }
    async fn merge_requests(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        first: Option<i32>,
        #[graphql(default_with = "Some(MergeRequestSort::LegacyCreatedDesc)")] sort: Option<
            MergeRequestSort,
        >,
        updated_after: Option<Time>,
        iids: Option<Vec<String>>,
    ) -> async_graphql::Result<Option<MergeRequestConnection>> {
        let m = model(ctx);
        let mut items: Vec<model::MergeRequest> = m
            .merge_requests
            .values()
            .filter(|i| i.project == self.0.id)
            .filter(|i| updated_after.is_none_or(|t| i.updated_at > t.0))
            .filter(|i| numbered(iids.as_deref(), i.iid))
            .cloned()
            .collect();
        match sort.unwrap_or(MergeRequestSort::LegacyCreatedDesc) {
            MergeRequestSort::UpdatedAsc | MergeRequestSort::LegacyUpdatedAsc => {
                items.sort_by_key(|i| (i.updated_at, i.id))
            }
            MergeRequestSort::UpdatedDesc | MergeRequestSort::LegacyUpdatedDesc => {
                items.sort_by_key(|i| std::cmp::Reverse((i.updated_at, i.id)))
            }
            MergeRequestSort::CreatedAsc | MergeRequestSort::LegacyCreatedAsc => {
                items.sort_by_key(|i| (i.created_at, i.id))
            }
            MergeRequestSort::CreatedDesc | MergeRequestSort::LegacyCreatedDesc => {
                items.sort_by_key(|i| std::cmp::Reverse((i.created_at, i.id)))
            }
            _ => {
                return Err(
                    "the simulator orders merge requests by CREATED_* or UPDATED_* only".into(),
                );
            }
        }
        let (page_items, page_info) = page(&items, first, after)?;
        let nodes = page_items
            .into_iter()
            .map(|i| {
                let notes = m.user_notes_count(NoteOn::MergeRequest(i.project, i.iid)) as i32;
                Some(MergeRequest(i, notes))
            })
            .collect();
        Ok(Some(MergeRequestConnection {
            count: items.len() as i32,
            nodes: Some(nodes),
            page_info,
        }))
    }
}

/// `IssueConnection`.
#[derive(SimpleObject)]
pub(crate) struct IssueConnection {
    count: i32,
    nodes: Option<Vec<Option<Issue>>>,
    page_info: PageInfo,
}

/// `MergeRequestConnection`.
#[derive(SimpleObject)]
pub(crate) struct MergeRequestConnection {
    count: i32,
    nodes: Option<Vec<Option<MergeRequest>>>,
    page_info: PageInfo,
}

/// `UserCore` (an issue's or a note's author).
#[derive(SimpleObject)]
pub(crate) struct UserCore {
    id: ID,
    username: String,
}

impl UserCore {
    fn named(username: &str) -> Self {
        // The simulator knows users by name only; a stable id per name will do.
        let id = username
            .bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31) + u64::from(b))
            % 1_000_000;
        UserCore {
            id: gid("User", id),
            username: username.to_owned(),
        }
    }
}

/// `MergeRequestAuthor`.
#[derive(SimpleObject)]
pub(crate) struct MergeRequestAuthor {
    username: String,
}

/// An issue with its user-note count.
pub(crate) struct Issue(model::Issue, i32);

#[Object]
impl Issue {
    async fn id(&self) -> ID {
        gid("Issue", self.0.id)
    }
    async fn iid(&self) -> ID {
        ID(self.0.iid.to_string())
    }
    async fn title(&self) -> &str {
        &self.0.title
    }
    async fn description(&self) -> Option<&str> {
        self.0.description.as_deref()
    }
    async fn state(&self) -> async_graphql::Result<IssueState> {
        enum_value(&self.0.state).ok_or_else(|| "unknown issue state".into())
    }
    async fn created_at(&self) -> Time {
        Time(self.0.created_at)
    }
    async fn updated_at(&self) -> Time {
        Time(self.0.updated_at)
    }
    async fn closed_at(&self) -> Option<Time> {
        self.0.closed_at.map(Time)
    }
    async fn discussion_locked(&self) -> bool {
        self.0.discussion_locked
    }
    async fn user_notes_count(&self) -> i32 {
        self.1
    }
    async fn author(&self) -> UserCore {
        UserCore::named(&self.0.author)
    }
}

/// A merge request with its user-note count.
pub(crate) struct MergeRequest(model::MergeRequest, i32);

/// `UserMergeRequestInteraction`.
#[derive(SimpleObject)]
pub(crate) struct UserMergeRequestInteraction {
    review_state: Option<MergeRequestReviewState>,
}

/// `MergeRequestReviewer`.
#[derive(SimpleObject)]
pub(crate) struct MergeRequestReviewer {
    username: String,
    merge_request_interaction: Option<UserMergeRequestInteraction>,
}

/// `MergeRequestReviewerConnection`.
#[derive(SimpleObject)]
pub(crate) struct MergeRequestReviewerConnection {
    nodes: Option<Vec<Option<MergeRequestReviewer>>>,
    page_info: PageInfo,
}

/// `UserCoreConnection` (a merge request's approvers, all on one page).
#[derive(SimpleObject)]
pub(crate) struct UserCoreConnection {
    nodes: Option<Vec<Option<UserCore>>>,
    page_info: PageInfo,
}

/// `PipelineStatusEnum`.
#[derive(Enum, Copy, Clone, Eq, PartialEq)]
pub(crate) enum PipelineStatusEnum {
    Canceled,
    Created,
    Failed,
    Manual,
    Pending,
    Preparing,
    Running,
    Scheduled,
    Skipped,
    Success,
    WaitingForResource,
}

/// `Pipeline`: a merge request's head pipeline.
#[derive(SimpleObject)]
pub(crate) struct Pipeline {
    status: PipelineStatusEnum,
    sha: Option<String>,
}

#[Object]
impl MergeRequest {
    async fn id(&self) -> ID {
        gid("MergeRequest", self.0.id)
    }
    async fn iid(&self) -> String {
        self.0.iid.to_string()
    }
    async fn title(&self) -> &str {
        &self.0.title
    }
    async fn description(&self) -> Option<&str> {
        self.0.description.as_deref()
    }
    async fn state(&self) -> async_graphql::Result<MergeRequestState> {
        enum_value(&self.0.state).ok_or_else(|| "unknown merge request state".into())
    }
    async fn draft(&self) -> bool {
        self.0.draft
    }
    async fn created_at(&self) -> Time {
        Time(self.0.created_at)
    }
    async fn updated_at(&self) -> Time {
        Time(self.0.updated_at)
    }
    async fn merged_at(&self) -> Option<Time> {
        self.0.merged_at.map(Time)
    }
    async fn discussion_locked(&self) -> bool {
        self.0.discussion_locked
    }
    async fn user_notes_count(&self) -> Option<i32> {
        Some(self.1)
    }
    async fn source_branch(&self) -> &str {
        &self.0.source_branch
    }
    async fn target_branch(&self) -> &str {
        &self.0.target_branch
    }
    async fn diff_head_sha(&self) -> Option<&str> {
        self.0.diff_head_sha.as_deref()
    }
    async fn detailed_merge_status(&self) -> Option<DetailedMergeStatus> {
        enum_value(self.0.detailed_merge_status.as_deref()?)
    }
    async fn approved(&self) -> bool {
        self.0.approved
    }
    async fn author(&self) -> Option<MergeRequestAuthor> {
        Some(MergeRequestAuthor {
            username: self.0.author.clone(),
        })
    }
    async fn discussions(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> async_graphql::Result<DiscussionConnection> {
        if before.is_some() || last.is_some() {
            return Err("the simulator pages discussions forward only".into());
        }
        let m = model(ctx);
        let all: Vec<Discussion> = m
            .discussions_of(NoteOn::MergeRequest(self.0.project, self.0.iid))
            .into_iter()
            .map(|(id, notes)| Discussion {
                resolved: m.resolved_discussions.contains(&id),
                id,
                notes: notes.into_iter().cloned().collect(),
            })
            .collect();
        let (nodes, page_info) = page(&all, first, after)?;
        Ok(DiscussionConnection {
            nodes: Some(nodes.into_iter().map(Some).collect()),
            page_info,
        })
    }
    async fn reviewers(
        &self,
        after: Option<String>,
        first: Option<i32>,
    ) -> async_graphql::Result<Option<MergeRequestReviewerConnection>> {
        let (reviewers, page_info) = page(&self.0.reviewers, first, after)?;
        Ok(Some(MergeRequestReviewerConnection {
            nodes: Some(
                reviewers
                    .into_iter()
                    .map(|(username, state)| {
                        Some(MergeRequestReviewer {
                            username,
                            merge_request_interaction: Some(UserMergeRequestInteraction {
                                review_state: state.as_deref().and_then(enum_value),
                            }),
                        })
                    })
                    .collect(),
            ),
            page_info,
        }))
    }
    async fn mergeable(&self) -> bool {
        self.0.mergeable
    }
    async fn merge_commit_sha(&self) -> Option<&str> {
        self.0.merge_commit_sha.as_deref()
    }
    async fn merge_user(&self) -> Option<UserCore> {
        self.0.merge_user.as_deref().map(UserCore::named)
    }
    async fn approved_by(&self) -> Option<UserCoreConnection> {
        Some(UserCoreConnection {
            nodes: Some(
                self.0
                    .approved_by
                    .iter()
                    .map(|(u, _)| Some(UserCore::named(u)))
                    .collect(),
            ),
            page_info: PageInfo {
                end_cursor: None,
                has_next_page: false,
            },
        })
    }
    /// The latest pipeline of the merge request (a merge request pipeline, or one on its head
    /// for its source branch); `null` when it has none.
    async fn head_pipeline(&self, ctx: &Context<'_>) -> Option<Pipeline> {
        let m = model(ctx);
        let mr = &self.0;
        m.pipelines
            .values()
            .filter(|p| p.project == mr.project)
            // GitLab answers only a pipeline of the current head: after a push, none until
            // one runs for the new head.
            .filter(|p| Some(&p.sha) == mr.diff_head_sha.as_ref())
            .filter(|p| {
                p.merge_request == Some(mr.iid)
                    || (p.merge_request.is_none() && p.git_ref == mr.source_branch)
            })
            .max_by_key(|p| p.id)
            .map(|p| Pipeline {
                status: enum_value(&p.status.to_ascii_uppercase())
                    .unwrap_or(PipelineStatusEnum::Running),
                sha: Some(p.sha.clone()),
            })
    }
}

/// `NoteID`: `gid://gitlab/<Note|DiffNote|DiscussionNote>/<id>`.
#[derive(Clone, Debug)]
pub(crate) struct NoteId(String);

#[Scalar(name = "NoteID")]
impl ScalarType for NoteId {
    fn parse(value: Value) -> InputValueResult<Self> {
        match value {
            Value::String(s) => Ok(NoteId(s)),
            other => Err(InputValueError::expected_type(other)),
        }
    }
    fn to_value(&self) -> Value {
        Value::String(self.0.clone())
    }
}

/// `DiscussionID`: `gid://gitlab/Discussion/<40 hex>`.
#[derive(Clone, Debug)]
pub(crate) struct DiscussionId(String);

#[Scalar(name = "DiscussionID")]
impl ScalarType for DiscussionId {
    fn parse(value: Value) -> InputValueResult<Self> {
        match value {
            Value::String(s) => Ok(DiscussionId(s)),
            other => Err(InputValueError::expected_type(other)),
        }
    }
    fn to_value(&self) -> Value {
        Value::String(self.0.clone())
    }
}

/// `DiscussionConnection` (no count, as GitLab's).
#[derive(SimpleObject)]
pub(crate) struct DiscussionConnection {
    nodes: Option<Vec<Option<Discussion>>>,
    page_info: PageInfo,
}

/// `NoteConnection`.
#[derive(SimpleObject)]
pub(crate) struct NoteConnection {
    nodes: Option<Vec<Option<Note>>>,
    page_info: PageInfo,
}

/// A discussion (thread) with its notes.
#[derive(Clone)]
pub(crate) struct Discussion {
    id: String,
    resolved: bool,
    notes: Vec<model::Note>,
}

impl Discussion {
    fn is_resolved(&self) -> bool {
        self.notes.iter().any(model::Note::resolvable) && self.resolved
    }
}

#[Object]
impl Discussion {
    async fn id(&self) -> DiscussionId {
        DiscussionId(format!("gid://gitlab/Discussion/{}", self.id))
    }
    async fn created_at(&self) -> Time {
        Time(self.notes.first().map_or(model::EPOCH, |n| n.created_at))
    }
    async fn resolvable(&self) -> bool {
        self.notes.iter().any(model::Note::resolvable)
    }
    async fn resolved(&self) -> bool {
        self.is_resolved()
    }
    async fn resolved_at(&self) -> Option<Time> {
        self.is_resolved().then(|| {
            Time(
                self.notes
                    .iter()
                    .map(|n| n.updated_at)
                    .max()
                    .unwrap_or(model::EPOCH),
            )
        })
    }
    async fn resolved_by(&self) -> Option<UserCore> {
        let first = self.notes.first().filter(|_| self.is_resolved())?;
        Some(UserCore::named(&first.author))
    }
    async fn notes(
        &self,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> async_graphql::Result<NoteConnection> {
        if before.is_some() || last.is_some() {
            return Err("the simulator pages notes forward only".into());
        }
        let resolved = self.is_resolved();
        let notes: Vec<Note> = self
            .notes
            .iter()
            .map(|n| Note(n.clone(), resolved && n.resolvable()))
            .collect();
        let (nodes, page_info) = page(&notes, first, after)?;
        Ok(NoteConnection {
            nodes: Some(nodes.into_iter().map(Some).collect()),
            page_info,
        })
    }
}

/// A note, with whether its thread is resolved.
#[derive(Clone)]
pub(crate) struct Note(model::Note, bool);

/// `DiffRefs`.
#[derive(SimpleObject)]
pub(crate) struct DiffRefs {
    base_sha: Option<String>,
    head_sha: String,
    start_sha: String,
}

/// `DiffPosition`.
#[derive(SimpleObject)]
pub(crate) struct DiffPosition {
    diff_refs: DiffRefs,
    file_path: String,
    new_line: Option<i32>,
    new_path: Option<String>,
    old_line: Option<i32>,
    old_path: Option<String>,
}

#[Object]
impl Note {
    async fn id(&self) -> NoteId {
        let kind = self.0.kind.as_deref().unwrap_or("Note");
        NoteId(format!("gid://gitlab/{kind}/{}", self.0.id))
    }
    async fn author(&self) -> UserCore {
        UserCore::named(&self.0.author)
    }
    async fn body(&self) -> &str {
        &self.0.body
    }
    async fn system(&self) -> bool {
        self.0.system
    }
    async fn created_at(&self) -> Time {
        Time(self.0.created_at)
    }
    async fn updated_at(&self) -> Time {
        Time(self.0.updated_at)
    }
    async fn resolvable(&self) -> bool {
        self.0.resolvable()
    }
    async fn resolved(&self) -> bool {
        self.1
    }
    async fn position(&self) -> Option<DiffPosition> {
        let p = self.0.position.as_ref()?;
        Some(DiffPosition {
            diff_refs: DiffRefs {
                base_sha: Some(p.base_sha.clone()),
                head_sha: p.head_sha.clone(),
                start_sha: p.start_sha.clone(),
            },
            file_path: p.new_path.clone(),
            new_line: p.new_line,
            new_path: Some(p.new_path.clone()),
            old_line: p.old_line,
            old_path: Some(p.old_path.clone()),
        })
    }
}

/// The query root.
pub(crate) struct Query;

#[Object]
impl Query {
    async fn group(&self, ctx: &Context<'_>, full_path: ID) -> Option<Group> {
        let m = model(ctx);
        let id = m.group_by_path(&full_path)?;
        group(&m, id)
    }
    async fn project(&self, ctx: &Context<'_>, full_path: ID) -> Option<Project> {
        let m = model(ctx);
        let id = m.project_by_path(&full_path)?;
        project(&m, id)
    }
    async fn projects(
        &self,
        ctx: &Context<'_>,
        ids: Option<Vec<ID>>,
    ) -> async_graphql::Result<Option<ProjectConnection>> {
        let m = model(ctx);
        let wanted: Vec<u64> = ids
            .unwrap_or_default()
            .iter()
            .map(|id| {
                id.strip_prefix("gid://gitlab/Project/")
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| format!("{} is not a valid Project global id", id.0))
            })
            .collect::<Result<_, _>>()?;
        let found: Vec<u64> = wanted
            .into_iter()
            .filter(|id| m.projects.contains_key(id))
            .collect();
        Ok(Some(ProjectConnection {
            count: found.len() as i32,
            nodes: Some(found.into_iter().map(|id| project(&m, id)).collect()),
            page_info: PageInfo {
                end_cursor: None,
                has_next_page: false,
            },
        }))
    }
}

/// Whether `iid` is among `iids` (GitLab's filter of a listing by number); no filter takes all.
fn numbered(iids: Option<&[String]>, iid: u64) -> bool {
    iids.is_none_or(|iids| iids.iter().any(|n| n.parse() == Ok(iid)))
}
