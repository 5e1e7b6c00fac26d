//! Hints: deliveries signed by a secret a tenant chose or was shown ([`Claim::Hint`]). Anyone in
//! that workspace could have written one, dated it 2099 or called an open request merged, and
//! the rows it names are shared with every workspace that monitors the same repository. So a
//! hint writes nothing of its own: the vendor re-reads what it names (an item, with the comments
//! and reviews under it) with the delivering connection's credentials, and what the vendor
//! returns goes through the same forward-only writes a sync uses, events included. A read that
//! fails writes nothing and is recorded as connection activity (`hint_unconfirmed`); the next
//! reconcile heals what it missed.
//!
//! Reads are coalesced per item: a confirming read waits a short window before it asks, and
//! every hint about the same item that reached this consumer before the read began is answered
//! by it (what the vendor shows then is at least as new as what any of them could claim), so a
//! burst of hints costs one read, not one per delivery. Both instants are this process's
//! monotonic clock, so no skew between servers can answer a hint with an older read. A
//! connection has at most a few confirming reads under way in a replica; past that a hint is
//! redelivered later rather than holding a worker every tenant shares.
//!
//! Counted in `webhook_hints_total{vendor, outcome}` (`read`, `coalesced`, `deferred`) and
//! `webhook_hint_confirmations_total{vendor, outcome}` (`applied`, `unchanged`, `unconfirmed`).
//!
//! [`Claim::Hint`]: super::Claim::Hint

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use uuid::Uuid;

use super::{Outcome, Webhook, WebhookError};

/// How long a confirming read waits for more hints about its item before it asks the vendor.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(500);

/// Confirming reads one connection may have under way in this replica. A tenant hinting at many
/// items (or whose server answers slowly) holds at most this many of the webhook workers every
/// tenant shares; past it a hint is handed back to be redelivered later.
pub const DEFAULT_READS_PER_CONNECTION: usize = 4;

/// How long a finished read is remembered for coalescing.
const REMEMBERED: Duration = Duration::from_secs(120);

/// What a confirming read came to.
#[derive(Debug)]
pub enum Confirmation {
    /// The vendor answered and its answer went through the forward-only writes.
    Written(Outcome),
    /// Nothing was written, for this reason (the read failed, the vendor does not show the item
    /// to this connection, the repository is not mirrored yet).
    Unconfirmed(String),
}

/// The per-item memory of confirming reads, one per consumer.
pub struct Confirmations {
    vendor: &'static str,
    window: Duration,
    items: Mutex<Items>,
    reads_per_connection: usize,
    /// Confirming reads under way, by connection.
    reading: Arc<Mutex<HashMap<Uuid, usize>>>,
}

struct Items {
    slots: HashMap<String, Arc<tokio::sync::Mutex<Slot>>>,
    /// When idle slots were last forgotten.
    swept: Instant,
}

#[derive(Default)]
struct Slot {
    /// When the last read that wrote what the vendor returned began.
    confirmed_from: Option<Instant>,
}

impl Confirmations {
    /// An empty memory with the default window; `vendor` labels the metrics.
    pub fn new(vendor: &'static str) -> Self {
        Confirmations {
            vendor,
            window: DEFAULT_WINDOW,
            items: Mutex::new(Items {
                slots: HashMap::new(),
                swept: Instant::now(),
            }),
            reads_per_connection: DEFAULT_READS_PER_CONNECTION,
            reading: Arc::default(),
        }
    }

    /// The same memory, letting a connection have `n` confirming reads under way.
    pub fn with_reads_per_connection(self, n: usize) -> Self {
        Confirmations {
            reads_per_connection: n.max(1),
            ..self
        }
    }

    /// The same memory, waiting `window` for more hints before each read.
    pub fn with_window(self, window: Duration) -> Self {
        Confirmations { window, ..self }
    }

    /// Confirms `hook`, a hint about the item `key` names, by `read` (the vendor's read and the
    /// forward-only write of what it returned), unless a read of that item that began after the
    /// hint arrived here already confirmed it. Hints about one item wait for each other, so
    /// those that arrive while one waits out its window are answered by its read.
    pub async fn confirm<F, Fut>(
        &self,
        pool: &PgPool,
        hook: &Webhook<'_>,
        key: String,
        read: F,
    ) -> Result<Outcome, WebhookError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Confirmation, WebhookError>>,
    {
        let vendor = self.vendor;
        let arrived = Instant::now();
        // Fairness first: a connection at its limit waits outside the shared workers.
        let Some(_reading) = self.start_reading(hook.connection_id) else {
            metrics::counter!("webhook_hints_total", "vendor" => vendor, "outcome" => "deferred")
                .increment(1);
            return Err(WebhookError::Unavailable(format!(
                "the connection has {} confirming reads under way; this hint waits its turn",
                self.reads_per_connection
            )));
        };
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        if slot.confirmed_from.is_some_and(|began| began > arrived) {
            metrics::counter!("webhook_hints_total", "vendor" => vendor, "outcome" => "coalesced")
                .increment(1);
            return Ok(Outcome::Unchanged);
        }
        metrics::counter!("webhook_hints_total", "vendor" => vendor, "outcome" => "read")
            .increment(1);
        // The burst this hint may be the first of reaches us while it waits.
        tokio::time::sleep(self.window).await;
        let began = Instant::now();
        let confirmation = read().await?;
        let confirmed = |outcome: &'static str| {
            metrics::counter!("webhook_hint_confirmations_total", "vendor" => vendor, "outcome" => outcome)
                .increment(1);
        };
        match confirmation {
            Confirmation::Written(outcome) => {
                slot.confirmed_from = Some(began);
                confirmed(match outcome {
                    Outcome::Applied => "applied",
                    Outcome::Unchanged | Outcome::Ignored | Outcome::Refused => "unchanged",
                });
                Ok(outcome)
            }
            Confirmation::Unconfirmed(reason) => unconfirmed(pool, hook, vendor, &reason).await,
        }
    }

    /// Counts a confirming read of `connection_id` until the guard drops; `None` at the limit.
    fn start_reading(&self, connection_id: Uuid) -> Option<Reading> {
        let mut reading = self.reading.lock().unwrap_or_else(|e| e.into_inner());
        let n = reading.entry(connection_id).or_default();
        if *n >= self.reads_per_connection {
            return None;
        }
        *n += 1;
        Some(Reading {
            reading: self.reading.clone(),
            connection_id,
        })
    }

    /// The slot of `key`, forgetting slots idle for longer than they are useful.
    fn slot(&self, key: String) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        // Bounded by the items hinted at within the last few minutes: a slot nobody holds whose
        // read is older than it is useful goes, once per period.
        if now.duration_since(items.swept) >= REMEMBERED {
            items.slots.retain(|_, slot| {
                Arc::strong_count(slot) > 1
                    || slot
                        .try_lock()
                        .map(|s| {
                            s.confirmed_from
                                .is_some_and(|at| now.duration_since(at) < REMEMBERED)
                        })
                        .unwrap_or(true)
            });
            items.swept = now;
        }
        items.slots.entry(key).or_default().clone()
    }
}

/// One confirming read under way, counted against its connection until dropped.
struct Reading {
    reading: Arc<Mutex<HashMap<Uuid, usize>>>,
    connection_id: Uuid,
}

impl Drop for Reading {
    fn drop(&mut self) {
        let mut reading = self.reading.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = reading.get_mut(&self.connection_id) {
            *n -= 1;
            if *n == 0 {
                reading.remove(&self.connection_id);
            }
        }
    }
}

/// Settles a hint nothing confirmed: nothing written, the reason recorded as the delivering
/// connection's activity (`hint_unconfirmed`) and counted. For a vendor with no confirming read
/// of what a delivery names, every hint ends here and its reconcile reads the vendor.
pub async fn unconfirmed(
    pool: &PgPool,
    hook: &Webhook<'_>,
    vendor: &'static str,
    reason: &str,
) -> Result<Outcome, WebhookError> {
    metrics::counter!("webhook_hint_confirmations_total", "vendor" => vendor, "outcome" => "unconfirmed")
        .increment(1);
    tracing::info!(vendor, connection_id = %hook.connection_id, event = hook.event, %reason,
        "a hint the vendor did not confirm; nothing written, reconcile heals it");
    store::activity::record_for_connection(
        pool,
        hook.connection_id,
        "hint_unconfirmed",
        serde_json::json!({
            "event": hook.event,
            "delivery_id": hook.origin.delivery_id,
            "reason": reason,
        }),
    )
    .await?;
    Ok(Outcome::Unchanged)
}
