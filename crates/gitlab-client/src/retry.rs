//! Which of the client's failures are worth another try; the one retry policy (backoff,
//! `Retry-After`, bounds) is vendor-http's.
//!
//! Retried: 5xx, 429 and transport failures. Everything else, 401 and 404 included, fails at
//! once.

use std::time::Duration;

pub use vendor_http::RetryPolicy;
use vendor_http::RetryableError;

use crate::error::Error;

impl RetryableError for Error {
    const VENDOR: &'static str = "GitLab";

    fn is_retryable(&self) -> bool {
        match self {
            Error::Http { status, .. } => *status >= 500,
            Error::RateLimited { .. } => true,
            Error::Transport(e) => !e.is_builder() && !e.is_decode(),
            Error::Graphql { .. }
            | Error::BudgetExhausted(_)
            | Error::Decode { .. }
            | Error::Redirected { .. }
            | Error::TooLarge { .. }
            | Error::Unreachable(_)
            | Error::Deadline { .. }
            | Error::Auth { .. } => false,
        }
    }

    fn deadline_passed(operation: &'static str, deadline: Duration) -> Self {
        Error::Deadline {
            operation,
            deadline,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Http { retry_after, .. } | Error::RateLimited { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }
}
