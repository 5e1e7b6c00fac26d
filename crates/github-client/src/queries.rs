//! The GraphQL operations of the contract, as cynic query structs.
//!
//! Each struct mirrors a document in `queries/` (the documents decide what `schemas/github.graphql`
//! keeps; these structs are checked against that schema at compile time). The operation names are
//! the struct names and are fixed by the contract, so the simulator can count calls per operation.
//! Enums carry a fallback: GitHub adds values (`IssueStateReason.DUPLICATE` came late) and an
//! unknown value must not fail a whole page.

use github_schema::schema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// A GitHub `DateTime` (RFC 3339, second precision on GitHub's side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub OffsetDateTime);

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = self.0.format(&Rfc3339).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        OffsetDateTime::parse(&text, &Rfc3339)
            .map(Timestamp)
            .map_err(serde::de::Error::custom)
    }
}

cynic::impl_scalar!(Timestamp, schema::DateTime);

/// A git object id (hex SHA).
#[derive(cynic::Scalar, Debug, Clone, PartialEq, Eq, Hash)]
#[cynic(graphql_type = "GitObjectID")]
pub struct GitObjectId(pub String);

/// Variables of the two repository listings.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct RepositoryPageVariables {
    /// Owner login.
    pub owner: String,
    /// Repository name.
    pub name: String,
    /// Page size (GitHub allows 1..=100).
    pub first: i32,
    /// The previous page's `endCursor`; `None` for the first page.
    pub after: Option<String>,
}

/// `rateLimit { cost limit remaining resetAt }`, selected by every operation.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "RateLimit")]
pub struct RateLimitFields {
    /// Points this query cost.
    pub cost: i32,
    /// Points per window.
    pub limit: i32,
    /// Points left in the window.
    pub remaining: i32,
    /// When the window resets.
    pub reset_at: Timestamp,
}

/// A login, on any `RepositoryOwner`.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "RepositoryOwner")]
pub struct Owner {
    /// The owner's login.
    pub login: String,
}

/// A login, on any `Actor` (user, bot, mannequin, ...).
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "Actor")]
pub struct Actor {
    /// The actor's login.
    pub login: String,
}

/// The repository fields every listing page carries.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "Repository")]
pub struct RepositoryHeader {
    /// Node id: stable across renames and transfers.
    pub id: cynic::Id,
    /// Native (REST) id.
    pub database_id: Option<i32>,
    /// `owner/name` as GitHub spells it now.
    pub name_with_owner: String,
    /// Whether the repository is archived.
    pub is_archived: bool,
    /// The current owner.
    pub owner: Owner,
}

/// `pageInfo { hasNextPage endCursor }`.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
pub struct PageInfo {
    /// Whether GitHub says another page follows (the simulator can make it lie).
    pub has_next_page: bool,
    /// The cursor to pass as `after` for the next page.
    pub end_cursor: Option<String>,
}

/// A conversation comment of an issue or pull request.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "IssueComment")]
pub struct IssueCommentNode {
    /// Node id.
    pub id: cynic::Id,
    /// Native id.
    pub database_id: Option<i32>,
    /// Body (markdown).
    pub body: String,
    /// Created.
    pub created_at: Timestamp,
    /// Last updated: the forward-only comparison key.
    pub updated_at: Timestamp,
    /// The author; `None` for a deleted account.
    pub author: Option<Actor>,
}

/// The first page of an issue's or pull request's comments.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "IssueCommentConnection")]
pub struct CommentCount {
    /// Number of comments.
    pub total_count: i32,
    /// Whether more follow this page.
    pub page_info: PageInfo,
    /// The page; a `null` entry is one GitHub failed to resolve.
    pub nodes: Option<Vec<Option<IssueCommentNode>>>,
}

/// `PullRequestReviewState`.
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
pub enum PullRequestReviewState {
    /// Approved.
    Approved,
    /// Changes requested.
    ChangesRequested,
    /// Commented.
    Commented,
    /// Dismissed.
    Dismissed,
    /// Pending (not submitted).
    Pending,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// `commit { oid }`.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "Commit")]
pub struct CommitOid {
    /// The commit.
    pub oid: GitObjectId,
}

/// A review of a pull request.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "PullRequestReview")]
pub struct ReviewNode {
    /// Node id.
    pub id: cynic::Id,
    /// Native id.
    pub database_id: Option<i32>,
    /// Body (markdown).
    pub body: String,
    /// Its state.
    pub state: PullRequestReviewState,
    /// Submitted, once submitted.
    pub submitted_at: Option<Timestamp>,
    /// Last updated: the forward-only comparison key.
    pub updated_at: Timestamp,
    /// The author.
    pub author: Option<Actor>,
    /// The commit reviewed.
    pub commit: Option<CommitOid>,
}

/// The first page of a pull request's reviews.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "PullRequestReviewConnection")]
pub struct ReviewCount {
    /// Number of reviews.
    pub total_count: i32,
    /// Whether more follow this page.
    pub page_info: PageInfo,
    /// The page.
    pub nodes: Option<Vec<Option<ReviewNode>>>,
}

/// `{ databaseId }` of a review a comment belongs to.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "PullRequestReview")]
pub struct ReviewRef {
    /// Native id.
    pub database_id: Option<i32>,
}

/// `{ databaseId }` of the comment a review comment replies to.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "PullRequestReviewComment")]
pub struct ReviewCommentRef {
    /// Native id.
    pub database_id: Option<i32>,
}

/// A review comment of a thread.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "PullRequestReviewComment")]
pub struct ReviewCommentNode {
    /// Node id.
    pub id: cynic::Id,
    /// Native id.
    pub database_id: Option<i32>,
    /// Body (markdown).
    pub body: String,
    /// Created.
    pub created_at: Timestamp,
    /// Last updated: the forward-only comparison key.
    pub updated_at: Timestamp,
    /// The file.
    pub path: String,
    /// The line, when it still maps to one.
    pub line: Option<i32>,
    /// The author.
    pub author: Option<Actor>,
    /// Its review.
    pub pull_request_review: Option<ReviewRef>,
    /// The comment it answers.
    pub reply_to: Option<ReviewCommentRef>,
    /// The commit commented on.
    pub commit: Option<CommitOid>,
}

/// The first page of a thread's review comments.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "PullRequestReviewCommentConnection")]
pub struct ReviewCommentConnection {
    /// Number of comments.
    pub total_count: i32,
    /// Whether more follow this page.
    pub page_info: PageInfo,
    /// The page.
    pub nodes: Option<Vec<Option<ReviewCommentNode>>>,
}

/// A review thread of a pull request, with its resolution.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "PullRequestReviewThread")]
pub struct ReviewThreadNode {
    /// Node id.
    pub id: cynic::Id,
    /// Whether it is resolved.
    pub is_resolved: bool,
    /// The file.
    pub path: String,
    /// Who resolved it.
    pub resolved_by: Option<UserLogin>,
    /// Its first comments.
    #[arguments(first: 20)]
    pub comments: ReviewCommentConnection,
}

/// A login, on `User`.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "User")]
pub struct UserLogin {
    /// The login.
    pub login: String,
}

/// A login, on `Team`: its slug.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "Team")]
pub struct TeamSlug {
    /// The slug.
    pub slug: String,
}

/// The first page of a pull request's review threads.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "PullRequestReviewThreadConnection")]
pub struct ReviewThreadConnection {
    /// Number of threads.
    pub total_count: i32,
    /// Whether more follow this page.
    pub page_info: PageInfo,
    /// The page.
    pub nodes: Option<Vec<Option<ReviewThreadNode>>>,
}

/// Who a review request asks: a person or a team.
#[derive(cynic::InlineFragments, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "RequestedReviewer")]
pub enum RequestedReviewer {
    /// A person.
    User(UserLogin),
    /// A team.
    Team(TeamSlug),
    /// A bot or mannequin, which this build does not store.
    #[cynic(fallback)]
    Other,
}

/// One review request.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "ReviewRequest")]
pub struct ReviewRequestNode {
    /// Who is asked; `None` when GitHub cannot say.
    pub requested_reviewer: Option<RequestedReviewer>,
}

/// GitHub's single page of a pull request's review requests.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "ReviewRequestConnection")]
pub struct ReviewRequestConnection {
    /// Number of requests.
    pub total_count: i32,
    /// The page.
    pub nodes: Option<Vec<Option<ReviewRequestNode>>>,
}

/// `IssueState`.
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
pub enum IssueState {
    /// Open.
    Open,
    /// Closed.
    Closed,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// `IssueStateReason`.
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
pub enum IssueStateReason {
    /// Closed as completed.
    Completed,
    /// Closed as a duplicate.
    Duplicate,
    /// Closed as not planned.
    NotPlanned,
    /// Reopened.
    Reopened,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// `PullRequestState`.
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
pub enum PullRequestState {
    /// Open.
    Open,
    /// Closed without merging.
    Closed,
    /// Merged.
    Merged,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// `LockReason`.
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
pub enum LockReason {
    /// Off topic.
    OffTopic,
    /// Resolved.
    Resolved,
    /// Spam.
    Spam,
    /// Too heated.
    TooHeated,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// One issue of a `RepositoryIssues` page.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "Issue")]
pub struct IssueNode {
    /// Node id.
    pub id: cynic::Id,
    /// Native id.
    pub database_id: Option<i32>,
    /// Number within the repository.
    pub number: i32,
    /// Title.
    pub title: String,
    /// Body (markdown).
    pub body: String,
    /// Open or closed.
    pub state: IssueState,
    /// Why it was closed or reopened, when GitHub says.
    pub state_reason: Option<IssueStateReason>,
    /// Created.
    pub created_at: Timestamp,
    /// Last updated: the forward-only comparison key.
    pub updated_at: Timestamp,
    /// Closed, if closed.
    pub closed_at: Option<Timestamp>,
    /// Whether the conversation is locked.
    pub locked: bool,
    /// Why it is locked.
    pub active_lock_reason: Option<LockReason>,
    /// The author; `None` for a deleted account (GitHub's "ghost").
    pub author: Option<Actor>,
    /// Comment count and first page.
    #[arguments(first: 50)]
    pub comments: CommentCount,
}

/// One pull request of a `RepositoryPullRequests` page.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq)]
#[cynic(graphql_type = "PullRequest")]
pub struct PullRequestNode {
    /// Node id.
    pub id: cynic::Id,
    /// Native id.
    pub database_id: Option<i32>,
    /// Number within the repository.
    pub number: i32,
    /// Title.
    pub title: String,
    /// Body (markdown).
    pub body: String,
    /// Open, closed or merged.
    pub state: PullRequestState,
    /// Whether it is a draft.
    pub is_draft: bool,
    /// Created.
    pub created_at: Timestamp,
    /// Last updated: the forward-only comparison key.
    pub updated_at: Timestamp,
    /// Closed, if closed (merged included).
    pub closed_at: Option<Timestamp>,
    /// Merged, if merged.
    pub merged_at: Option<Timestamp>,
    /// Whether the conversation is locked.
    pub locked: bool,
    /// Why it is locked.
    pub active_lock_reason: Option<LockReason>,
    /// Head branch name.
    pub head_ref_name: String,
    /// Head commit.
    pub head_ref_oid: GitObjectId,
    /// Base branch name.
    pub base_ref_name: String,
    /// The author; `None` for a deleted account.
    pub author: Option<Actor>,
    /// Comment count and first page.
    #[arguments(first: 50)]
    pub comments: CommentCount,
    /// Review count and first page; `None` when GitHub could not say.
    #[arguments(first: 20)]
    pub reviews: Option<ReviewCount>,
    /// Review threads, first page.
    #[arguments(first: 20)]
    pub review_threads: ReviewThreadConnection,
    /// Review requests, GitHub's single page.
    #[arguments(first: 100)]
    pub review_requests: Option<ReviewRequestConnection>,
}

/// `issues(...) { totalCount pageInfo nodes }`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "IssueConnection")]
pub struct IssueConnection {
    /// What GitHub says the full listing holds.
    pub total_count: i32,
    /// Cursor state.
    pub page_info: PageInfo,
    /// The page; a `null` entry is an item GitHub failed to resolve (see the errors).
    pub nodes: Option<Vec<Option<IssueNode>>>,
}

/// `pullRequests(...) { totalCount pageInfo nodes }`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "PullRequestConnection")]
pub struct PullRequestConnection {
    /// What GitHub says the full listing holds.
    pub total_count: i32,
    /// Cursor state.
    pub page_info: PageInfo,
    /// The page; a `null` entry is an item GitHub failed to resolve (see the errors).
    pub nodes: Option<Vec<Option<PullRequestNode>>>,
}

/// The repository of a `RepositoryIssues` page.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Repository", variables = "RepositoryPageVariables")]
pub struct IssuesRepository {
    /// The header fields.
    #[cynic(spread)]
    pub header: RepositoryHeader,
    /// Oldest first, so items created during a pass land on later pages.
    #[arguments(first: $first, after: $after, orderBy: { field: CREATED_AT, direction: ASC })]
    pub issues: IssueConnection,
}

/// The repository of a `RepositoryPullRequests` page.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Repository", variables = "RepositoryPageVariables")]
pub struct PullRequestsRepository {
    /// The header fields.
    #[cynic(spread)]
    pub header: RepositoryHeader,
    /// Oldest first, so items created during a pass land on later pages.
    #[arguments(first: $first, after: $after, orderBy: { field: CREATED_AT, direction: ASC })]
    pub pull_requests: PullRequestConnection,
}

/// Operation `RepositoryIssues`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "RepositoryPageVariables")]
pub struct RepositoryIssues {
    /// `None` when the repository is gone or not visible (GitHub adds a NOT_FOUND error).
    #[arguments(owner: $owner, name: $name)]
    pub repository: Option<IssuesRepository>,
    /// This query's cost and the remaining budget.
    pub rate_limit: Option<RateLimitFields>,
}

/// Operation `RepositoryPullRequests`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "RepositoryPageVariables")]
pub struct RepositoryPullRequests {
    /// `None` when the repository is gone or not visible.
    #[arguments(owner: $owner, name: $name)]
    pub repository: Option<PullRequestsRepository>,
    /// This query's cost and the remaining budget.
    pub rate_limit: Option<RateLimitFields>,
}

/// Variables of the two reads of one item by number.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct RepositoryItemVariables {
    /// Owner login.
    pub owner: String,
    /// Repository name.
    pub name: String,
    /// The item's number within the repository.
    pub number: i32,
}

/// The repository of a `RepositoryIssue` read.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Repository", variables = "RepositoryItemVariables")]
pub struct IssueRepository {
    /// The header fields.
    #[cynic(spread)]
    pub header: RepositoryHeader,
    /// `None` when the repository has no issue of that number (GitHub adds a NOT_FOUND error;
    /// a pull request's number names no issue).
    #[arguments(number: $number)]
    pub issue: Option<IssueNode>,
}

/// The repository of a `RepositoryPullRequest` read.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Repository", variables = "RepositoryItemVariables")]
pub struct PullRequestRepository {
    /// The header fields.
    #[cynic(spread)]
    pub header: RepositoryHeader,
    /// `None` when the repository has no pull request of that number.
    #[arguments(number: $number)]
    pub pull_request: Option<PullRequestNode>,
}

/// Operation `RepositoryIssue`: one issue by number.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "RepositoryItemVariables")]
pub struct RepositoryIssue {
    /// `None` when the repository is gone or not visible.
    #[arguments(owner: $owner, name: $name)]
    pub repository: Option<IssueRepository>,
    /// This query's cost and the remaining budget.
    pub rate_limit: Option<RateLimitFields>,
}

/// Operation `RepositoryPullRequest`: one pull request by number.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "RepositoryItemVariables")]
pub struct RepositoryPullRequest {
    /// `None` when the repository is gone or not visible.
    #[arguments(owner: $owner, name: $name)]
    pub repository: Option<PullRequestRepository>,
    /// This query's cost and the remaining budget.
    pub rate_limit: Option<RateLimitFields>,
}

/// Variables of `RepositoryById`.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct RepositoryByIdVariables {
    /// The repository's node id.
    pub id: cynic::Id,
}

/// A repository's identity now, looked up by node id.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "Repository")]
pub struct RepositoryRef {
    /// Node id.
    pub id: cynic::Id,
    /// Native id.
    pub database_id: Option<i32>,
    /// `owner/name` now: differs from ours after a rename or transfer.
    pub name_with_owner: String,
    /// The current owner.
    pub owner: Owner,
}

/// `node(id:)`: a repository, or some other kind of node.
#[derive(cynic::InlineFragments, Debug, Clone)]
#[cynic(graphql_type = "Node")]
pub enum RepositoryNode {
    /// The node is a repository.
    Repository(RepositoryRef),
    /// The id names something else.
    #[cynic(fallback)]
    Other,
}

/// Operation `RepositoryById`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "RepositoryByIdVariables")]
pub struct RepositoryById {
    /// `None` when no node has that id (deleted, or not visible to us).
    #[arguments(id: $id)]
    pub node: Option<RepositoryNode>,
    /// This query's cost and the remaining budget.
    pub rate_limit: Option<RateLimitFields>,
}

/// Variables of `RepositoryByName`.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct RepositoryByNameVariables {
    /// Owner login.
    pub owner: String,
    /// Repository name.
    pub name: String,
}

/// Operation `RepositoryByName`: resolves a name to the repository these credentials see.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "RepositoryByNameVariables")]
pub struct RepositoryByName {
    /// `None` when no repository has that name (or these credentials cannot see it).
    #[arguments(owner: $owner, name: $name)]
    pub repository: Option<RepositoryRef>,
    /// This query's cost and the remaining budget.
    pub rate_limit: Option<RateLimitFields>,
}

/// A URL as GitHub types it (`URI`).
#[derive(cynic::Scalar, Debug, Clone, PartialEq, Eq, Hash)]
#[cynic(graphql_type = "URI")]
pub struct Uri(pub String);

/// Variables of `GetCommitCheckRuns`.
#[derive(cynic::QueryVariables, Debug, Clone)]
pub struct CommitCheckRunsVariables {
    /// Owner login.
    pub owner: String,
    /// Repository name.
    pub name: String,
    /// The commit.
    pub oid: GitObjectId,
}

/// `CheckStatusState`.
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
pub enum CheckStatusState {
    /// Completed.
    Completed,
    /// In progress.
    InProgress,
    /// Pending.
    Pending,
    /// Queued.
    Queued,
    /// Requested.
    Requested,
    /// Waiting.
    Waiting,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// `CheckConclusionState`.
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
pub enum CheckConclusionState {
    /// Waits for someone to act (a suite awaiting approval of its workflows).
    ActionRequired,
    /// Cancelled.
    Cancelled,
    /// Failed.
    Failure,
    /// Neutral.
    Neutral,
    /// Skipped.
    Skipped,
    /// Stale.
    Stale,
    /// Failed to start.
    StartupFailure,
    /// Succeeded.
    Success,
    /// Timed out.
    TimedOut,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// `StatusState`: a commit status's or the rollup's state.
#[derive(cynic::Enum, Debug, Clone, PartialEq, Eq, Hash)]
pub enum StatusState {
    /// Errored.
    Error,
    /// Expected (required, not reported yet).
    Expected,
    /// Failed.
    Failure,
    /// Pending.
    Pending,
    /// Succeeded.
    Success,
    /// A value this build does not know.
    #[cynic(fallback)]
    Other(String),
}

/// The App of a check run's suite.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "App")]
pub struct CheckApp {
    /// Native id (the App id).
    pub database_id: Option<i32>,
    /// Display name.
    pub name: String,
}

/// `checkSuite { app { databaseId name } }` of a check run.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "CheckSuite")]
pub struct CheckRunSuite {
    /// The suite's App; `None` when GitHub does not say.
    pub app: Option<CheckApp>,
}

/// One check run of the rollup.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "CheckRun")]
pub struct CheckRunNode {
    /// Name.
    pub name: String,
    /// Status.
    pub status: CheckStatusState,
    /// Conclusion, once completed.
    pub conclusion: Option<CheckConclusionState>,
    /// When it completed.
    pub completed_at: Option<Timestamp>,
    /// Link to the run's details.
    pub details_url: Option<Uri>,
    /// Its suite.
    pub check_suite: CheckRunSuite,
}

/// One commit status of the rollup.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "StatusContext")]
pub struct StatusContextNode {
    /// The status's context (its name).
    pub context: String,
    /// Its state.
    pub state: StatusState,
    /// When this state was reported.
    pub created_at: Timestamp,
    /// Its link.
    pub target_url: Option<Uri>,
}

/// A check run or a commit status.
#[derive(cynic::InlineFragments, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "StatusCheckRollupContext")]
pub enum RollupContext {
    /// A check run.
    CheckRun(CheckRunNode),
    /// A commit status.
    StatusContext(StatusContextNode),
    /// A kind this build does not know.
    #[cynic(fallback)]
    Other,
}

/// `contexts(first: 100) { totalCount nodes }`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "StatusCheckRollupContextConnection")]
pub struct RollupContexts {
    /// Check runs and statuses GitHub counts for the commit.
    pub total_count: i32,
    /// The page; a `null` entry is one GitHub failed to resolve.
    pub nodes: Option<Vec<Option<RollupContext>>>,
}

/// `statusCheckRollup { state contexts }`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "StatusCheckRollup")]
pub struct StatusCheckRollup {
    /// The combined state.
    pub state: StatusState,
    /// One page of 100 runs and statuses.
    #[arguments(first: 100)]
    pub contexts: RollupContexts,
}

/// `app { databaseId }` of a check suite.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "App")]
pub struct SuiteApp {
    /// Native id (the App id).
    pub database_id: Option<i32>,
}

/// `checkRuns { totalCount }` of a suite.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "CheckRunConnection")]
pub struct CheckRunCount {
    /// How many runs the suite has.
    pub total_count: i32,
}

/// One check suite of the commit.
#[derive(cynic::QueryFragment, Debug, Clone, PartialEq, Eq)]
#[cynic(graphql_type = "CheckSuite")]
pub struct CheckSuiteNode {
    /// The suite's App.
    pub app: Option<SuiteApp>,
    /// Status.
    pub status: CheckStatusState,
    /// Conclusion, once completed.
    pub conclusion: Option<CheckConclusionState>,
    /// Its runs' count; `None` when GitHub does not say.
    pub check_runs: Option<CheckRunCount>,
}

/// `checkSuites(first: 100) { totalCount nodes }`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "CheckSuiteConnection")]
pub struct CheckSuites {
    /// Suites GitHub counts for the commit.
    pub total_count: i32,
    /// The page.
    pub nodes: Option<Vec<Option<CheckSuiteNode>>>,
}

/// The commit of a `GetCommitCheckRuns` read.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Commit")]
pub struct CommitChecks {
    /// The commit.
    pub oid: GitObjectId,
    /// `None`: the commit has no checks or statuses at all.
    pub status_check_rollup: Option<StatusCheckRollup>,
    /// Its check suites; `None` when GitHub does not say.
    #[arguments(first: 100)]
    pub check_suites: Option<CheckSuites>,
}

/// `object(oid:)`: a commit, or another kind of object.
#[derive(cynic::InlineFragments, Debug, Clone)]
#[cynic(graphql_type = "GitObject")]
pub enum CommitObject {
    /// A commit.
    Commit(CommitChecks),
    /// A tree, blob or tag.
    #[cynic(fallback)]
    Other,
}

/// The repository of a `GetCommitCheckRuns` read.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Repository", variables = "CommitCheckRunsVariables")]
pub struct CommitChecksRepository {
    /// `None` when no object has that id.
    #[arguments(oid: $oid)]
    pub object: Option<CommitObject>,
}

/// Operation `GetCommitCheckRuns`.
#[derive(cynic::QueryFragment, Debug, Clone)]
#[cynic(graphql_type = "Query", variables = "CommitCheckRunsVariables")]
pub struct GetCommitCheckRuns {
    /// `None` when the repository is gone or not visible.
    #[arguments(owner: $owner, name: $name)]
    pub repository: Option<CommitChecksRepository>,
    /// This query's cost and the remaining budget.
    pub rate_limit: Option<RateLimitFields>,
}

/// Implemented by every operation: its `rateLimit` selection.
pub(crate) trait SelectsRateLimit {
    fn rate_limit(&self) -> Option<&RateLimitFields>;
}

macro_rules! selects_rate_limit {
    ($($ty:ty),*) => {$(
        impl SelectsRateLimit for $ty {
            fn rate_limit(&self) -> Option<&RateLimitFields> {
                self.rate_limit.as_ref()
            }
        }
    )*};
}

selects_rate_limit!(
    RepositoryIssues,
    RepositoryPullRequests,
    RepositoryById,
    RepositoryByName,
    RepositoryIssue,
    RepositoryPullRequest,
    GetCommitCheckRuns
);

#[cfg(test)]
mod tests {
    use cynic::QueryBuilder;

    use super::*;

    fn page_vars() -> RepositoryPageVariables {
        RepositoryPageVariables {
            owner: "o".into(),
            name: "r".into(),
            first: 50,
            after: None,
        }
    }

    fn item_vars() -> RepositoryItemVariables {
        RepositoryItemVariables {
            owner: "o".into(),
            name: "r".into(),
            number: 7,
        }
    }

    fn check_vars() -> CommitCheckRunsVariables {
        CommitCheckRunsVariables {
            owner: "o".into(),
            name: "r".into(),
            oid: GitObjectId("0".repeat(40)),
        }
    }

    fn by_name_vars() -> RepositoryByNameVariables {
        RepositoryByNameVariables {
            owner: "o".into(),
            name: "r".into(),
        }
    }

    /// The simulator counts calls by operation name: the names are part of the contract.
    #[test]
    fn operation_names_are_the_contracts() {
        let issues = RepositoryIssues::build(page_vars()).query;
        let prs = RepositoryPullRequests::build(page_vars()).query;
        let by_id = RepositoryById::build(RepositoryByIdVariables {
            id: cynic::Id::new("R_1"),
        })
        .query;
        assert!(issues.starts_with("query RepositoryIssues("), "{issues}");
        assert!(prs.starts_with("query RepositoryPullRequests("), "{prs}");
        assert!(by_id.starts_with("query RepositoryById("), "{by_id}");
        let by_name = RepositoryByName::build(by_name_vars()).query;
        assert!(by_name.starts_with("query RepositoryByName("), "{by_name}");
        let checks = GetCommitCheckRuns::build(check_vars()).query;
        assert!(checks.starts_with("query GetCommitCheckRuns("), "{checks}");
        // cynic tells fragment variants apart by `__typename`: the simulator must answer it.
        assert!(by_id.contains("__typename"), "{by_id}");
    }

    /// Every field a contract document selects is in the query cynic sends.
    #[test]
    fn queries_select_what_the_contract_documents_select() {
        let docs = [
            (
                include_str!("../queries/RepositoryIssues.graphql"),
                RepositoryIssues::build(page_vars()).query,
            ),
            (
                include_str!("../queries/RepositoryPullRequests.graphql"),
                RepositoryPullRequests::build(page_vars()).query,
            ),
            (
                include_str!("../queries/RepositoryIssue.graphql"),
                RepositoryIssue::build(item_vars()).query,
            ),
            (
                include_str!("../queries/RepositoryPullRequest.graphql"),
                RepositoryPullRequest::build(item_vars()).query,
            ),
            (
                include_str!("../queries/GetCommitCheckRuns.graphql"),
                GetCommitCheckRuns::build(check_vars()).query,
            ),
            (
                include_str!("../queries/RepositoryByName.graphql"),
                RepositoryByName::build(by_name_vars()).query,
            ),
            (
                include_str!("../queries/RepositoryById.graphql"),
                RepositoryById::build(RepositoryByIdVariables {
                    id: cynic::Id::new("R_1"),
                })
                .query,
            ),
        ];
        for (doc, sent) in docs {
            let words = |text: &str| -> std::collections::BTreeSet<String> {
                text.lines()
                    .filter(|l| !l.trim_start().starts_with('#'))
                    .flat_map(|l| l.split(|c: char| !c.is_ascii_alphanumeric() && c != '_'))
                    .filter(|w| !w.is_empty())
                    .map(str::to_owned)
                    .collect()
            };
            let missing: Vec<_> = words(doc).difference(&words(&sent)).cloned().collect();
            assert!(missing.is_empty(), "cynic query lacks {missing:?}:\n{sent}");
        }
    }
}
