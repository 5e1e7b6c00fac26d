//! What can go wrong talking to GitHub, told apart so callers can act on each case.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use time::OffsetDateTime;

use crate::budget::BudgetStop;

/// Every failure of a [`crate::GithubClient`] or [`crate::GithubApp`] call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// GitHub answered with an HTTP status we do not treat specially (after any retries).
    #[error("GitHub answered HTTP {status}: {message}")]
    Http {
        /// The status code.
        status: u16,
        /// GitHub's `message`, or the start of the body.
        message: String,
        /// `Retry-After`, when GitHub sent one.
        retry_after: Option<Duration>,
    },
    /// A GraphQL response whose errors leave no usable data (NOT_FOUND, FORBIDDEN, ...).
    #[error("GitHub GraphQL errors: {}", summary(.errors))]
    Graphql {
        /// The errors, with their paths.
        errors: Vec<GraphqlError>,
    },
    /// GitHub's own rate limit stopped the call: primary (spent until `reset_at`) or secondary
    /// (an abuse limit still in force after our bounded retries).
    #[error("GitHub rate limit ({kind:?}): {message}")]
    RateLimited {
        /// Which limit.
        kind: RateLimitKind,
        /// When the primary window resets, when known.
        reset_at: Option<OffsetDateTime>,
        /// How long GitHub asked us to wait, when it said.
        retry_after: Option<Duration>,
        /// GitHub's message.
        message: String,
    },
    /// The caller's [`crate::Budget`] would be broken by this call; nothing was sent.
    #[error("API budget exhausted: {0}")]
    BudgetExhausted(BudgetStop),
    /// The response did not have the shape of the contract.
    #[error("could not decode GitHub's answer to {operation}: {message}")]
    Decode {
        /// The operation or endpoint.
        operation: &'static str,
        /// What did not fit.
        message: String,
    },
    /// Credentials were refused (401) or could not be used (bad key, no App configured).
    #[error("GitHub authentication failed: {message}")]
    Auth {
        /// The HTTP status when GitHub refused them; `None` when we could not even build them.
        status: Option<u16>,
        /// What went wrong; never contains a secret.
        message: String,
    },
    /// A plain 403: the credentials are valid but lack a permission. Not retried.
    #[error("GitHub refused the call for a missing permission{}: {message}",
        .permissions.as_deref().map(|p| format!(" (it asks for {p})")).unwrap_or_default())]
    Forbidden {
        /// GitHub's `X-Accepted-GitHub-Permissions`, the permissions that would have been
        /// accepted (e.g. `issues=read`), when it sent one.
        permissions: Option<String>,
        /// GitHub's message.
        message: String,
    },
    /// GitHub answered with a redirect, which is not followed: it would carry the credentials
    /// elsewhere. Usually a wrong server URL (http instead of https, a moved GHES host).
    #[error(
        "GitHub answered HTTP {status}, a redirect to {}; redirects are not followed with \
         credentials: check the connection's server URL",
        .location.as_deref().unwrap_or("nowhere")
    )]
    Redirected {
        /// The 3xx status.
        status: u16,
        /// Where it pointed (without its query).
        location: Option<String>,
    },
    /// The answer was larger than [`crate::ClientConfig::max_response_bytes`]; nothing of it was
    /// used.
    #[error("GitHub's answer is larger than {limit} bytes, the most the client reads")]
    TooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// No HTTP answer at all (connect, timeout, TLS, broken body).
    #[error("could not reach GitHub: {0}")]
    Transport(#[source] reqwest::Error),
    /// The call would connect where the egress policy forbids (an internal address); nothing
    /// was sent. Its text tells a tenant only that the vendor is unreachable.
    #[error("could not reach GitHub: {0}")]
    Unreachable(vendor_http::egress::Refused),
    /// A listing that cannot be read whole within its bounds (more pages than allowed, more
    /// entries than it states): nothing of it may be taken for the whole.
    #[error("GitHub's answer to {operation} is incomplete: {reason}")]
    Incomplete {
        /// The operation.
        operation: &'static str,
        /// Why.
        reason: String,
    },
    /// The call, every retry and wait included, passed its deadline
    /// ([`vendor_http::RetryPolicy::deadline`]).
    #[error("GitHub did not answer {operation} within {} s, retries included", .deadline.as_secs())]
    Deadline {
        /// The operation.
        operation: &'static str,
        /// The deadline it passed.
        deadline: Duration,
    },
}

impl Error {
    /// A request that got no answer: refused by the egress policy, or a transport failure.
    pub fn from_transport(e: reqwest::Error) -> Self {
        match vendor_http::egress::refused_in(&e) {
            Some(refused) => Error::Unreachable(refused),
            None => Error::Transport(e),
        }
    }

    /// Whether GitHub says the object does not exist (or is not visible to these credentials).
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Http { status, .. } => *status == 404,
            Error::Graphql { errors } => errors.iter().any(GraphqlError::is_not_found),
            _ => false,
        }
    }

    /// Whether a rate limit (GitHub's or the caller's budget) stopped the call: the listing is
    /// incomplete and should resume after the reset.
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, Error::RateLimited { .. } | Error::BudgetExhausted(_))
    }
}

/// Which GitHub rate limit answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateLimitKind {
    /// The hourly points (GraphQL) or requests (REST) are spent.
    Primary,
    /// A secondary ("abuse") limit: too many requests too fast, or too much concurrency.
    Secondary,
}

/// One entry of a GraphQL response's `errors`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GraphqlError {
    /// GitHub's message.
    pub message: String,
    /// GitHub's `type` (`NOT_FOUND`, `FORBIDDEN`, `RATE_LIMITED`, ...), when given.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// Where in the response the error sits; empty for errors about the whole query.
    #[serde(default)]
    pub path: Vec<PathSegment>,
}

/// A step of a GraphQL error path: a field name or a list index.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PathSegment {
    /// A field (by its response key).
    Field(String),
    /// A position in a list.
    Index(usize),
}

impl GraphqlError {
    /// Whether this is GitHub's `NOT_FOUND`.
    pub fn is_not_found(&self) -> bool {
        self.kind.as_deref() == Some("NOT_FOUND")
    }

    /// Whether this is GitHub's `RATE_LIMITED`.
    pub fn is_rate_limited(&self) -> bool {
        self.kind.as_deref() == Some("RATE_LIMITED")
    }

    /// The index of the connection node the error is inside (`...nodes.3.author` gives 3), so a
    /// caller can mark that item's fields unknown rather than the whole page.
    pub fn node_index(&self) -> Option<usize> {
        self.path.windows(2).find_map(|pair| match pair {
            [PathSegment::Field(field), PathSegment::Index(i)] if field == "nodes" => Some(*i),
            _ => None,
        })
    }

    /// The field names after the node index (`...nodes.3.author.login` gives
    /// `["author", "login"]`): which of that item's fields are unknown.
    pub fn node_fields(&self) -> Vec<&str> {
        let start = self.path.windows(2).position(
            |pair| matches!(pair, [PathSegment::Field(f), PathSegment::Index(_)] if f == "nodes"),
        );
        let Some(start) = start else {
            return Vec::new();
        };
        self.path[start + 2..]
            .iter()
            .filter_map(|s| match s {
                PathSegment::Field(f) => Some(f.as_str()),
                PathSegment::Index(_) => None,
            })
            .collect()
    }
}

impl fmt::Display for GraphqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(kind) = &self.kind {
            write!(f, "{kind}: ")?;
        }
        write!(f, "{}", self.message)?;
        if !self.path.is_empty() {
            let path: Vec<String> = self
                .path
                .iter()
                .map(|s| match s {
                    PathSegment::Field(name) => name.clone(),
                    PathSegment::Index(i) => i.to_string(),
                })
                .collect();
            write!(f, " (at {})", path.join("."))?;
        }
        Ok(())
    }
}

fn summary(errors: &[GraphqlError]) -> String {
    let shown: Vec<String> = errors.iter().take(3).map(ToString::to_string).collect();
    match errors.len() {
        0 => "no errors given".to_owned(),
        n if n > 3 => format!("{}; and {} more", shown.join("; "), n - 3),
        _ => shown.join("; "),
    }
}
