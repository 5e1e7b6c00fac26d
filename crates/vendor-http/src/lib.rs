//! Transport policy every vendor client shares (we hand-write only transport policy, so it is
//! written once): which failures get another try and how long to wait before it, bodies read
//! under a cap, the numeric headers vendors send, and the quota gauges ([`quota`]).
//!
//! Retried, a bounded number of times with exponential backoff and jitter: whatever the
//! client's error says is retryable (5xx, throttling, transport failures). A vendor's
//! `Retry-After` overrides the backoff; one longer than [`RetryPolicy::max_retry_after`] ends the
//! retries, since holding a job that long is worse than stopping it cleanly. A call has one
//! deadline for all its attempts and waits ([`RetryPolicy::deadline`], 60 s by default).
#![forbid(unsafe_code)]

pub mod egress;
pub mod quota;

use std::future::Future;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use reqwest::header::{HeaderMap, RETRY_AFTER};

/// Why a capped body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// Larger than the cap; nothing of it is used.
    TooLarge,
    /// The body broke off.
    Transport(reqwest::Error),
}

/// The body, read up to `max_bytes`; a larger one is refused before or while it streams in
/// (a vendor answer must not exhaust our memory).
pub async fn read_capped(
    mut response: reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, BodyError> {
    if response
        .content_length()
        .is_some_and(|n| n > max_bytes as u64)
    {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Transport)? {
        if body.len() + chunk.len() > max_bytes {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A header holding a decimal number; absent or unparsable is `None`, never zero.
pub fn header_number<T: std::str::FromStr>(headers: &HeaderMap, name: &str) -> Option<T> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// `Retry-After` in seconds; a fraction (Outline computes it from milliseconds) is rounded up.
/// An HTTP date, a negative or an unparsable value falls back to our backoff.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: f64 = header_number(headers, RETRY_AFTER.as_str())?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs(seconds.ceil() as u64))
}

/// `text` with every double-quoted part replaced by `"…"`: a decoder's error names the value
/// it could not decode, which may be a tenant's content, and must not reach a log or a reason.
pub fn mask_quoted(text: &str) -> String {
    let mut masked = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        masked.push(c);
        if c == '"' {
            masked.push('…');
            while let Some(inner) = chars.next() {
                match inner {
                    '\\' => {
                        chars.next();
                    }
                    '"' => {
                        masked.push('"');
                        break;
                    }
                    _ => {}
                }
            }
        }
    }
    masked
}

/// A client error the policy can judge.
pub trait RetryableError: std::fmt::Display {
    /// The vendor, for the retry log line ("GitHub", "GitLab").
    const VENDOR: &'static str;

    /// Whether another attempt may succeed.
    fn is_retryable(&self) -> bool;

    /// How long the vendor asked us to wait, when it said.
    fn retry_after(&self) -> Option<Duration>;

    /// The call, retries included, took longer than its deadline.
    fn deadline_passed(operation: &'static str, deadline: Duration) -> Self;
}

/// The deadline of a vendor call with its retries when none is set.
pub const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(60);

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
    /// The longest a call may take, every attempt and wait included: a slow or stalling server
    /// holds a job slot or a webhook worker no longer than this.
    pub deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 4,
            min_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
            deadline: DEFAULT_CALL_DEADLINE,
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

    /// Runs `attempt` until it succeeds, fails for good, or the retries run out, inside one
    /// client span for the call (the vendor, `operation`, how many attempts it took; the client
    /// adds the cost with [`record_cost`]).
    pub async fn run<T, E, F, Fut>(&self, operation: &'static str, mut attempt: F) -> Result<T, E>
    where
        E: RetryableError,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        use tracing::Instrument as _;
        let span = tracing::info_span!(
            "vendor call",
            otel.name = %format_args!("{} {operation}", E::VENDOR),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            vendor = E::VENDOR,
            operation,
            attempts = tracing::field::Empty,
            cost = tracing::field::Empty,
            rate_limit_remaining = tracing::field::Empty,
        );
        let attempts = std::sync::atomic::AtomicU32::new(0);
        let counted = || {
            attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            attempt()
        };
        let deadline = self.deadline;
        let result = match tokio::time::timeout(
            deadline,
            self.retry(operation, counted).instrument(span.clone()),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!(parent: &span, operation, ?deadline, "{} call passed its deadline", E::VENDOR);
                Err(E::deadline_passed(operation, deadline))
            }
        };
        span.record(
            "attempts",
            attempts.load(std::sync::atomic::Ordering::Relaxed),
        );
        if result.is_err() {
            span.record("otel.status_code", "ERROR");
        }
        result
    }

    async fn retry<T, E, F, Fut>(&self, operation: &'static str, attempt: F) -> Result<T, E>
    where
        E: RetryableError,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_retries)
            .with_jitter();
        let max_retry_after = self.max_retry_after;
        // A wait that would end past the deadline ends the retries now instead.
        let ends = std::time::Instant::now() + self.deadline;
        attempt
            .retry(backoff)
            .when(E::is_retryable)
            .adjust(move |err: &E, backoff_delay| {
                // `None` from the backoff means the attempts are used up.
                let backoff_delay = backoff_delay?;
                let wait = match err.retry_after() {
                    Some(wait) if wait > max_retry_after => return None,
                    Some(wait) => wait,
                    None => backoff_delay,
                };
                (std::time::Instant::now() + wait < ends).then_some(wait)
            })
            .notify(|err: &E, wait| {
                tracing::warn!(operation, error = %err, ?wait, "{} call failed; retrying", E::VENDOR);
            })
            .await
    }
}

/// Records on a call's client span (the current span inside an attempt of
/// [`RetryPolicy::run`]) what the call cost and what the vendor says is left.
pub fn record_cost(span: &tracing::Span, cost: u64, remaining: Option<u64>) {
    span.record("cost", cost);
    if let Some(remaining) = remaining {
        span.record("rate_limit_remaining", remaining);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_in_whole_or_fractional_seconds() {
        let wait = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                RETRY_AFTER,
                reqwest::header::HeaderValue::from_static(value),
            );
            retry_after(&headers)
        };
        assert_eq!(wait("3"), Some(Duration::from_secs(3)));
        assert_eq!(wait(" 1.2 "), Some(Duration::from_secs(2)));
        assert_eq!(wait("Fri, 04 Dec 2026 23:00:00 GMT"), None);
        assert_eq!(wait("-1"), None);
        assert_eq!(wait("NaN"), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn decoding_errors_do_not_carry_values() {
        assert_eq!(
            mask_quoted(r#"invalid type: string "secret \"text\"", expected u32 at line 1"#),
            r#"invalid type: string "…", expected u32 at line 1"#
        );
        assert_eq!(
            mask_quoted("missing field `ts` at line 1 column 9"),
            "missing field `ts` at line 1 column 9"
        );
    }
}
