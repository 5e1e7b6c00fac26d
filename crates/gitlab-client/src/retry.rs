//! Which failures are worth another try, and how long to wait: the one retry policy of the
//! client, the same shape as github-client's.
//!
//! Retried, a bounded number of times with exponential backoff (backon): 5xx, 429 and transport
//! failures. `Retry-After` overrides the backoff; one longer than
//! [`RetryPolicy::max_retry_after`] ends the retries, since holding a job that long is worse
//! than stopping it cleanly. Everything else, 401 and 404 included, fails at once.

use std::future::Future;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use crate::error::Error;

/// How many times and how long to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: usize,
    /// The first backoff delay.
    pub min_delay: Duration,
    /// The largest backoff delay.
    pub max_delay: Duration,
    /// The longest `Retry-After` we wait out; longer ones end the retries.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 4,
            min_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// Runs `attempt` until it succeeds, fails for good, or the retries run out.
    pub(crate) async fn run<T, F, Fut>(
        &self,
        operation: &'static str,
        attempt: F,
    ) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_retries)
            .with_jitter();
        let max_retry_after = self.max_retry_after;
        attempt
            .retry(backoff)
            .when(is_retryable)
            .adjust(move |err, backoff_delay| {
                // `None` from the backoff means the attempts are used up.
                let backoff_delay = backoff_delay?;
                match retry_after(err) {
                    Some(wait) if wait > max_retry_after => None,
                    Some(wait) => Some(wait),
                    None => Some(backoff_delay),
                }
            })
            .notify(|err, wait| {
                tracing::warn!(operation, error = %err, ?wait, "GitLab call failed; retrying");
            })
            .await
    }
}

/// Whether another attempt may succeed.
pub(crate) fn is_retryable(err: &Error) -> bool {
    match err {
        Error::Http { status, .. } => *status >= 500,
        Error::RateLimited { .. } => true,
        Error::Transport(e) => !e.is_builder() && !e.is_decode(),
        Error::Graphql { .. }
        | Error::BudgetExhausted(_)
        | Error::Decode { .. }
        | Error::Redirected { .. }
        | Error::TooLarge { .. }
        | Error::Auth { .. } => false,
    }
}

fn retry_after(err: &Error) -> Option<Duration> {
    match err {
        Error::Http { retry_after, .. } | Error::RateLimited { retry_after, .. } => *retry_after,
        _ => None,
    }
}
