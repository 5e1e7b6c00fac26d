//! What can go wrong talking to GitLab, told apart so callers can act on each case.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use time::OffsetDateTime;

use crate::budget::BudgetStop;

/// Every failure of a [`crate::GitlabClient`] call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// GitLab answered with an HTTP status we do not treat specially (after any retries).
    #[error("GitLab answered HTTP {status}: {message}")]
    Http {
        /// The status code.
        status: u16,
        /// GitLab's `message` or `error`, or the start of the body.
        message: String,
        /// `Retry-After`, when GitLab sent one.
        retry_after: Option<Duration>,
    },
    /// A GraphQL response whose errors leave no usable data.
    #[error("GitLab GraphQL errors: {}", summary(.errors))]
    Graphql {
        /// The errors, with their paths.
        errors: Vec<GraphqlError>,
    },
    /// GitLab's rate limit (429) still answered after our bounded retries.
    #[error("GitLab rate limit: {message}")]
    RateLimited {
        /// When GitLab says the window resets (`RateLimit-Reset`), when it said.
        reset_at: Option<OffsetDateTime>,
        /// How long GitLab asked us to wait, when it said.
        retry_after: Option<Duration>,
        /// GitLab's message.
        message: String,
    },
    /// The caller's [`crate::Budget`] would be broken by this call; nothing was sent.
    #[error("API budget exhausted: {0}")]
    BudgetExhausted(BudgetStop),
    /// The response did not have the shape of the contract.
    #[error("could not decode GitLab's answer to {operation}: {message}")]
    Decode {
        /// The operation or endpoint.
        operation: &'static str,
        /// What did not fit.
        message: String,
    },
    /// The token was refused (401).
    #[error("GitLab authentication failed: {message}")]
    Auth {
        /// GitLab's message; never contains the token.
        message: String,
    },
    /// GitLab answered with a redirect, which is not followed: it would carry the token
    /// elsewhere. Usually a wrong server URL.
    #[error(
        "GitLab answered HTTP {status}, a redirect to {}; redirects are not followed with \
         credentials: check the connection's server URL",
        .location.as_deref().unwrap_or("nowhere")
    )]
    Redirected {
        /// The 3xx status.
        status: u16,
        /// Where it pointed (without its query).
        location: Option<String>,
    },
    /// The answer was larger than [`crate::ClientConfig::max_response_bytes`]; nothing was used.
    #[error("GitLab's answer is larger than {limit} bytes, the most the client reads")]
    TooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// No HTTP answer at all (connect, timeout, TLS, broken body).
    #[error("could not reach GitLab: {0}")]
    Transport(#[source] reqwest::Error),
    /// The call would connect where the egress policy forbids (an internal address); nothing
    /// was sent. Its text tells a tenant only that the vendor is unreachable.
    #[error("could not reach GitLab: {0}")]
    Unreachable(vendor_http::egress::Refused),
    /// The call, every retry and wait included, passed its deadline
    /// ([`vendor_http::RetryPolicy::deadline`]).
    #[error("GitLab did not answer {operation} within {} s, retries included", .deadline.as_secs())]
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

    /// Whether GitLab says the object does not exist (or is not visible to this token).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Http { status: 404, .. })
    }

    /// Whether a rate limit (GitLab's or the caller's budget) stopped the call: the listing is
    /// incomplete and should resume after the reset.
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, Error::RateLimited { .. } | Error::BudgetExhausted(_))
    }
}

/// One entry of a GraphQL response's `errors`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GraphqlError {
    /// GitLab's message.
    pub message: String,
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
    /// Where `nodes[i]` sits in the path: the position of `"nodes"` and the index `i`.
    fn node_position(&self) -> Option<(usize, usize)> {
        self.path
            .windows(2)
            .enumerate()
            .find_map(|(at, pair)| match pair {
                [PathSegment::Field(field), PathSegment::Index(i)] if field == "nodes" => {
                    Some((at, *i))
                }
                _ => None,
            })
    }

    /// The index of the connection node the error is inside (`...nodes.3.approved` gives 3).
    pub fn node_index(&self) -> Option<usize> {
        self.node_position().map(|(_, i)| i)
    }

    /// The field names after the node index (`...nodes.3.author.username` gives
    /// `["author", "username"]`).
    pub fn node_fields(&self) -> Vec<&str> {
        let Some((at, _)) = self.node_position() else {
            return Vec::new();
        };
        self.path[at + 2..]
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
