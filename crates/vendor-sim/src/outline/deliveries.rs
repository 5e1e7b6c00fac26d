//! Webhook deliveries as Outline sends them: each change's body is POSTed to every subscription
//! that takes its event, signed with the subscription's secret when it has one
//! (`Outline-Signature: t=<unix ms>,s=<hex HMAC-SHA256(secret, "<t>.<body>")>`). One attempt
//! each, in the order of the changes.
//!
//! For tests the [`DeliveryPlan`] sends each delivery more than once, or holds deliveries back
//! until [`super::OutlineSim::release`] sends them in another [`Order`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{KeyInit as _, Mac as _};
use reqwest::header::{HeaderMap, HeaderValue};

use super::model::{Model, QueuedDelivery};
use super::server::lock;

/// The signature header's name.
pub const SIGNATURE_HEADER: &str = "outline-signature";

/// `<hex HMAC-SHA256(secret, "<t>.<body>")>`, the `s` part of the header.
pub fn signature(secret: &[u8], timestamp_ms: i64, body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(format!("{timestamp_ms}.").as_bytes());
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// `t=<timestamp_ms>,s=<signature>`, the `Outline-Signature` value.
pub fn signature_header(secret: &[u8], timestamp_ms: i64, body: &[u8]) -> String {
    format!(
        "t={timestamp_ms},s={}",
        signature(secret, timestamp_ms, body)
    )
}

/// The headers Outline sends a delivery with: content type, user agent, and
/// `Outline-Signature` when `secret` is given.
pub fn signed_headers(secret: Option<&[u8]>, timestamp_ms: i64, body: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h.insert("user-agent", HeaderValue::from_static("Outline-Webhooks"));
    if let Some(secret) = secret
        && let Ok(v) = HeaderValue::from_str(&signature_header(secret, timestamp_ms, body))
    {
        h.insert(SIGNATURE_HEADER, v);
    }
    h
}

/// The system clock in Unix milliseconds, what a signature's `t` carries.
pub fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

/// How deliveries leave, from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryPlan {
    /// Each delivery is sent this many times (a fresh signature each time).
    pub copies: u32,
    /// Copies after the first carry a new delivery `id`, as when Outline runs a delivery's task
    /// twice (each run is its own delivery); otherwise they repeat the body byte for byte, which
    /// a receiver's dedup on the delivery id absorbs.
    pub fresh_copy_ids: bool,
    /// Deliveries wait until [`super::OutlineSim::release`] instead of leaving at once.
    pub hold: bool,
    /// How long a receiver has to answer.
    pub timeout: Duration,
}

impl Default for DeliveryPlan {
    fn default() -> Self {
        Self {
            copies: 1,
            fresh_copy_ids: false,
            hold: false,
            timeout: Duration::from_secs(10),
        }
    }
}

/// The order held deliveries are released in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The order of the changes.
    InOrder,
    /// Newest first.
    Reversed,
    /// A shuffle, the same for the same seed.
    Shuffled(u64),
}

/// One attempt to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryAttempt {
    /// The delivery's `id` (the same on every copy).
    pub delivery_id: String,
    /// `webhookSubscriptionId`.
    pub subscription_id: String,
    /// `event`.
    pub event: String,
    /// Where it went.
    pub url: String,
    /// The receiver's status; `None` when it timed out or could not be reached.
    pub status: Option<u16>,
    /// Why it failed (`timeout`, `connect`, `http_error`, ...); `None` on a 2xx.
    pub failure: Option<String>,
    /// The `Outline-Signature` sent (none without a secret).
    pub signature: Option<String>,
    /// The body sent.
    pub body: Vec<u8>,
}

impl DeliveryAttempt {
    /// Whether the receiver answered 2xx.
    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }
}

/// A delivery bound to where it goes, as it was when the change happened.
#[derive(Debug, Clone)]
struct Prepared {
    id: String,
    subscription_id: String,
    event: String,
    url: String,
    secret: Option<Vec<u8>>,
    body: Vec<u8>,
}

/// The sending side: the plan, held deliveries and attempts so far.
pub(crate) struct Outbox {
    http: reqwest::Client,
    plan: Mutex<DeliveryPlan>,
    held: Mutex<Vec<Prepared>>,
    sent: Mutex<HashMap<String, Prepared>>,
    attempts: Mutex<Vec<DeliveryAttempt>>,
    /// Wakes the sender when a change queued deliveries.
    pub queued: tokio::sync::Notify,
    /// One sender at a time, so deliveries leave in the order of the changes.
    sending: tokio::sync::Mutex<()>,
}

impl Outbox {
    pub fn new() -> Self {
        Self {
            http: reqwest::Client::new(),
            plan: Mutex::new(DeliveryPlan::default()),
            held: Mutex::new(Vec::new()),
            sent: Mutex::new(HashMap::new()),
            attempts: Mutex::new(Vec::new()),
            queued: tokio::sync::Notify::new(),
            sending: tokio::sync::Mutex::new(()),
        }
    }

    pub fn set_plan(&self, plan: DeliveryPlan) {
        *lock(&self.plan) = plan;
    }

    pub fn plan(&self) -> DeliveryPlan {
        *lock(&self.plan)
    }

    /// Sends (or holds) what the model queued so far, in order.
    pub async fn pump(self: &Arc<Self>, model: &Mutex<Model>) {
        let _one_sender = self.sending.lock().await;
        let prepared: Vec<Prepared> = {
            let mut m = lock(model);
            let queued = m.take_deliveries();
            queued.into_iter().filter_map(|q| prepare(&m, q)).collect()
        };
        if prepared.is_empty() {
            return;
        }
        if self.plan().hold {
            lock(&self.held).extend(prepared);
            return;
        }
        for p in prepared {
            self.send(&p).await;
        }
    }

    /// Sends the held deliveries in `order`; how many.
    pub async fn release(&self, order: Order) -> usize {
        let _one_sender = self.sending.lock().await;
        let mut held = std::mem::take(&mut *lock(&self.held));
        match order {
            Order::InOrder => {}
            Order::Reversed => held.reverse(),
            Order::Shuffled(seed) => shuffle(&mut held, seed),
        }
        for p in &held {
            self.send(p).await;
        }
        held.len()
    }

    /// How many deliveries are held.
    pub fn held(&self) -> usize {
        lock(&self.held).len()
    }

    /// Sends a delivery sent before once more; whether it was known.
    pub async fn redeliver(&self, delivery_id: &str) -> bool {
        let Some(p) = lock(&self.sent).get(delivery_id).cloned() else {
            return false;
        };
        let _one_sender = self.sending.lock().await;
        self.attempt(&p).await;
        true
    }

    /// Whether nothing is queued or being sent (held deliveries wait for a release).
    pub fn idle(&self, model: &Mutex<Model>) -> bool {
        lock(model).deliveries.is_empty() && self.sending.try_lock().is_ok()
    }

    async fn send(&self, p: &Prepared) {
        let plan = self.plan();
        for n in 0..plan.copies.max(1) {
            let copy = if n > 0 && plan.fresh_copy_ids {
                renamed(p)
            } else {
                p.clone()
            };
            lock(&self.sent).insert(copy.id.clone(), copy.clone());
            self.attempt(&copy).await;
        }
    }

    async fn attempt(&self, p: &Prepared) {
        let headers = signed_headers(p.secret.as_deref(), unix_ms(), &p.body);
        let signature = headers
            .get(SIGNATURE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let sent = self
            .http
            .post(&p.url)
            .timeout(self.plan().timeout)
            .headers(headers)
            .body(p.body.clone())
            .send()
            .await;
        let (status, failure) = match sent {
            Ok(r) => {
                let status = r.status();
                let read = r.bytes().await;
                let failure = match read {
                    Ok(_) if status.is_success() => None,
                    Ok(_) => Some("http_error".to_owned()),
                    Err(e) => Some(format!("read: {e}")),
                };
                (Some(status.as_u16()), failure)
            }
            Err(e) if e.is_timeout() => (None, Some("timeout".to_owned())),
            Err(e) if e.is_connect() => (None, Some("connect".to_owned())),
            Err(e) => (None, Some(e.to_string())),
        };
        if let Some(f) = &failure {
            tracing::debug!(delivery = %p.id, event = %p.event, failure = %f, "outline simulator: delivery failed");
        }
        lock(&self.attempts).push(DeliveryAttempt {
            delivery_id: p.id.clone(),
            subscription_id: p.subscription_id.clone(),
            event: p.event.clone(),
            url: p.url.clone(),
            status,
            failure,
            signature,
            body: p.body.clone(),
        });
    }

    pub fn attempts(&self) -> Vec<DeliveryAttempt> {
        lock(&self.attempts).clone()
    }
}

/// Binds a queued delivery to its subscription's URL and secret; none when the subscription
/// is gone.
fn prepare(m: &Model, q: QueuedDelivery) -> Option<Prepared> {
    let s = m.subscription(&q.subscription_id)?;
    Some(Prepared {
        id: q.id,
        subscription_id: q.subscription_id,
        event: q.event,
        url: s.url.clone(),
        secret: s.secret.as_ref().map(|s| s.as_bytes().to_vec()),
        body: serde_json::to_vec(&q.body).unwrap_or_default(),
    })
}

/// The same delivery under a new `id`.
fn renamed(p: &Prepared) -> Prepared {
    let id = uuid::Uuid::new_v4().to_string();
    let mut body: serde_json::Value = serde_json::from_slice(&p.body).unwrap_or_default();
    body["id"] = serde_json::Value::String(id.clone());
    Prepared {
        id,
        body: serde_json::to_vec(&body).unwrap_or_default(),
        ..p.clone()
    }
}

/// Fisher-Yates over xorshift64*, seeded: the same seed gives the same order.
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..items.len()).rev() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        items.swap(i, (r % (i as u64 + 1)) as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_t_then_the_hmac_of_t_dot_body() {
        // HMAC-SHA256("k", "1700000000000.{}"), computed independently.
        let want = "eec42247bc49c051fec352ebafa4f9b4ed1189fd7fef74e33988666a2c97b905";
        assert_eq!(
            signature_header(b"k", 1_700_000_000_000, b"{}"),
            format!("t=1700000000000,s={want}")
        );
        let h = signed_headers(None, 1, b"{}");
        assert!(h.get(SIGNATURE_HEADER).is_none(), "no secret, no signature");
    }

    #[test]
    fn a_shuffle_is_a_permutation_fixed_by_its_seed() {
        let mut a: Vec<u32> = (0..20).collect();
        let mut b = a.clone();
        shuffle(&mut a, 7);
        shuffle(&mut b, 7);
        assert_eq!(a, b);
        assert_ne!(a, (0..20).collect::<Vec<_>>());
        a.sort();
        assert_eq!(a, (0..20).collect::<Vec<_>>());
    }
}
