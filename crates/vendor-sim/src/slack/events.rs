//! The Events API as Slack sends it: each change's `event_callback` envelope is POSTed to the
//! app's Request URL, signed with the app's signing secret (`X-Slack-Request-Timestamp`,
//! `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>">`). A delivery without a
//! 2xx within the timeout (3 s) is retried at once, after a minute and after five, each retry
//! naming itself in `X-Slack-Retry-Num` and `X-Slack-Retry-Reason`; a receiver answering
//! `X-Slack-No-Retry: 1` gets no retries. The [`RetrySchedule`] compresses those times for tests.
//!
//! First attempts leave in the order of the changes; retries run beside later events, as at
//! Slack, so a receiver sees a failed event again after newer ones.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{KeyInit as _, Mac as _};
use reqwest::header::{HeaderMap, HeaderValue};

use super::model::{Model, QueuedEvent};
use super::server::lock;

/// `v0=<hex HMAC-SHA256(secret, "v0:<timestamp>:<body>")>`, the `X-Slack-Signature` value.
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// The headers Slack signs a request with: content type, `X-Slack-Request-Timestamp` and
/// `X-Slack-Signature` for `body` at `timestamp` (Unix seconds).
pub fn signed_headers(secret: &[u8], timestamp: i64, body: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h.insert(
        "user-agent",
        HeaderValue::from_static("Slackbot 1.0 (+https://api.slack.com/robots)"),
    );
    h.insert("x-slack-request-timestamp", HeaderValue::from(timestamp));
    if let Ok(v) = HeaderValue::from_str(&signature(secret, timestamp, body)) {
        h.insert("x-slack-signature", v);
    }
    h
}

/// The system clock in Unix seconds: what a receiver checks a request's freshness against.
pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64
}

/// How long Slack waits for a receiver, and when it retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule {
    /// No 2xx within this is a failure (`http_timeout`); 3 s at Slack.
    pub timeout: Duration,
    /// The wait before each retry, after the failure before it: at once, a minute, five
    /// minutes at Slack. Its length is the number of retries.
    pub delays: Vec<Duration>,
}

impl Default for RetrySchedule {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(3),
            delays: vec![
                Duration::ZERO,
                Duration::from_secs(60),
                Duration::from_secs(300),
            ],
        }
    }
}

impl RetrySchedule {
    /// Slack's schedule with every wait (the timeout too) multiplied by `scale`
    /// (`0.01`: a 30 ms timeout, retries after 0, 0.6 s and 3 s).
    pub fn time_scale(scale: f64) -> Self {
        let s = Self::default();
        Self {
            timeout: s.timeout.mul_f64(scale),
            delays: s.delays.iter().map(|d| d.mul_f64(scale)).collect(),
        }
    }
}

/// Where events go: the app's Request URL and signing secret.
#[derive(Debug, Clone)]
pub(crate) struct Subscription {
    pub url: String,
    pub secret: Vec<u8>,
}

/// One attempt to deliver an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventAttempt {
    /// `event_id` (`Ev...`), the same on every attempt.
    pub event_id: String,
    /// `team_id`.
    pub team_id: String,
    /// The event's `type`, with its subtype after a dot (`message.message_changed`).
    pub event_type: String,
    /// 0 for the first attempt, else `X-Slack-Retry-Num`.
    pub retry_num: u32,
    /// `X-Slack-Retry-Reason` sent (retries only).
    pub retry_reason: Option<String>,
    /// The receiver's status; `None` when it timed out or could not be reached.
    pub status: Option<u16>,
    /// Why it failed, as the next retry will say (`http_timeout`, `http_error`,
    /// `connection_failed`); `None` on success.
    pub failure: Option<&'static str>,
    /// The body sent (the same bytes on every attempt; the signature differs).
    pub body: Vec<u8>,
}

impl EventAttempt {
    /// Whether Slack counts it as delivered.
    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
    }
}

/// The sending side: the subscription, attempts so far, and the work in progress.
pub(crate) struct Outbox {
    http: reqwest::Client,
    subscription: Mutex<Option<Subscription>>,
    schedule: Mutex<RetrySchedule>,
    attempts: Mutex<Vec<EventAttempt>>,
    /// Events whose retries are still to come.
    retrying: AtomicUsize,
    /// The tasks making them, stopped with the simulator.
    retry_tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Wakes the sender when a change queued events.
    pub queued: tokio::sync::Notify,
    /// One sender at a time, so first attempts leave in the order of the changes.
    sending: tokio::sync::Mutex<()>,
}

/// What one attempt came to.
enum Outcome {
    Delivered,
    Failed(&'static str),
    /// Failed, and the receiver asked for no retries.
    NoRetry,
}

impl Outbox {
    pub fn new() -> Self {
        Self {
            http: reqwest::Client::new(),
            subscription: Mutex::new(None),
            schedule: Mutex::new(RetrySchedule::default()),
            attempts: Mutex::new(Vec::new()),
            retrying: AtomicUsize::new(0),
            retry_tasks: Mutex::new(Vec::new()),
            queued: tokio::sync::Notify::new(),
            sending: tokio::sync::Mutex::new(()),
        }
    }

    /// Sends the events queued so far, in order (waiting for a send in progress); a failed one
    /// is retried in the background.
    pub async fn pump(self: &Arc<Self>, model: &Mutex<Model>) {
        let _one_sender = self.sending.lock().await;
        let queued = lock(model).take_events();
        for event in queued {
            // Events of a change made while nobody listened are gone, as at Slack.
            let Some(sub) = self.subscription() else {
                continue;
            };
            let body = serde_json::to_vec(&event.envelope).unwrap_or_default();
            if let Outcome::Failed(reason) = self.attempt(&sub, &event, &body, 0, None).await {
                self.retrying.fetch_add(1, Ordering::SeqCst);
                let outbox = self.clone();
                let task = tokio::spawn(async move {
                    outbox.retry(sub, event, body, reason).await;
                    outbox.retrying.fetch_sub(1, Ordering::SeqCst);
                });
                let mut tasks = lock(&self.retry_tasks);
                tasks.retain(|t| !t.is_finished());
                tasks.push(task);
            }
        }
    }

    async fn retry(&self, sub: Subscription, event: QueuedEvent, body: Vec<u8>, first: &str) {
        let delays = lock(&self.schedule).delays.clone();
        let mut reason = first.to_owned();
        for (n, delay) in (1u32..).zip(delays) {
            tokio::time::sleep(delay).await;
            match self.attempt(&sub, &event, &body, n, Some(&reason)).await {
                Outcome::Failed(r) => reason = r.to_owned(),
                Outcome::Delivered | Outcome::NoRetry => return,
            }
        }
    }

    /// Stops the retries still to come.
    pub fn abort_retries(&self) {
        for task in lock(&self.retry_tasks).drain(..) {
            task.abort();
        }
    }

    /// Whether nothing is queued, being sent or waiting for a retry.
    pub fn idle(&self, model: &Mutex<Model>) -> bool {
        lock(model).events.is_empty()
            && self.retrying.load(Ordering::SeqCst) == 0
            && self.sending.try_lock().is_ok()
    }

    async fn attempt(
        &self,
        sub: &Subscription,
        event: &QueuedEvent,
        body: &[u8],
        retry_num: u32,
        retry_reason: Option<&str>,
    ) -> Outcome {
        let timeout = lock(&self.schedule).timeout;
        let retry = retry_reason.map(|reason| (retry_num, reason));
        let sent = self.request(sub, body, retry).send().await;
        let (status, no_retry, failure) = match sent {
            Ok(response) => {
                let status = response.status();
                let no_retry = response
                    .headers()
                    .get("x-slack-no-retry")
                    .is_some_and(|v| v.as_bytes() == b"1");
                // The whole answer must arrive within the timeout too.
                let read = tokio::time::timeout(timeout, response.bytes()).await;
                let failure = match read {
                    Ok(Ok(_)) if status.is_success() => None,
                    Ok(Ok(_)) => Some("http_error"),
                    Ok(Err(_)) | Err(_) => Some("http_timeout"),
                };
                (Some(status.as_u16()), no_retry, failure)
            }
            Err(e) if e.is_timeout() => (None, false, Some("http_timeout")),
            Err(e) if e.is_connect() => (None, false, Some("connection_failed")),
            Err(_) => (None, false, Some("unknown_error")),
        };
        lock(&self.attempts).push(EventAttempt {
            event_id: event.event_id.clone(),
            team_id: event.team_id.clone(),
            event_type: event.event_type.clone(),
            retry_num,
            retry_reason: retry_reason.map(str::to_owned),
            status,
            failure,
            body: body.to_vec(),
        });
        match failure {
            None => Outcome::Delivered,
            Some(_) if no_retry => Outcome::NoRetry,
            Some(reason) => Outcome::Failed(reason),
        }
    }

    /// The signed POST of `body` to the subscription's URL, as retry `n` with its reason when
    /// `retry` is given, with the schedule's timeout.
    fn request(
        &self,
        sub: &Subscription,
        body: &[u8],
        retry: Option<(u32, &str)>,
    ) -> reqwest::RequestBuilder {
        let mut headers = signed_headers(&sub.secret, unix_now(), body);
        if let Some((n, reason)) = retry {
            headers.insert("x-slack-retry-num", HeaderValue::from(n));
            if let Ok(v) = HeaderValue::from_str(reason) {
                headers.insert("x-slack-retry-reason", v);
            }
        }
        let timeout = lock(&self.schedule).timeout;
        self.http
            .post(&sub.url)
            .timeout(timeout)
            .headers(headers)
            .body(body.to_vec())
    }

    /// Where events go from now on (`None`: nowhere).
    pub fn subscribe(&self, to: Option<Subscription>) {
        *lock(&self.subscription) = to;
    }

    /// Where events go.
    pub fn subscription(&self) -> Option<Subscription> {
        lock(&self.subscription).clone()
    }

    /// The timeout and retry waits from now on.
    pub fn set_schedule(&self, schedule: RetrySchedule) {
        *lock(&self.schedule) = schedule;
    }

    /// Every attempt so far.
    pub fn attempts(&self) -> Vec<EventAttempt> {
        lock(&self.attempts).clone()
    }

    /// POSTs `body` to the Request URL signed now, as a retry when `retry` is given; the
    /// receiver's status and answer. Not recorded among the attempts.
    pub async fn send_raw(
        &self,
        body: &[u8],
        retry: Option<(u32, &str)>,
    ) -> Result<(reqwest::StatusCode, Vec<u8>), SendError> {
        let sub = self.subscription().ok_or(SendError::NoSubscription)?;
        let response = self
            .request(&sub, body, retry)
            .send()
            .await
            .map_err(SendError::Http)?;
        let status = response.status();
        let answer = response.bytes().await.map_err(SendError::Http)?;
        Ok((status, answer.to_vec()))
    }
}

/// Why a crafted delivery could not be sent.
#[derive(Debug)]
pub enum SendError {
    /// No Request URL: call `subscribe_events` first.
    NoSubscription,
    /// The request failed.
    Http(reqwest::Error),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::NoSubscription => f.write_str("no event subscription: subscribe first"),
            SendError::Http(e) => write!(f, "delivery failed: {e}"),
        }
    }
}

impl std::error::Error for SendError {}
