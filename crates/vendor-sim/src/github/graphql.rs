//! The GraphQL schema the simulator serves: a subset of GitHub's, with the same type, field,
//! argument and enum names (checked against the vendor schema by a test).

use std::ops::Bound;
use std::sync::{Arc, Mutex};

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextResolve, ResolveInfo,
};
use async_graphql::{
    Context, EmptyMutation, EmptySubscription, Enum, ErrorExtensions, ID, InputObject,
    InputValueError, InputValueResult, Interface, Object, PathSegment, Scalar, ScalarType, Schema,
    ServerResult, SimpleObject, Union, Value,
};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use time::OffsetDateTime;

use super::checks as sim;
use super::conversation as conv;
use super::model::{self, ItemKey, Items, Model, OwnerKind, RepoId, Viewer};

/// The executable schema.
pub(crate) type GithubSchema = Schema<Query, EmptyMutation, EmptySubscription>;

/// Builds the schema; `shared` is the model the resolvers read.
pub(crate) fn schema(model: Arc<Mutex<Model>>) -> GithubSchema {
    Schema::build(Query, EmptyMutation, EmptySubscription)
        .data(model)
        .extension(FieldFaults)
        .finish()
}

/// The SDL of what the simulator serves (compared with GitHub's schema in tests).
pub fn sdl() -> String {
    Schema::build(Query, EmptyMutation, EmptySubscription)
        .finish()
        .sdl()
}

/// Per-call listing faults, put into the request by the server.
#[derive(Clone, Debug, Default)]
pub(crate) struct PageFaults {
    pub(crate) truncate: Option<usize>,
    pub(crate) has_next_page: Option<bool>,
    pub(crate) total_off_by: Option<i64>,
    /// `(path, type, message)`
    pub(crate) field_errors: Vec<(Vec<String>, String, String)>,
}

/// The budget after this call, for the `rateLimit` field.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RateView {
    pub(crate) cost: u32,
    pub(crate) node_count: u32,
    pub(crate) budget: model::RateLimitBudget,
}

/// A GraphQL error carrying GitHub's `type` (moved to the top level by the server).
pub(crate) fn typed_error(error_type: &str, message: impl Into<String>) -> async_graphql::Error {
    let error_type = error_type.to_owned();
    async_graphql::Error::new(message).extend_with(move |_, e| e.set("type", error_type.clone()))
}

/// Fails the fields a [`PageFaults::field_errors`] entry names.
struct FieldFaults;

impl ExtensionFactory for FieldFaults {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(FieldFaults)
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for FieldFaults {
    async fn resolve(
        &self,
        ctx: &ExtensionContext<'_>,
        info: ResolveInfo<'_>,
        next: NextResolve<'_>,
    ) -> ServerResult<Option<Value>> {
        if let Some(faults) = ctx.data_opt::<PageFaults>()
            && !faults.field_errors.is_empty()
        {
            let path = info.path_node.to_string_vec();
            if let Some((_, error_type, message)) =
                faults.field_errors.iter().find(|(p, _, _)| *p == path)
            {
                let mut err =
                    typed_error(error_type, message.clone()).into_server_error(info.field.name.pos);
                err.path = path
                    .iter()
                    .map(|s| match s.parse::<usize>() {
                        Ok(i) => PathSegment::Index(i),
                        Err(_) => PathSegment::Field(s.clone()),
                    })
                    .collect();
                return Err(err);
            }
        }
        next.run(ctx, info).await
    }
}

/// `DateTime`: RFC 3339, whole seconds, UTC.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DateTime(OffsetDateTime);

#[Scalar(name = "DateTime")]
impl ScalarType for DateTime {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(s) => {
                OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                    .map(DateTime)
                    .map_err(|e| InputValueError::custom(e.to_string()))
            }
            _ => Err(InputValueError::expected_type(value)),
        }
    }
    fn to_value(&self) -> Value {
        Value::String(model::format_time(self.0))
    }
}

/// `GitObjectID`: 40 hex digits.
#[derive(Clone, Debug)]
pub(crate) struct GitObjectId(String);

#[Scalar(name = "GitObjectID")]
impl ScalarType for GitObjectId {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(s) => Ok(GitObjectId(s.clone())),
            _ => Err(InputValueError::expected_type(value)),
        }
    }
    fn to_value(&self) -> Value {
        Value::String(self.0.clone())
    }
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "IssueState")]
enum IssueState {
    Closed,
    Open,
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "IssueStateReason")]
enum IssueStateReason {
    Completed,
    Duplicate,
    NotPlanned,
    Reopened,
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "PullRequestState")]
enum PullRequestState {
    Closed,
    Merged,
    Open,
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "LockReason")]
enum LockReason {
    OffTopic,
    Resolved,
    Spam,
    TooHeated,
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "IssueOrderField")]
enum IssueOrderField {
    Comments,
    CreatedAt,
    UpdatedAt,
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "OrderDirection")]
enum OrderDirection {
    Asc,
    Desc,
}

/// `IssueOrder` (GitHub's `pullRequests` takes it too).
#[derive(InputObject, Clone, Copy)]
#[graphql(name = "IssueOrder")]
struct IssueOrder {
    direction: OrderDirection,
    field: IssueOrderField,
}

fn lock_reason(r: Option<model::LockReason>) -> Option<LockReason> {
    r.map(|r| match r {
        model::LockReason::OffTopic => LockReason::OffTopic,
        model::LockReason::TooHeated => LockReason::TooHeated,
        model::LockReason::Resolved => LockReason::Resolved,
        model::LockReason::Spam => LockReason::Spam,
    })
}

/// A global id for an account, derived from its login.
fn account_id(prefix: &str, login: &str) -> ID {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(login.to_ascii_lowercase().as_bytes());
    let n = u64::from_be_bytes(digest[..8].try_into().unwrap_or_default()) >> 16;
    ID(model::encode_node_id(prefix, n))
}

/// `User`
#[derive(Clone)]
struct User {
    login: String,
}

#[Object(name = "User")]
impl User {
    async fn id(&self) -> ID {
        account_id("U", &self.login)
    }
    async fn login(&self) -> &str {
        &self.login
    }
}

/// `Organization`
#[derive(Clone)]
struct Organization {
    login: String,
}

#[Object(name = "Organization")]
impl Organization {
    async fn id(&self) -> ID {
        account_id("O", &self.login)
    }
    async fn login(&self) -> &str {
        &self.login
    }
}

#[derive(Interface)]
#[graphql(name = "Actor", field(name = "login", ty = "&str"))]
enum Actor {
    User(User),
    Organization(Organization),
}

#[derive(Interface)]
#[graphql(
    name = "RepositoryOwner",
    field(name = "id", ty = "ID"),
    field(name = "login", ty = "&str")
)]
enum RepositoryOwner {
    User(User),
    Organization(Organization),
}

#[derive(Interface)]
#[graphql(name = "Node", field(name = "id", ty = "ID"))]
enum Node {
    Repository(Repository),
    Issue(Issue),
    PullRequest(PullRequest),
    User(User),
    Organization(Organization),
}

/// `PageInfo`
#[derive(SimpleObject)]
#[graphql(name = "PageInfo")]
struct PageInfo {
    end_cursor: Option<String>,
    has_next_page: bool,
    has_previous_page: bool,
    start_cursor: Option<String>,
}

/// `RateLimit`
#[derive(SimpleObject)]
#[graphql(name = "RateLimit")]
struct RateLimit {
    cost: i32,
    limit: i32,
    node_count: i32,
    remaining: i32,
    reset_at: DateTime,
    used: i32,
}

/// `IssueCommentConnection`: the item's count, and the first page of what the model holds.
#[derive(SimpleObject)]
#[graphql(name = "IssueCommentConnection")]
struct IssueCommentConnection {
    nodes: Option<Vec<Option<IssueCommentObject>>>,
    page_info: PageInfo,
    total_count: i32,
}

#[derive(SimpleObject)]
#[graphql(name = "PullRequestReviewConnection")]
struct PullRequestReviewConnection {
    nodes: Option<Vec<Option<PullRequestReview>>>,
    page_info: PageInfo,
    total_count: i32,
}

fn count(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn database_id(n: u64) -> Option<i32> {
    i32::try_from(n).ok()
}

/// `Issue`, with its nested lists.
#[derive(Clone)]
struct Issue(model::Issue, Arc<conv::Conversation>);

#[Object(name = "Issue")]
impl Issue {
    async fn id(&self) -> ID {
        ID(self.0.node_id.clone())
    }
    async fn database_id(&self) -> Option<i32> {
        database_id(self.0.database_id)
    }
    async fn number(&self) -> i32 {
        i32::try_from(self.0.number).unwrap_or(i32::MAX)
    }
    async fn title(&self) -> &str {
        &self.0.title
    }
    async fn body(&self) -> &str {
        &self.0.body
    }
    async fn state(&self) -> IssueState {
        match self.0.state {
            model::IssueState::Open => IssueState::Open,
            model::IssueState::Closed => IssueState::Closed,
        }
    }
    async fn state_reason(
        &self,
        #[graphql(default_with = "Some(false)")] enable_duplicate: Option<bool>,
    ) -> Option<IssueStateReason> {
        self.0.state_reason.map(|r| match r {
            model::IssueStateReason::Completed => IssueStateReason::Completed,
            model::IssueStateReason::NotPlanned => IssueStateReason::NotPlanned,
            model::IssueStateReason::Reopened => IssueStateReason::Reopened,
            // GitHub reports duplicates as NOT_PLANNED unless asked.
            model::IssueStateReason::Duplicate if enable_duplicate == Some(true) => {
                IssueStateReason::Duplicate
            }
            model::IssueStateReason::Duplicate => IssueStateReason::NotPlanned,
        })
    }
    async fn created_at(&self) -> DateTime {
        DateTime(self.0.created_at)
    }
    async fn updated_at(&self) -> DateTime {
        DateTime(self.0.updated_at)
    }
    async fn closed_at(&self) -> Option<DateTime> {
        self.0.closed_at.map(DateTime)
    }
    async fn locked(&self) -> bool {
        self.0.locked
    }
    async fn active_lock_reason(&self) -> Option<LockReason> {
        lock_reason(self.0.active_lock_reason)
    }
    async fn author(&self) -> Option<Actor> {
        self.0
            .author
            .clone()
            .map(|login| Actor::User(User { login }))
    }
    async fn comments(&self, first: Option<i32>) -> async_graphql::Result<IssueCommentConnection> {
        comment_connection(&self.1.comments, self.0.comments, first)
    }
}

/// `PullRequest`, with its nested lists.
#[derive(Clone)]
struct PullRequest(model::PullRequest, Arc<conv::Conversation>);

#[Object(name = "PullRequest")]
impl PullRequest {
    async fn id(&self) -> ID {
        ID(self.0.node_id.clone())
    }
    #[graphql(
        deprecation = "`databaseId` will be removed because it does not support 64-bit signed integer identifiers. Use `fullDatabaseId` instead. Removal on 2024-07-01 UTC."
    )]
    async fn database_id(&self) -> Option<i32> {
        database_id(self.0.database_id)
    }
    async fn number(&self) -> i32 {
        i32::try_from(self.0.number).unwrap_or(i32::MAX)
    }
    async fn title(&self) -> &str {
        &self.0.title
    }
    async fn body(&self) -> &str {
        &self.0.body
    }
    async fn state(&self) -> PullRequestState {
        match self.0.state {
            model::PullRequestState::Open => PullRequestState::Open,
            model::PullRequestState::Closed => PullRequestState::Closed,
            model::PullRequestState::Merged => PullRequestState::Merged,
        }
    }
    async fn is_draft(&self) -> bool {
        self.0.is_draft
    }
    async fn created_at(&self) -> DateTime {
        DateTime(self.0.created_at)
    }
    async fn updated_at(&self) -> DateTime {
        DateTime(self.0.updated_at)
    }
    async fn closed_at(&self) -> Option<DateTime> {
        self.0.closed_at.map(DateTime)
    }
    async fn merged_at(&self) -> Option<DateTime> {
        self.0.merged_at.map(DateTime)
    }
    async fn locked(&self) -> bool {
        self.0.locked
    }
    async fn active_lock_reason(&self) -> Option<LockReason> {
        lock_reason(self.0.active_lock_reason)
    }
    async fn head_ref_name(&self) -> &str {
        &self.0.head_ref_name
    }
    async fn head_ref_oid(&self) -> GitObjectId {
        GitObjectId(self.0.head_ref_oid.clone())
    }
    async fn base_ref_name(&self) -> &str {
        &self.0.base_ref_name
    }
    async fn author(&self) -> Option<Actor> {
        self.0
            .author
            .clone()
            .map(|login| Actor::User(User { login }))
    }
    async fn comments(&self, first: Option<i32>) -> async_graphql::Result<IssueCommentConnection> {
        comment_connection(&self.1.comments, self.0.comments, first)
    }
    async fn reviews(
        &self,
        first: Option<i32>,
    ) -> async_graphql::Result<Option<PullRequestReviewConnection>> {
        let first = bounded_first("reviews", first)?;
        let reviews = &self.1.reviews;
        Ok(Some(PullRequestReviewConnection {
            // The item's count is GitHub's; the list holds what the model knows of it.
            total_count: count(self.0.reviews),
            page_info: nested_page_info(reviews.len(), first),
            nodes: Some(
                reviews
                    .iter()
                    .take(first)
                    .map(|r| Some(PullRequestReview(r.clone())))
                    .collect(),
            ),
        }))
    }
    async fn review_threads(
        &self,
        first: Option<i32>,
    ) -> async_graphql::Result<PullRequestReviewThreadConnection> {
        let first = bounded_first("reviewThreads", first)?;
        let threads = &self.1.threads;
        Ok(PullRequestReviewThreadConnection {
            total_count: count(u32::try_from(threads.len()).unwrap_or(u32::MAX)),
            page_info: nested_page_info(threads.len(), first),
            nodes: Some(
                threads
                    .iter()
                    .take(first)
                    .map(|t| Some(PullRequestReviewThread(t.clone())))
                    .collect(),
            ),
        })
    }
    async fn review_requests(
        &self,
        first: Option<i32>,
    ) -> async_graphql::Result<Option<ReviewRequestConnection>> {
        let first = bounded_first("reviewRequests", first)?;
        let requests = &self.1.review_requests;
        Ok(Some(ReviewRequestConnection {
            total_count: count(u32::try_from(requests.len()).unwrap_or(u32::MAX)),
            nodes: Some(
                requests
                    .iter()
                    .take(first)
                    .map(|r| Some(ReviewRequest(r.clone())))
                    .collect(),
            ),
        }))
    }
}

/// `pageInfo` of the first page of a nested list of `len` entries.
fn nested_page_info(len: usize, first: usize) -> PageInfo {
    let shown = len.min(first);
    PageInfo {
        end_cursor: (shown > 0).then(|| STANDARD.encode(format!("cursor:v2:nested:{shown}"))),
        has_next_page: len > first,
        has_previous_page: false,
        start_cursor: (shown > 0).then(|| STANDARD.encode("cursor:v2:nested:1")),
    }
}

fn comment_connection(
    comments: &[conv::IssueComment],
    total: u32,
    first: Option<i32>,
) -> async_graphql::Result<IssueCommentConnection> {
    let first = bounded_first("comments", first)?;
    Ok(IssueCommentConnection {
        // The item's count is GitHub's; the list holds what the model knows of it.
        total_count: count(total),
        page_info: nested_page_info(comments.len(), first),
        nodes: Some(
            comments
                .iter()
                .take(first)
                .map(|c| Some(IssueCommentObject(c.clone())))
                .collect(),
        ),
    })
}

fn actor(login: Option<&String>) -> Option<Actor> {
    login.map(|login| {
        Actor::User(User {
            login: login.clone(),
        })
    })
}

/// A commit by oid, without what the model knows of its checks (a review's or comment's).
fn bare_commit(oid: Option<&String>) -> Option<Commit> {
    oid.map(|oid| Commit {
        oid: oid.clone(),
        checks: sim::CommitChecks {
            suites: Vec::new(),
            statuses: Vec::new(),
        },
    })
}

/// `IssueComment`
#[derive(Clone)]
struct IssueCommentObject(conv::IssueComment);

#[Object(name = "IssueComment")]
impl IssueCommentObject {
    async fn id(&self) -> ID {
        ID(self.0.node_id.clone())
    }
    async fn database_id(&self) -> Option<i32> {
        database_id(self.0.database_id)
    }
    async fn body(&self) -> &str {
        &self.0.body
    }
    async fn created_at(&self) -> DateTime {
        DateTime(self.0.created_at)
    }
    async fn updated_at(&self) -> DateTime {
        DateTime(self.0.updated_at)
    }
    async fn author(&self) -> Option<Actor> {
        actor(self.0.author.as_ref())
    }
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "PullRequestReviewState")]
enum PullRequestReviewState {
    Approved,
    ChangesRequested,
    Commented,
    Dismissed,
    Pending,
}

/// `PullRequestReview`
#[derive(Clone)]
struct PullRequestReview(conv::Review);

#[Object(name = "PullRequestReview")]
impl PullRequestReview {
    async fn id(&self) -> ID {
        ID(self.0.node_id.clone())
    }
    #[graphql(
        deprecation = "`databaseId` will be removed because it does not support 64-bit signed integer identifiers. Use `fullDatabaseId` instead. Removal on 2024-07-01 UTC."
    )]
    async fn database_id(&self) -> Option<i32> {
        database_id(self.0.database_id)
    }
    async fn body(&self) -> &str {
        &self.0.body
    }
    async fn state(&self) -> PullRequestReviewState {
        match self.0.state {
            conv::ReviewState::Approved => PullRequestReviewState::Approved,
            conv::ReviewState::ChangesRequested => PullRequestReviewState::ChangesRequested,
            conv::ReviewState::Commented => PullRequestReviewState::Commented,
            conv::ReviewState::Dismissed => PullRequestReviewState::Dismissed,
            conv::ReviewState::Pending => PullRequestReviewState::Pending,
        }
    }
    async fn submitted_at(&self) -> Option<DateTime> {
        self.0.submitted_at.map(DateTime)
    }
    async fn updated_at(&self) -> DateTime {
        DateTime(self.0.updated_at)
    }
    async fn author(&self) -> Option<Actor> {
        actor(self.0.author.as_ref())
    }
    async fn commit(&self) -> Option<Commit> {
        bare_commit(self.0.commit_oid.as_ref())
    }
}

#[Object(name = "PullRequestReviewComment")]
impl PullRequestReviewComment {
    async fn id(&self) -> ID {
        ID(self.0.node_id.clone())
    }
    #[graphql(
        deprecation = "`databaseId` will be removed because it does not support 64-bit signed integer identifiers. Use `fullDatabaseId` instead. Removal on 2024-07-01 UTC."
    )]
    async fn database_id(&self) -> Option<i32> {
        database_id(self.0.database_id)
    }
    async fn body(&self) -> &str {
        &self.0.body
    }
    async fn created_at(&self) -> DateTime {
        DateTime(self.0.created_at)
    }
    async fn updated_at(&self) -> DateTime {
        DateTime(self.0.updated_at)
    }
    async fn path(&self) -> &str {
        &self.0.path
    }
    async fn line(&self) -> Option<i32> {
        self.0.line
    }
    async fn author(&self) -> Option<Actor> {
        actor(self.0.author.as_ref())
    }
    async fn pull_request_review(&self) -> Option<PullRequestReview> {
        // Only its id is known here: the rest of the review is listed with the reviews.
        self.0.review.map(|id| {
            PullRequestReview(conv::Review {
                database_id: id,
                node_id: model::encode_node_id("PRR", id),
                author: None,
                body: String::new(),
                state: conv::ReviewState::Commented,
                submitted_at: None,
                updated_at: self.0.created_at,
                commit_oid: None,
            })
        })
    }
    async fn reply_to(&self) -> Option<PullRequestReviewComment> {
        self.0.reply_to.map(|id| {
            PullRequestReviewComment(conv::ReviewComment {
                database_id: id,
                node_id: model::encode_node_id("PRRC", id),
                reply_to: None,
                review: None,
                ..self.0.clone()
            })
        })
    }
    async fn commit(&self) -> Option<Commit> {
        bare_commit(self.0.commit_oid.as_ref())
    }
}

/// `PullRequestReviewComment`
#[derive(Clone)]
struct PullRequestReviewComment(conv::ReviewComment);

/// `PullRequestReviewCommentConnection`
#[derive(SimpleObject)]
#[graphql(name = "PullRequestReviewCommentConnection")]
struct PullRequestReviewCommentConnection {
    nodes: Option<Vec<Option<PullRequestReviewComment>>>,
    page_info: PageInfo,
    total_count: i32,
}

/// `PullRequestReviewThread`
#[derive(Clone)]
struct PullRequestReviewThread(conv::ReviewThread);

#[Object(name = "PullRequestReviewThread")]
impl PullRequestReviewThread {
    async fn id(&self) -> ID {
        ID(self.0.node_id.clone())
    }
    async fn is_resolved(&self) -> bool {
        self.0.is_resolved
    }
    async fn path(&self) -> &str {
        &self.0.path
    }
    async fn resolved_by(&self) -> Option<User> {
        self.0
            .resolved_by
            .clone()
            .filter(|_| self.0.is_resolved)
            .map(|login| User { login })
    }
    async fn comments(
        &self,
        first: Option<i32>,
    ) -> async_graphql::Result<PullRequestReviewCommentConnection> {
        let first = bounded_first("comments", first)?;
        let comments = &self.0.comments;
        Ok(PullRequestReviewCommentConnection {
            total_count: count(u32::try_from(comments.len()).unwrap_or(u32::MAX)),
            page_info: nested_page_info(comments.len(), first),
            nodes: Some(
                comments
                    .iter()
                    .take(first)
                    .map(|c| Some(PullRequestReviewComment(c.clone())))
                    .collect(),
            ),
        })
    }
}

/// `PullRequestReviewThreadConnection`
#[derive(SimpleObject)]
#[graphql(name = "PullRequestReviewThreadConnection")]
struct PullRequestReviewThreadConnection {
    nodes: Option<Vec<Option<PullRequestReviewThread>>>,
    page_info: PageInfo,
    total_count: i32,
}

/// `Team`
#[derive(Clone)]
struct Team {
    slug: String,
}

#[Object(name = "Team")]
impl Team {
    async fn id(&self) -> ID {
        account_id("T", &self.slug)
    }
    async fn slug(&self) -> &str {
        &self.slug
    }
}

/// `Bot`: never requested by the model, served for the union's sake.
#[derive(SimpleObject, Clone)]
#[graphql(name = "Bot")]
struct Bot {
    id: ID,
    login: String,
}

/// `Mannequin`: never requested by the model, served for the union's sake.
#[derive(SimpleObject, Clone)]
#[graphql(name = "Mannequin")]
struct Mannequin {
    id: ID,
    login: String,
}

#[derive(Union)]
#[graphql(name = "RequestedReviewer")]
enum RequestedReviewer {
    Bot(Bot),
    Mannequin(Mannequin),
    Team(Team),
    User(User),
}

/// `ReviewRequest`
#[derive(Clone)]
struct ReviewRequest(conv::RequestedReviewer);

#[Object(name = "ReviewRequest")]
impl ReviewRequest {
    async fn id(&self) -> ID {
        match &self.0 {
            conv::RequestedReviewer::User(login) => account_id("RRU", login),
            conv::RequestedReviewer::Team(slug) => account_id("RRT", slug),
        }
    }
    async fn requested_reviewer(&self) -> Option<RequestedReviewer> {
        Some(match &self.0 {
            conv::RequestedReviewer::User(login) => RequestedReviewer::User(User {
                login: login.clone(),
            }),
            conv::RequestedReviewer::Team(slug) => {
                RequestedReviewer::Team(Team { slug: slug.clone() })
            }
        })
    }
}

/// `ReviewRequestConnection`
#[derive(SimpleObject)]
#[graphql(name = "ReviewRequestConnection")]
struct ReviewRequestConnection {
    nodes: Option<Vec<Option<ReviewRequest>>>,
    total_count: i32,
}

/// `URI`
#[derive(Clone, Debug)]
pub(crate) struct Uri(String);

#[Scalar(name = "URI")]
impl ScalarType for Uri {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(s) => Ok(Uri(s.clone())),
            _ => Err(InputValueError::expected_type(value)),
        }
    }
    fn to_value(&self) -> Value {
        Value::String(self.0.clone())
    }
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "CheckStatusState")]
enum CheckStatusState {
    Completed,
    InProgress,
    Pending,
    Queued,
    Requested,
    Waiting,
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "CheckConclusionState")]
enum CheckConclusionState {
    ActionRequired,
    Cancelled,
    Failure,
    Neutral,
    Skipped,
    Stale,
    StartupFailure,
    Success,
    TimedOut,
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "StatusState")]
enum StatusState {
    Error,
    Expected,
    Failure,
    Pending,
    Success,
}

fn check_status(s: sim::CheckStatus) -> CheckStatusState {
    match s {
        sim::CheckStatus::Queued => CheckStatusState::Queued,
        sim::CheckStatus::InProgress => CheckStatusState::InProgress,
        sim::CheckStatus::Completed => CheckStatusState::Completed,
    }
}

fn check_conclusion(c: Option<sim::CheckConclusion>) -> Option<CheckConclusionState> {
    c.map(|c| match c {
        sim::CheckConclusion::Success => CheckConclusionState::Success,
        sim::CheckConclusion::Failure => CheckConclusionState::Failure,
        sim::CheckConclusion::Neutral => CheckConclusionState::Neutral,
        sim::CheckConclusion::Cancelled => CheckConclusionState::Cancelled,
        sim::CheckConclusion::Skipped => CheckConclusionState::Skipped,
        sim::CheckConclusion::TimedOut => CheckConclusionState::TimedOut,
        sim::CheckConclusion::ActionRequired => CheckConclusionState::ActionRequired,
    })
}

fn status_state(s: sim::StatusState) -> StatusState {
    match s {
        sim::StatusState::Pending => StatusState::Pending,
        sim::StatusState::Success => StatusState::Success,
        sim::StatusState::Failure => StatusState::Failure,
        sim::StatusState::Error => StatusState::Error,
    }
}

/// `first` of a nested connection, checked as GitHub checks it.
fn bounded_first(connection: &str, first: Option<i32>) -> async_graphql::Result<usize> {
    match first {
        None => Err(typed_error(
            "MISSING_PAGINATION_BOUNDARIES",
            format!(
                "You must provide a `first` or `last` value to properly paginate the `{connection}` connection."
            ),
        )),
        Some(n) if !(0..=MAX_PAGE).contains(&n) => Err(typed_error(
            "EXCESSIVE_PAGINATION",
            format!(
                "Requesting {n} records on the `{connection}` connection exceeds the `first` limit of 100 records."
            ),
        )),
        Some(n) => Ok(usize::try_from(n).unwrap_or(0)),
    }
}

/// `App`
#[derive(SimpleObject, Clone)]
#[graphql(name = "App")]
struct App {
    database_id: Option<i32>,
    name: String,
}

/// `CheckRunConnection` (a count)
#[derive(SimpleObject)]
#[graphql(name = "CheckRunConnection")]
struct CheckRunConnection {
    total_count: i32,
}

/// `CheckSuite`
#[derive(Clone)]
struct CheckSuite(sim::CheckSuite);

#[Object(name = "CheckSuite")]
impl CheckSuite {
    async fn app(&self) -> Option<App> {
        Some(App {
            database_id: database_id(self.0.app_id),
            name: self.0.app_name.clone(),
        })
    }
    async fn status(&self) -> CheckStatusState {
        check_status(self.0.status)
    }
    async fn conclusion(&self) -> Option<CheckConclusionState> {
        check_conclusion(self.0.conclusion)
    }
    async fn check_runs(&self) -> Option<CheckRunConnection> {
        Some(CheckRunConnection {
            total_count: count(u32::try_from(self.0.runs.len()).unwrap_or(u32::MAX)),
        })
    }
}

/// `CheckRun`
#[derive(Clone)]
struct CheckRun {
    run: sim::CheckRun,
    suite: sim::CheckSuite,
}

#[Object(name = "CheckRun")]
impl CheckRun {
    async fn name(&self) -> &str {
        &self.run.name
    }
    async fn status(&self) -> CheckStatusState {
        check_status(self.run.status)
    }
    async fn conclusion(&self) -> Option<CheckConclusionState> {
        check_conclusion(self.run.conclusion)
    }
    async fn completed_at(&self) -> Option<DateTime> {
        self.run.completed_at.map(DateTime)
    }
    async fn details_url(&self) -> Option<Uri> {
        self.run.details_url.clone().map(Uri)
    }
    async fn check_suite(&self) -> CheckSuite {
        CheckSuite(self.suite.clone())
    }
}

/// `StatusContext`
#[derive(Clone)]
struct StatusContext(sim::CommitStatus);

#[Object(name = "StatusContext")]
impl StatusContext {
    async fn context(&self) -> &str {
        &self.0.context
    }
    async fn state(&self) -> StatusState {
        status_state(self.0.state)
    }
    async fn created_at(&self) -> DateTime {
        DateTime(self.0.created_at)
    }
    async fn target_url(&self) -> Option<Uri> {
        self.0.target_url.clone().map(Uri)
    }
}

#[derive(Union, Clone)]
#[graphql(name = "StatusCheckRollupContext")]
enum StatusCheckRollupContext {
    CheckRun(CheckRun),
    StatusContext(StatusContext),
}

/// `StatusCheckRollupContextConnection`
#[derive(SimpleObject)]
#[graphql(name = "StatusCheckRollupContextConnection")]
struct StatusCheckRollupContextConnection {
    nodes: Option<Vec<Option<StatusCheckRollupContext>>>,
    total_count: i32,
}

/// `StatusCheckRollup`
struct StatusCheckRollup(sim::CommitChecks, sim::StatusState);

#[Object(name = "StatusCheckRollup")]
impl StatusCheckRollup {
    async fn state(&self) -> StatusState {
        status_state(self.1)
    }
    /// Check runs of every suite, then the latest status of each context.
    async fn contexts(
        &self,
        first: Option<i32>,
    ) -> async_graphql::Result<StatusCheckRollupContextConnection> {
        let first = bounded_first("contexts", first)?;
        let all: Vec<StatusCheckRollupContext> = self
            .0
            .suites
            .iter()
            .flat_map(|suite| {
                suite.runs.iter().map(|run| {
                    StatusCheckRollupContext::CheckRun(CheckRun {
                        run: run.clone(),
                        suite: suite.clone(),
                    })
                })
            })
            .chain(
                self.0
                    .statuses
                    .iter()
                    .map(|s| StatusCheckRollupContext::StatusContext(StatusContext(s.clone()))),
            )
            .collect();
        Ok(StatusCheckRollupContextConnection {
            total_count: count(u32::try_from(all.len()).unwrap_or(u32::MAX)),
            nodes: Some(all.into_iter().take(first).map(Some).collect()),
        })
    }
}

/// `CheckSuiteConnection`
#[derive(SimpleObject)]
#[graphql(name = "CheckSuiteConnection")]
struct CheckSuiteConnection {
    nodes: Option<Vec<Option<CheckSuite>>>,
    total_count: i32,
}

/// `Commit`, with what the model knows of its checks.
#[derive(Clone)]
struct Commit {
    oid: String,
    checks: sim::CommitChecks,
}

#[Object(name = "Commit")]
impl Commit {
    async fn id(&self) -> ID {
        ID(format!("C_{}", self.oid))
    }
    async fn oid(&self) -> GitObjectId {
        GitObjectId(self.oid.clone())
    }
    async fn status_check_rollup(&self) -> Option<StatusCheckRollup> {
        let state = self.checks.rollup()?;
        Some(StatusCheckRollup(self.checks.clone(), state))
    }
    async fn check_suites(
        &self,
        first: Option<i32>,
    ) -> async_graphql::Result<Option<CheckSuiteConnection>> {
        let first = bounded_first("checkSuites", first)?;
        Ok(Some(CheckSuiteConnection {
            total_count: count(u32::try_from(self.checks.suites.len()).unwrap_or(u32::MAX)),
            nodes: Some(
                self.checks
                    .suites
                    .iter()
                    .take(first)
                    .map(|s| Some(CheckSuite(s.clone())))
                    .collect(),
            ),
        }))
    }
}

#[derive(Interface)]
#[graphql(
    name = "GitObject",
    field(name = "id", ty = "ID"),
    field(name = "oid", ty = "GitObjectId")
)]
enum GitObject {
    Commit(Commit),
}

/// `IssueConnection`
#[derive(SimpleObject)]
#[graphql(name = "IssueConnection")]
struct IssueConnection {
    nodes: Option<Vec<Option<Issue>>>,
    page_info: PageInfo,
    total_count: i32,
}

/// `PullRequestConnection`
#[derive(SimpleObject)]
#[graphql(name = "PullRequestConnection")]
struct PullRequestConnection {
    nodes: Option<Vec<Option<PullRequest>>>,
    page_info: PageInfo,
    total_count: i32,
}

/// `Repository`, a snapshot of the header; listings read the model when resolved.
#[derive(Clone)]
struct Repository {
    id: RepoId,
    node_id: String,
    owner: String,
    owner_kind: OwnerKind,
    name: String,
    is_archived: bool,
}

impl Repository {
    fn from_model(model: &Model, r: &model::Repository) -> Self {
        Self {
            id: r.database_id,
            node_id: r.node_id.clone(),
            owner: r.owner.clone(),
            owner_kind: model.owner_kind(&r.owner),
            name: r.name.clone(),
            is_archived: r.is_archived,
        }
    }
}

const MAX_PAGE: i32 = 100;

/// Encodes a listing position; opaque to clients, like GitHub's `cursor:v2:` cursors.
fn encode_cursor(key: ItemKey) -> String {
    STANDARD.encode(format!("cursor:v2:{}:{}", key.0, key.1))
}

fn decode_cursor(cursor: &str) -> Option<ItemKey> {
    let raw = String::from_utf8(STANDARD.decode(cursor).ok()?).ok()?;
    let (at, id) = raw.strip_prefix("cursor:v2:")?.split_once(':')?;
    Some((at.parse().ok()?, id.parse().ok()?))
}

/// One page of a listing with GitHub's argument checks and this call's listing faults applied.
struct Page<T> {
    nodes: Vec<T>,
    page_info: PageInfo,
    total_count: i32,
}

fn page<T: Clone>(
    ctx: &Context<'_>,
    connection: &str,
    items: &Items<T>,
    after: Option<&str>,
    first: Option<i32>,
    order_by: Option<IssueOrder>,
) -> async_graphql::Result<Page<T>> {
    let first = match first {
        None => {
            return Err(typed_error(
                "MISSING_PAGINATION_BOUNDARIES",
                format!(
                    "You must provide a `first` or `last` value to properly paginate the `{connection}` connection."
                ),
            ));
        }
        Some(n) if !(0..=MAX_PAGE).contains(&n) => {
            return Err(typed_error(
                "EXCESSIVE_PAGINATION",
                format!(
                    "Requesting {n} records on the `{connection}` connection exceeds the `first` limit of 100 records."
                ),
            ));
        }
        Some(n) => usize::try_from(n).unwrap_or(0),
    };
    if let Some(order) = order_by
        && (order.field != IssueOrderField::CreatedAt || order.direction != OrderDirection::Asc)
    {
        return Err(typed_error(
            "UNPROCESSABLE",
            "the simulator lists only in CREATED_AT ASC order",
        ));
    }
    let lower = match after {
        None => Bound::Unbounded,
        Some(c) => Bound::Excluded(decode_cursor(c).ok_or_else(|| {
            typed_error(
                "INVALID_CURSOR_ARGUMENTS",
                format!("`{c}` does not appear to be a valid cursor."),
            )
        })?),
    };
    let mut window: Vec<(ItemKey, T)> = items
        .by_key
        .range((lower, Bound::Unbounded))
        .take(first + 1)
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    let mut has_next_page = window.len() > first;
    window.truncate(first);
    let start_cursor = window.first().map(|(k, _)| encode_cursor(*k));
    let end_cursor = window.last().map(|(k, _)| encode_cursor(*k));
    let mut total = i64::try_from(items.by_key.len()).unwrap_or(i64::MAX);

    if let Some(faults) = ctx.data_opt::<PageFaults>() {
        if let Some(keep) = faults.truncate {
            window.truncate(keep);
        }
        if let Some(lie) = faults.has_next_page {
            has_next_page = lie;
        }
        if let Some(off) = faults.total_off_by {
            total = (total + off).max(0);
        }
    }
    Ok(Page {
        nodes: window.into_iter().map(|(_, v)| v).collect(),
        page_info: PageInfo {
            end_cursor,
            has_next_page,
            has_previous_page: after.is_some(),
            start_cursor,
        },
        total_count: i32::try_from(total).unwrap_or(i32::MAX),
    })
}

fn model_of<'a>(ctx: &Context<'a>) -> &'a Arc<Mutex<Model>> {
    ctx.data_unchecked::<Arc<Mutex<Model>>>()
}

/// Whether the caller sees `repo` (requests without a viewer, built in tests, see everything).
fn sees(ctx: &Context<'_>, repo: &model::Repository) -> bool {
    ctx.data_opt::<Viewer>()
        .is_none_or(|viewer| viewer.sees(repo))
}

fn lock(model: &Mutex<Model>) -> std::sync::MutexGuard<'_, Model> {
    // A panicking test closure must not take the simulator down with it.
    model.lock().unwrap_or_else(|e| e.into_inner())
}

fn gone(id: RepoId) -> async_graphql::Error {
    typed_error(
        "NOT_FOUND",
        format!("Could not resolve to a Repository with the databaseId of '{id}'."),
    )
}

#[Object(name = "Repository")]
impl Repository {
    async fn id(&self) -> ID {
        ID(self.node_id.clone())
    }
    async fn database_id(&self) -> Option<i32> {
        database_id(self.id)
    }
    async fn name(&self) -> &str {
        &self.name
    }
    async fn name_with_owner(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
    async fn is_archived(&self) -> bool {
        self.is_archived
    }
    async fn owner(&self) -> RepositoryOwner {
        let login = self.owner.clone();
        match self.owner_kind {
            OwnerKind::Organization => RepositoryOwner::Organization(Organization { login }),
            OwnerKind::User => RepositoryOwner::User(User { login }),
        }
    }
    /// A commit the model knows (a pull request's head, or one with checks); `None` otherwise.
    async fn object(
        &self,
        ctx: &Context<'_>,
        oid: Option<GitObjectId>,
    ) -> async_graphql::Result<Option<GitObject>> {
        let model = lock(model_of(ctx));
        let repo = model.repos.get(&self.id).ok_or_else(|| gone(self.id))?;
        let Some(GitObjectId(oid)) = oid else {
            return Ok(None);
        };
        let checks = model.commit_checks(self.id, &oid);
        let known = !checks.suites.is_empty()
            || !checks.statuses.is_empty()
            || repo.pull_requests().any(|p| p.head_ref_oid == oid);
        Ok(known.then_some(GitObject::Commit(Commit { oid, checks })))
    }
    async fn issues(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        first: Option<i32>,
        order_by: Option<IssueOrder>,
    ) -> async_graphql::Result<IssueConnection> {
        let model = lock(model_of(ctx));
        let repo = model.repos.get(&self.id).ok_or_else(|| gone(self.id))?;
        let p = page(
            ctx,
            "issues",
            &repo.issues,
            after.as_deref(),
            first,
            order_by,
        )?;
        Ok(IssueConnection {
            nodes: Some(
                p.nodes
                    .into_iter()
                    .map(|i| {
                        let nested = Arc::new(model.conversation(i.database_id));
                        Some(Issue(i, nested))
                    })
                    .collect(),
            ),
            page_info: p.page_info,
            total_count: p.total_count,
        })
    }
    /// One issue by number; GitHub's NOT_FOUND when there is none (a pull request's number
    /// names no issue).
    async fn issue(&self, ctx: &Context<'_>, number: i32) -> async_graphql::Result<Option<Issue>> {
        let model = lock(model_of(ctx));
        let repo = model.repos.get(&self.id).ok_or_else(|| gone(self.id))?;
        let found = u64::try_from(number).ok().and_then(|n| repo.issue(n));
        let issue = found.ok_or_else(|| {
            typed_error(
                "NOT_FOUND",
                format!("Could not resolve to an Issue with the number of {number}."),
            )
        })?;
        let nested = Arc::new(model.conversation(issue.database_id));
        Ok(Some(Issue(issue.clone(), nested)))
    }
    /// One pull request by number; GitHub's NOT_FOUND when there is none.
    async fn pull_request(
        &self,
        ctx: &Context<'_>,
        number: i32,
    ) -> async_graphql::Result<Option<PullRequest>> {
        let model = lock(model_of(ctx));
        let repo = model.repos.get(&self.id).ok_or_else(|| gone(self.id))?;
        let found = u64::try_from(number)
            .ok()
            .and_then(|n| repo.pull_request(n));
        let pull = found.ok_or_else(|| {
            typed_error(
                "NOT_FOUND",
                format!("Could not resolve to a PullRequest with the number of {number}."),
            )
        })?;
        let nested = Arc::new(model.conversation(pull.database_id));
        Ok(Some(PullRequest(pull.clone(), nested)))
    }
    async fn pull_requests(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        first: Option<i32>,
        order_by: Option<IssueOrder>,
    ) -> async_graphql::Result<PullRequestConnection> {
        let model = lock(model_of(ctx));
        let repo = model.repos.get(&self.id).ok_or_else(|| gone(self.id))?;
        let p = page(
            ctx,
            "pullRequests",
            &repo.pulls,
            after.as_deref(),
            first,
            order_by,
        )?;
        Ok(PullRequestConnection {
            nodes: Some(
                p.nodes
                    .into_iter()
                    .map(|i| {
                        let nested = Arc::new(model.conversation(i.database_id));
                        Some(PullRequest(i, nested))
                    })
                    .collect(),
            ),
            page_info: p.page_info,
            total_count: p.total_count,
        })
    }
}

/// `Query`
pub(crate) struct Query;

#[Object(name = "Query")]
impl Query {
    async fn node(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Option<Node>> {
        let model = lock(model_of(ctx));
        let not_found = || {
            typed_error(
                "NOT_FOUND",
                format!(
                    "Could not resolve to a node with the global id of '{}'",
                    id.0
                ),
            )
        };
        match model::decode_node_id(&id) {
            Some(("R", db_id)) => {
                let repo = model
                    .repos
                    .get(&db_id)
                    .filter(|r| sees(ctx, r))
                    .ok_or_else(not_found)?;
                Ok(Some(Node::Repository(Repository::from_model(&model, repo))))
            }
            _ => Err(not_found()),
        }
    }

    async fn rate_limit(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "Some(false)")] dry_run: Option<bool>,
    ) -> Option<RateLimit> {
        let _ = dry_run;
        let view = ctx.data_opt::<RateView>()?;
        let b = view.budget;
        Some(RateLimit {
            cost: count(view.cost),
            limit: count(b.limit),
            node_count: count(view.node_count),
            remaining: count(b.remaining),
            reset_at: DateTime(b.reset_at),
            used: count(b.limit.saturating_sub(b.remaining)),
        })
    }

    async fn repository(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "Some(true)")] follow_renames: Option<bool>,
        name: String,
        owner: String,
    ) -> async_graphql::Result<Option<Repository>> {
        let model = lock(model_of(ctx));
        let found = model
            .find_repository(&owner, &name, follow_renames.unwrap_or(true))
            .and_then(|id| model.repos.get(&id))
            // A private repository the caller cannot see answers as if it did not exist.
            .filter(|r| sees(ctx, r));
        match found {
            Some(repo) => Ok(Some(Repository::from_model(&model, repo))),
            None => Err(typed_error(
                "NOT_FOUND",
                format!("Could not resolve to a Repository with the name '{owner}/{name}'."),
            )),
        }
    }
}

/// Sets the position of each error to null and propagates nulls to the nearest nullable
/// position, as the GraphQL spec requires (async-graphql drops errored fields instead).
pub(crate) struct Nullability {
    /// type name → field name → declared type (`[Issue]`, `Int!`, ...)
    fields: std::collections::HashMap<String, std::collections::HashMap<String, String>>,
}

impl Nullability {
    pub(crate) fn new(sdl: &str) -> Self {
        use async_graphql::parser::types::{TypeKind, TypeSystemDefinition};
        let mut fields = std::collections::HashMap::new();
        if let Ok(doc) = async_graphql::parser::parse_schema(sdl) {
            for def in doc.definitions {
                let TypeSystemDefinition::Type(t) = def else {
                    continue;
                };
                let list = match &t.node.kind {
                    TypeKind::Object(o) => &o.fields,
                    TypeKind::Interface(i) => &i.fields,
                    _ => continue,
                };
                let map: std::collections::HashMap<String, String> = list
                    .iter()
                    .map(|f| (f.node.name.node.to_string(), f.node.ty.node.to_string()))
                    .collect();
                fields.insert(t.node.name.node.to_string(), map);
            }
        }
        Self { fields }
    }

    fn field_type(&self, parent: &str, field: &str) -> Option<&String> {
        // Fields selected through a fragment on an interface live on its implementers.
        self.fields
            .get(parent)
            .and_then(|f| f.get(field))
            .or_else(|| {
                let mut names: Vec<_> = self.fields.keys().collect();
                names.sort();
                names
                    .into_iter()
                    .find_map(|t| self.fields.get(t).and_then(|f| f.get(field)))
            })
    }

    /// Applies one error path to `data` (`None` when the whole `data` must be null).
    pub(crate) fn null_out(&self, data: &mut serde_json::Value, path: &[serde_json::Value]) {
        // Declared type of each prefix of the path.
        let mut decls: Vec<String> = Vec::with_capacity(path.len());
        let mut named = "Query".to_owned();
        let mut current = String::new();
        for seg in path {
            let decl = match seg {
                serde_json::Value::String(f) => match self.field_type(&named, f) {
                    Some(d) => d.clone(),
                    None => return,
                },
                _ => {
                    let inner = current.trim_end_matches('!');
                    inner
                        .strip_prefix('[')
                        .and_then(|s| s.strip_suffix(']'))
                        .unwrap_or(inner)
                        .to_owned()
                }
            };
            named = decl
                .trim_matches(|c| c == '[' || c == ']' || c == '!')
                .to_owned();
            current = decl.clone();
            decls.push(decl);
        }
        let Some(cut) = decls.iter().rposition(|d| !d.ends_with('!')) else {
            *data = serde_json::Value::Null;
            return;
        };
        let mut at = &mut *data;
        for seg in &path[..cut] {
            let next = match seg {
                serde_json::Value::String(f) => at.get_mut(f.as_str()),
                serde_json::Value::Number(n) => n
                    .as_u64()
                    .and_then(|i| at.get_mut(usize::try_from(i).unwrap_or(usize::MAX))),
                _ => None,
            };
            match next {
                Some(v) => at = v,
                None => return,
            }
        }
        match (&path[cut], at) {
            (serde_json::Value::String(f), serde_json::Value::Object(map)) => {
                map.insert(f.clone(), serde_json::Value::Null);
            }
            (serde_json::Value::Number(n), serde_json::Value::Array(items)) => {
                if let Some(slot) = n
                    .as_u64()
                    .and_then(|i| items.get_mut(usize::try_from(i).unwrap_or(usize::MAX)))
                {
                    *slot = serde_json::Value::Null;
                }
            }
            _ => {}
        }
    }
}
