//! What github-sync reads from GitHub, as the sync engine sees it: one page at a time, with the
//! vendor's own totals and cursors, and errors that say whether a listing can still be trusted.
//! The production implementation sits on `github-client`; the engine does not know about HTTP.

use lifecycle_core::forward::GithubReviewState;
use lifecycle_core::github::checks::CommitChecksRead;
use lifecycle_core::partial::PathSegment;
use lifecycle_core::vendor_error::VendorErrorClass;
use sync_engine::{ReadError, ReadStop};
use time::OffsetDateTime;

pub use crate::webhooks::reviewers::Reviewer;
// The shapes the mirror writes are shared with every SCM sync.
pub use scm_mirror::items::{IssueNode, ItemFields, PullRequestNode};
pub use scm_mirror::repository::{RepoHeader, RepoRef};

/// What a connection's credentials reach now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// Repositories resolved with the connection's own credentials, each with its native id
    /// (an App installation's listing, or a PAT's configured names resolved one by one).
    pub repositories: Vec<RepoRef>,
    /// Configured `owner/name`s the credentials no longer resolve: gone, or not visible to them.
    pub unresolved: Vec<String>,
    /// The connection reaches these repositories and no others (a PAT's configured list): its
    /// monitors of anything else lose their proof and are removed.
    pub exclusive: bool,
}

/// The first page of a list nested under an item (its comments, reviews, threads), as read.
#[derive(Debug, Clone, PartialEq)]
pub struct Nested<T> {
    pub nodes: Vec<T>,
    /// Whether the page is the whole list: no next page, no unresolved entry, and as many
    /// entries as GitHub counts. Only a whole list may infer a deletion from an absence.
    pub whole: bool,
}

impl<T> Nested<T> {
    /// A first page with GitHub's cursor state and count (`None` entries failed to resolve).
    pub fn read(nodes: Vec<Option<T>>, has_next_page: bool, total_count: i64) -> Self {
        let resolved = nodes.iter().all(Option::is_some);
        let nodes: Vec<T> = nodes.into_iter().flatten().collect();
        // Fail-closed per nested list: anything short of a provably whole page is partial.
        let whole = resolved && !has_next_page && i64::try_from(nodes.len()) == Ok(total_count);
        Nested { nodes, whole }
    }
}

/// A conversation comment, or the comment part of a review comment.
#[derive(Debug, Clone, PartialEq)]
pub struct CommentNode {
    pub native_id: i64,
    pub node_id: String,
    pub author: Option<String>,
    pub body: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// A review of a pull request.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewNode {
    pub native_id: i64,
    pub node_id: String,
    pub author: Option<String>,
    pub body: String,
    pub state: GithubReviewState,
    pub commit_sha: Option<String>,
    pub submitted_at: Option<OffsetDateTime>,
    pub updated_at: OffsetDateTime,
}

/// A review comment of a thread.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewCommentNode {
    pub comment: CommentNode,
    pub path: String,
    pub line: Option<i32>,
    pub review_native_id: Option<i64>,
    pub in_reply_to: Option<i64>,
    pub commit_sha: Option<String>,
}

/// A review thread, its resolution and its first comments.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadNode {
    pub node_id: String,
    pub path: String,
    pub resolved: bool,
    pub resolved_by: Option<String>,
    pub comments: Nested<ReviewCommentNode>,
}

/// What a listing page read under one item; `None` where the page did not read that list (an
/// issue has no reviews; a failed field is unknown).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    pub comments: Option<Nested<CommentNode>>,
    pub reviews: Option<Nested<ReviewNode>>,
    pub threads: Option<Nested<ThreadNode>>,
    /// The review requests (people and teams), or `None` when GitHub's page cannot be whole.
    pub reviewers: Option<Nested<Reviewer>>,
}

/// One page of a listing.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub repository: RepoHeader,
    pub nodes: Vec<T>,
    /// What the page read under each node, by index (empty: nothing nested was read).
    pub conversations: Vec<Conversation>,
    /// When we asked for the page (our clock): the date of the dated states it carries
    /// (review requests, thread resolutions).
    pub read_at: OffsetDateTime,
    pub total_count: Option<u64>,
    pub has_next_page: bool,
    pub end_cursor: Option<String>,
    /// Paths of GraphQL errors in an otherwise usable response.
    pub error_paths: Vec<Vec<PathSegment>>,
    /// Quota points this call cost.
    pub cost: u32,
}

/// A read that failed; the listing it belonged to is incomplete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("GitHub answered HTTP {0}")]
    Http(u16),
    #[error("GitHub refused the connection's credentials: {0}")]
    BadCredentials(String),
    #[error("GitHub refused the call for a missing permission{}: {message}",
        .permission.as_deref().map(|p| format!(" (it asks for {p})")).unwrap_or_default())]
    Forbidden {
        /// What GitHub said it would accept (`X-Accepted-GitHub-Permissions`), when it did.
        permission: Option<String>,
        message: String,
    },
    #[error("GitHub reported GraphQL errors: {message}")]
    GraphQl {
        /// The first error's `type` (`SERVICE_UNAVAILABLE`, `FORBIDDEN`, ...), when given.
        kind: Option<String>,
        message: String,
    },
    #[error("GitHub rate limit reached")]
    RateLimited,
    #[error("GitHub's secondary rate limit is still in force after the retries")]
    SecondaryRateLimited,
    #[error("GitHub did not answer in time: {0}")]
    Timeout(String),
    #[error("could not reach GitHub: {0}")]
    Unreachable(String),
    #[error("the job's quota budget is spent: {0}")]
    BudgetExhausted(String),
    #[error("the repository is gone upstream")]
    NotFound,
    #[error("{0}")]
    Other(String),
}

impl ReadError for SourceError {
    fn class(&self) -> VendorErrorClass {
        match self {
            SourceError::Http(401) | SourceError::BadCredentials(_) => {
                VendorErrorClass::BadCredentials
            }
            SourceError::Http(403) => VendorErrorClass::Forbidden { permission: None },
            SourceError::Forbidden { permission, .. } => VendorErrorClass::Forbidden {
                permission: permission.clone(),
            },
            SourceError::Http(404) | SourceError::NotFound => VendorErrorClass::NotFound,
            SourceError::Http(status) if *status >= 500 => VendorErrorClass::ServerError,
            SourceError::Http(_) | SourceError::Other(_) => VendorErrorClass::InvalidResponse,
            SourceError::GraphQl { kind, .. } => {
                VendorErrorClass::GraphqlError(kind.clone().unwrap_or_else(|| "UNTYPED".into()))
            }
            SourceError::RateLimited => VendorErrorClass::RateLimited,
            SourceError::SecondaryRateLimited => VendorErrorClass::SecondaryRateLimit,
            SourceError::Timeout(_) => VendorErrorClass::Timeout,
            SourceError::Unreachable(_) => VendorErrorClass::Unreachable,
            SourceError::BudgetExhausted(_) => VendorErrorClass::BudgetExhausted,
        }
    }

    fn stops(&self) -> ReadStop {
        match self {
            // Quota: another pass would only spend what is left of it.
            SourceError::BudgetExhausted(why) => {
                ReadStop::Job(format!("quota budget exhausted: {why}"))
            }
            SourceError::RateLimited => ReadStop::Job("GitHub's rate limit is spent".into()),
            SourceError::SecondaryRateLimited => ReadStop::Job(
                "GitHub's secondary rate limit outlasted the retries; pressing on would extend it"
                    .into(),
            ),
            // The engine ends the job on refused credentials; no later read could succeed.
            SourceError::BadCredentials(_) | SourceError::Forbidden { .. } => {
                ReadStop::Job(self.to_string())
            }
            SourceError::Http(status) if *status >= 500 => {
                ReadStop::Pass(format!("GitHub is failing (HTTP {status} after retries)"))
            }
            SourceError::Timeout(_) => {
                ReadStop::Pass("GitHub did not answer in time (after retries)".into())
            }
            SourceError::Unreachable(why) => {
                ReadStop::Pass(format!("GitHub is unreachable: {why}"))
            }
            // A repository-level failure (a GraphQL error, a 404) only ends its listing.
            _ => ReadStop::Listing,
        }
    }
}

/// GitHub as the sync engine reads it.
#[async_trait::async_trait]
pub trait GithubSource: Send + Sync {
    /// Repositories the credentials reach (an App installation's, or a PAT's configured names
    /// resolved with the PAT), each with its native id. A failure to ask (outage, rate limit,
    /// bad credentials) is an error, never an empty or shorter reach.
    async fn repositories(&self) -> Result<Reach, SourceError>;

    async fn issues_page(
        &self,
        repo: &RepoRef,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<IssueNode>, SourceError>;

    async fn pull_requests_page(
        &self,
        repo: &RepoRef,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<PullRequestNode>, SourceError>;

    /// One issue by number, with what an issues page reads under it, as a page of one; `None`
    /// when GitHub shows these credentials no issue of that number.
    async fn issue(
        &self,
        repo: &RepoRef,
        number: i32,
    ) -> Result<Option<Page<IssueNode>>, SourceError>;

    /// One pull request by number, as [`GithubSource::issue`].
    async fn pull_request(
        &self,
        repo: &RepoRef,
        number: i32,
    ) -> Result<Option<Page<PullRequestNode>>, SourceError>;

    /// One read of a commit's check runs, statuses and suites (`GetCommitCheckRuns`). Any doubt
    /// about the answer (a GraphQL error, an unknown commit) is an error: a failed read.
    async fn commit_check_runs(
        &self,
        repo: &RepoRef,
        sha: &str,
    ) -> Result<CommitChecksRead, SourceError>;

    /// Our own GitHub App, whose check suites and runs are left out of a head's runs.
    fn own_app_id(&self) -> Option<u64>;

    /// A repository by native id as these credentials see it now (`GET /repositories/{id}`);
    /// `None` when GitHub answers 404 (gone, or no longer visible to these credentials).
    async fn repository(&self, native_id: i64) -> Result<Option<RepoRef>, SourceError>;

    /// The App installation these credentials act as (an installation token is issued for it
    /// on each call); `None` for a PAT. A successful call verifies it.
    fn installation_id(&self) -> Option<u64>;
}
