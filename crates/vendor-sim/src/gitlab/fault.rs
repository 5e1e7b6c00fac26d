//! How a GitLab call misbehaves. Which calls a fault fires on is the GitHub simulator's
//! [`super::Fault`] and [`super::Calls`], with these kinds.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value as Json;

use super::Model;

/// Operation names calls are counted under: the GraphQL operation name, or one of these for
/// REST.
pub mod ops {
    /// GraphQL `GroupSubgroups`.
    pub const GROUP_SUBGROUPS: &str = "GroupSubgroups";
    /// GraphQL `GroupProjects`.
    pub const GROUP_PROJECTS: &str = "GroupProjects";
    /// GraphQL `GroupProjectCount`.
    pub const GROUP_PROJECT_COUNT: &str = "GroupProjectCount";
    /// GraphQL `ProjectById`.
    pub const PROJECT_BY_ID: &str = "ProjectById";
    /// GraphQL `ProjectIssues`.
    pub const PROJECT_ISSUES: &str = "ProjectIssues";
    /// GraphQL `ProjectMergeRequests`.
    pub const PROJECT_MERGE_REQUESTS: &str = "ProjectMergeRequests";
    /// GraphQL `MergeRequestDiscussions`.
    pub const MERGE_REQUEST_DISCUSSIONS: &str = "MergeRequestDiscussions";
    /// GraphQL `MergeRequestReadiness`.
    pub const MERGE_REQUEST_READINESS: &str = "MergeRequestReadiness";
    /// GraphQL `MergeRequestReviewers`.
    pub const MERGE_REQUEST_REVIEWERS: &str = "MergeRequestReviewers";
    /// `GET /projects/{id}/merge_requests/{iid}/approvals`
    pub const GET_MERGE_REQUEST_APPROVALS: &str = "merge_requests/approvals";
    /// `GET /projects/{id}/(issues|merge_requests)/{iid}/notes`
    pub const LIST_NOTES: &str = "notes/list";
    /// `GET /projects/{id}/(issues|merge_requests)/{iid}/notes/{note_id}`
    pub const GET_NOTE: &str = "notes/get";
    /// `GET /projects/{id}/merge_requests/{iid}`
    pub const GET_MERGE_REQUEST: &str = "merge_requests/get";
    /// `GET /projects/{id}`
    pub const GET_PROJECT: &str = "projects/get";
    /// `GET /groups/{id}/hooks`
    pub const LIST_GROUP_HOOKS: &str = "group_hooks/list";
    /// `POST /groups/{id}/hooks`
    pub const CREATE_GROUP_HOOK: &str = "group_hooks/create";
    /// `DELETE /groups/{id}/hooks/{hook_id}`
    pub const DELETE_GROUP_HOOK: &str = "group_hooks/delete";
    /// `GET /groups/{id}/members`
    pub const LIST_GROUP_MEMBERS: &str = "group_members/list";
    /// `GET /groups/{id}/members/{user_id}`
    pub const GET_GROUP_MEMBER: &str = "group_members/get";
}

/// How a GitLab call misbehaves.
#[derive(Clone, Debug)]
pub enum GitlabFault {
    /// The page holds only its first `keep` items while its paging (GraphQL `pageInfo`, REST
    /// `X-Next-Page`) still describes the full page: the rest are never listed.
    ShortPage {
        /// Items left on the page.
        keep: usize,
    },
    /// GraphQL `pageInfo.hasNextPage` says this instead of the truth.
    HasNextPage(bool),
    /// GraphQL `count` or REST `X-Total` is off by this much (saturating at 0).
    TotalOffBy(i64),
    /// These REST headers are left out (e.g. `x-total`, `x-next-page`).
    OmitHeaders(Vec<&'static str>),
    /// GraphQL: the value at this response path (`project.mergeRequests.nodes.1.approved`) is
    /// null, with an error at that path, as GitLab answers an unresolved field.
    FieldError {
        /// Response path, field names and list indices.
        path: String,
        /// The error's message.
        message: String,
    },
    /// GraphQL: the value at this response path is replaced (e.g. an enum value newer than
    /// the schema).
    ReplaceValue {
        /// Response path.
        path: String,
        /// The new value.
        value: Json,
    },
    /// 429 with `Retry-After` (seconds), as GitLab's throttles answer.
    TooManyRequests {
        /// `Retry-After` seconds.
        retry_after: u64,
    },
    /// REST notes listing: this note is left out of the listing (and of `X-Total`, so the
    /// headers agree) while a direct read of it still answers, as when offset pages shift.
    HideNote(u64),
    /// The note is deleted as this call arrives: on a later page of a listing, a deletion
    /// mid-listing (`X-Total` changes and offset pages shift).
    DeleteNote(u64),
    /// An HTTP error status with GitLab's plain error body (e.g. 500, 502).
    Status(u16),
    /// The answer is held back this long (combines with any other kind).
    Delay(Duration),
    /// The model changes just before this call is answered: rows added or deleted mid-listing
    /// (which also shifts offsets and changes the count under a listing).
    Mutate(Mutation),
    /// The call does its work, then its answer is held back this long: a client that times out
    /// meanwhile never learns what happened (a hook create that created).
    AnswerLate(Duration),
}

/// A change to the model a [`GitlabFault::Mutate`] makes.
#[derive(Clone)]
pub struct Mutation(pub Arc<dyn Fn(&mut Model) + Send + Sync>);

impl fmt::Debug for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Mutation(..)")
    }
}

impl GitlabFault {
    /// A [`GitlabFault::Mutate`] from a closure.
    pub fn mutate(f: impl Fn(&mut Model) + Send + Sync + 'static) -> Self {
        GitlabFault::Mutate(Mutation(Arc::new(f)))
    }
}
