//! Which of the client's failures are worth another try; the one retry policy (backoff,
//! `Retry-After`, bounds) is vendor-http's.
//!
//! Retried: 5xx, secondary rate limits (403/429 with `Retry-After`, or 429 without), and
//! transport failures. Everything else, 401 and 404 included, fails at once.

use std::time::Duration;

pub use vendor_http::RetryPolicy;
use vendor_http::RetryableError;

use crate::error::{Error, RateLimitKind};

impl RetryableError for Error {
    const VENDOR: &'static str = "GitHub";

    fn is_retryable(&self) -> bool {
        match self {
            Error::Http { status, .. } => *status >= 500,
            Error::RateLimited { kind, .. } => *kind == RateLimitKind::Secondary,
            Error::Transport(e) => !e.is_builder() && !e.is_decode(),
            Error::Graphql { .. }
            | Error::BudgetExhausted(_)
            | Error::Decode { .. }
            | Error::Redirected { .. }
            | Error::TooLarge { .. }
            | Error::Unreachable(_)
            | Error::Deadline { .. }
            | Error::Incomplete { .. }
            | Error::Forbidden { .. }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn fast() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
            max_retry_after: Duration::from_secs(2),
            deadline: vendor_http::DEFAULT_CALL_DEADLINE,
        }
    }

    fn http(status: u16, retry_after: Option<Duration>) -> Error {
        Error::Http {
            status,
            message: "x".into(),
            retry_after,
        }
    }

    async fn count_attempts(policy: RetryPolicy, make: impl Fn() -> Error) -> (usize, Error) {
        let attempts = Arc::new(AtomicUsize::new(0));
        let err = policy
            .run("test", || {
                attempts.fetch_add(1, Ordering::SeqCst);
                let err = make();
                async move { Err::<(), _>(err) }
            })
            .await
            .unwrap_err();
        (attempts.load(Ordering::SeqCst), err)
    }

    #[tokio::test]
    async fn server_errors_are_retried_a_bounded_number_of_times() {
        let (attempts, err) = count_attempts(fast(), || http(502, None)).await;
        assert_eq!(attempts, 4, "one attempt and three retries");
        assert!(matches!(err, Error::Http { status: 502, .. }));
    }

    #[tokio::test]
    async fn client_errors_are_not_retried() {
        for status in [400, 403, 404, 422] {
            let (attempts, _) = count_attempts(fast(), || http(status, None)).await;
            assert_eq!(attempts, 1, "HTTP {status}");
        }
        let (attempts, _) = count_attempts(fast(), || Error::Auth {
            status: Some(401),
            message: "Bad credentials".into(),
        })
        .await;
        assert_eq!(attempts, 1, "401");
    }

    #[tokio::test]
    async fn primary_rate_limit_is_not_retried_but_secondary_is() {
        let limited = |kind| Error::RateLimited {
            kind,
            reset_at: None,
            retry_after: None,
            message: "slow down".into(),
        };
        let (attempts, _) = count_attempts(fast(), || limited(RateLimitKind::Primary)).await;
        assert_eq!(attempts, 1);
        let (attempts, _) = count_attempts(fast(), || limited(RateLimitKind::Secondary)).await;
        assert_eq!(attempts, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_honoured() {
        let started = tokio::time::Instant::now();
        let (attempts, _) = count_attempts(fast(), || Error::RateLimited {
            kind: RateLimitKind::Secondary,
            reset_at: None,
            retry_after: Some(Duration::from_secs(1)),
            message: "secondary".into(),
        })
        .await;
        assert_eq!(attempts, 4);
        // Three waits of the full second, though the backoff alone would wait milliseconds.
        assert!(
            started.elapsed() >= Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_retry_after_beyond_the_cap_ends_the_retries() {
        let (attempts, _) =
            count_attempts(fast(), || http(503, Some(Duration::from_secs(60)))).await;
        assert_eq!(attempts, 1);
    }

    /// A server that stalls (each attempt slower than the deadline) or asks for a wait the
    /// deadline cannot hold: the call ends at its deadline, or at once, as a deadline error, so
    /// a slow vendor holds a job slot or webhook worker no longer than that.
    #[tokio::test]
    async fn a_call_ends_at_its_deadline_whatever_the_server_does() {
        let policy = RetryPolicy {
            deadline: Duration::from_millis(300),
            max_retry_after: Duration::from_secs(120),
            ..fast()
        };
        let started = std::time::Instant::now();
        let err = policy
            .run("stall", || async {
                tokio::time::sleep(Duration::from_secs(25)).await;
                Ok::<(), Error>(())
            })
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Deadline {
                    operation: "stall",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));

        // 503 with Retry-After: 120 against a 300 ms deadline: not waited out at all.
        let started = std::time::Instant::now();
        let (attempts, err) =
            count_attempts(policy, || http(503, Some(Duration::from_secs(120)))).await;
        assert_eq!(attempts, 1, "a wait past the deadline was taken");
        assert!(matches!(err, Error::Http { status: 503, .. }), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
