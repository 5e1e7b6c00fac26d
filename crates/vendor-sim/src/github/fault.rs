//! Fault injection: which call misbehaves, and how.
//!
//! A fault counts the calls it matches (its operation, or every call) and fires on the ones its
//! [`Calls`] selects. Several faults can fire on one call; they combine.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::model::Model;

/// Operation names the simulator counts calls under: the GraphQL operation name, or one of
/// these for REST (GitHub's own REST operation ids).
pub mod ops {
    /// GraphQL `RepositoryIssues`.
    pub const REPOSITORY_ISSUES: &str = "RepositoryIssues";
    /// GraphQL `RepositoryPullRequests`.
    pub const REPOSITORY_PULL_REQUESTS: &str = "RepositoryPullRequests";
    /// GraphQL `RepositoryIssue`: one issue by number.
    pub const REPOSITORY_ISSUE: &str = "RepositoryIssue";
    /// GraphQL `RepositoryPullRequest`: one pull request by number.
    pub const REPOSITORY_PULL_REQUEST: &str = "RepositoryPullRequest";
    /// GraphQL `GetCommitCheckRuns`.
    pub const GET_COMMIT_CHECK_RUNS: &str = "GetCommitCheckRuns";
    /// GraphQL `RepositoryById`.
    pub const REPOSITORY_BY_ID: &str = "RepositoryById";
    /// GraphQL `RepositoryByName`.
    pub const REPOSITORY_BY_NAME: &str = "RepositoryByName";
    /// `POST /app/installations/{id}/access_tokens`
    pub const CREATE_INSTALLATION_ACCESS_TOKEN: &str = "apps/create-installation-access-token";
    /// `GET /installation/repositories`
    pub const LIST_INSTALLATION_REPOSITORIES: &str = "apps/list-repos-accessible-to-installation";
    /// `GET /repositories/{id}`
    pub const GET_REPOSITORY_BY_ID: &str = "repos/get-by-id";
    /// `GET /app/hook/deliveries`
    pub const LIST_APP_HOOK_DELIVERIES: &str = "apps/list-webhook-deliveries";
    /// `POST /app/hook/deliveries/{delivery_id}/attempts`
    pub const REDELIVER_APP_HOOK_DELIVERY: &str = "apps/redeliver-webhook-delivery";
    /// `GET /app/installations/{installation_id}` (as the App)
    pub const GET_INSTALLATION: &str = "apps/get-installation";
    /// `DELETE /app/installations/{installation_id}` (as the App)
    pub const DELETE_INSTALLATION: &str = "apps/delete-installation";
}

/// Which of the matching calls a fault fires on (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calls {
    /// Only the nth matching call.
    Nth(u64),
    /// The nth matching call and every one after it.
    From(u64),
    /// Every kth matching call (k, 2k, ...).
    Every(u64),
    /// Every matching call.
    Always,
    /// The first n matching calls (a fault that lasts some passes, then clears).
    First(u64),
}

impl Calls {
    fn fires(self, n: u64) -> bool {
        match self {
            Calls::Nth(k) => n == k,
            Calls::From(k) => n >= k,
            Calls::Every(k) => k > 0 && n.is_multiple_of(k),
            Calls::Always => true,
            Calls::First(k) => n <= k,
        }
    }
}

/// A change to the model made just before a call is answered (items created or deleted between
/// pages, a rename or transfer mid-listing).
pub type Mutation = Arc<dyn Fn(&mut Model) + Send + Sync>;

/// How a call misbehaves.
#[derive(Clone)]
pub enum FaultKind {
    /// The page holds only its first `keep` nodes, while `pageInfo` still describes the full
    /// page: the skipped items are never listed.
    TruncatedPage {
        /// Nodes left on the page.
        keep: usize,
    },
    /// `pageInfo.hasNextPage` says this instead of the truth (`endCursor` stays right).
    HasNextPage(bool),
    /// `totalCount` is off by this much (saturating at 0).
    TotalCountOffBy(i64),
    /// A GraphQL error at this response path (e.g. `["repository", "issues", "nodes", "3",
    /// "author"]`; indices as numbers in text); the field is null and nulls propagate as
    /// GraphQL requires. REST calls ignore it.
    FieldError {
        /// Response path, field names and list indices.
        path: Vec<String>,
        /// The error's `type` (e.g. `SERVICE_UNAVAILABLE`, `NOT_FOUND`, `FORBIDDEN`).
        error_type: String,
        /// The error's `message`.
        message: String,
    },
    /// The budget is spent from this call on: `remaining` drops to 0 and the call answers as
    /// GitHub does when out of budget (GraphQL `RATE_LIMITED`, REST 403).
    ExhaustRateLimit,
    /// A secondary rate limit: 403 with `retry-after`.
    SecondaryRateLimit {
        /// `retry-after` seconds.
        retry_after: u64,
    },
    /// An HTTP error status with GitHub's plain error body (e.g. 502, 503).
    Status(u16),
    /// 503 with `retry-after`, as a server under maintenance or overload answers.
    Unavailable {
        /// `retry-after` seconds.
        retry_after: u64,
    },
    /// 401 `Bad credentials`, as GitHub answers a revoked or invalid token.
    BadCredentials,
    /// 403 for a missing permission, naming the accepted permissions in
    /// `X-Accepted-GitHub-Permissions` when given (e.g. `issues=read`).
    Forbidden {
        /// The header's value, when GitHub would send one.
        permission: Option<String>,
    },
    /// The answer is held back this long (combines with any other kind).
    Delay(Duration),
    /// The model changes just before the call is answered.
    Mutate(Mutation),
    /// The call's work is done, then its answer is held back this long (a client that gave up
    /// earlier never learns that it landed). Only `DELETE /app/installations/{id}` honours it.
    AnswerLate(Duration),
    /// The call's work is done and GitHub answers `202 Accepted` instead of its usual status.
    /// Only `DELETE /app/installations/{id}` honours it.
    Accepted,
}

impl FaultKind {
    /// A [`FaultKind::Mutate`] from a closure.
    pub fn mutate(f: impl Fn(&mut Model) + Send + Sync + 'static) -> Self {
        FaultKind::Mutate(Arc::new(f))
    }

    /// A [`FaultKind::FieldError`] at a dotted path (`"repository.issues.nodes.3.author"`).
    pub fn field_error(path: &str, error_type: &str, message: &str) -> Self {
        FaultKind::FieldError {
            path: path.split('.').map(str::to_owned).collect(),
            error_type: error_type.to_owned(),
            message: message.to_owned(),
        }
    }
}

impl fmt::Debug for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TruncatedPage { keep } => write!(f, "TruncatedPage {{ keep: {keep} }}"),
            Self::HasNextPage(v) => write!(f, "HasNextPage({v})"),
            Self::TotalCountOffBy(d) => write!(f, "TotalCountOffBy({d})"),
            Self::FieldError { path, .. } => write!(f, "FieldError({})", path.join(".")),
            Self::ExhaustRateLimit => f.write_str("ExhaustRateLimit"),
            Self::SecondaryRateLimit { retry_after } => {
                write!(f, "SecondaryRateLimit({retry_after}s)")
            }
            Self::Status(s) => write!(f, "Status({s})"),
            Self::Unavailable { retry_after } => write!(f, "Unavailable({retry_after}s)"),
            Self::BadCredentials => f.write_str("BadCredentials"),
            Self::Forbidden { permission } => write!(f, "Forbidden({permission:?})"),
            Self::Delay(d) => write!(f, "Delay({d:?})"),
            Self::Mutate(_) => f.write_str("Mutate(..)"),
            Self::AnswerLate(d) => write!(f, "AnswerLate({d:?})"),
            Self::Accepted => f.write_str("Accepted"),
        }
    }
}

/// A fault to inject: on which calls, and what happens (`K`: the vendor's kinds; the GitLab
/// simulator uses this with its own).
#[derive(Clone, Debug)]
pub struct Fault<K = FaultKind> {
    /// The operation it applies to (see [`ops`]); `None` matches every call.
    pub operation: Option<String>,
    /// Which matching calls it fires on.
    pub calls: Calls,
    /// What happens.
    pub kind: K,
}

impl<K> Fault<K> {
    /// A fault on the nth call of `operation`.
    pub fn nth(operation: &str, n: u64, kind: K) -> Self {
        Self {
            operation: Some(operation.to_owned()),
            calls: Calls::Nth(n),
            kind,
        }
    }

    /// A fault on every call of `operation`.
    pub fn always(operation: &str, kind: K) -> Self {
        Self {
            operation: Some(operation.to_owned()),
            calls: Calls::Always,
            kind,
        }
    }
}

/// The injected faults with their match counters, and the per-operation call counters.
pub(crate) struct Faults<K = FaultKind> {
    armed: Vec<(Fault<K>, u64)>,
    calls: BTreeMap<String, u64>,
}

impl<K> Default for Faults<K> {
    fn default() -> Self {
        Self {
            armed: Vec::new(),
            calls: BTreeMap::new(),
        }
    }
}

impl<K: Clone> Faults<K> {
    pub(crate) fn inject(&mut self, fault: Fault<K>) {
        self.armed.push((fault, 0));
    }

    pub(crate) fn clear(&mut self) {
        self.armed.clear();
    }

    pub(crate) fn calls(&self) -> BTreeMap<String, u64> {
        self.calls.clone()
    }

    /// Counts one call of `operation` and returns the fault kinds that fire on it.
    pub(crate) fn on_call(&mut self, operation: &str) -> Vec<K> {
        *self.calls.entry(operation.to_owned()).or_default() += 1;
        let mut fired = Vec::new();
        for (fault, seen) in &mut self.armed {
            if fault.operation.as_deref().is_some_and(|op| op != operation) {
                continue;
            }
            *seen += 1;
            if fault.calls.fires(*seen) {
                fired.push(fault.kind.clone());
            }
        }
        fired
    }
}
