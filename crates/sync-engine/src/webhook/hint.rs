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
//! monotonic clock, so no skew between servers can answer a hint with an older read.
//!
//! Hints take turns. A connection has at most a few confirming reads under way in a replica,
//! and all connections together at most half of the replica's webhook workers, so vendor-signed
//! deliveries always find a worker however many tenants hint at once (or however slowly their
//! servers answer). A hint past either limit is handed back to be redelivered later; on its last
//! delivery it is settled as unconfirmed instead (recorded, acknowledged, never dead): reconcile
//! reads what it named anyway, and a tenant cannot fill the dead-message store by hinting.
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

/// Confirming reads all connections together may have under way in this replica, when the
/// number of webhook workers is not known (see [`Confirmations::for_workers`]).
pub const DEFAULT_READS_IN_REPLICA: usize = 8;

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
    reads_in_replica: usize,
    /// Confirming reads under way.
    reading: Arc<Mutex<Under>>,
}

/// Confirming reads under way, by connection and in all.
#[derive(Default)]
struct Under {
    by_connection: HashMap<Uuid, usize>,
    total: usize,
}

/// Why a hint waits its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Busy {
    /// Its connection has this many confirming reads under way.
    Connection(usize),
    /// All connections together have this many under way in this replica.
    Replica(usize),
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Busy::Connection(n) => write!(f, "the connection has {n} confirming reads under way"),
            Busy::Replica(n) => write!(f, "this replica has {n} confirming reads under way"),
        }
    }
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
            reads_in_replica: DEFAULT_READS_IN_REPLICA,
            reading: Arc::default(),
        }
    }

    /// An empty memory for a consumer with `workers` webhook workers: confirming reads may hold
    /// at most half of them (at least one), the rest stay free for vendor-signed deliveries.
    pub fn for_workers(vendor: &'static str, workers: usize) -> Self {
        Confirmations::new(vendor).with_reads_in_replica(workers / 2)
    }

    /// The same memory, letting all connections together have `n` confirming reads under way.
    pub fn with_reads_in_replica(self, n: usize) -> Self {
        Confirmations {
            reads_in_replica: n.max(1),
            ..self
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
        // Fairness first: past its connection's or the replica's limit a hint waits outside
        // the shared workers; on its last delivery it is settled rather than kept dead.
        let _reading = match self.start_reading(hook.connection_id) {
            Ok(reading) => reading,
            Err(busy) => {
                metrics::counter!("webhook_hints_total", "vendor" => vendor, "outcome" => "deferred")
                    .increment(1);
                if hook.delivery.is_last_attempt() {
                    let reason = format!("{busy} on every delivery of this hint");
                    return unconfirmed(pool, hook, vendor, &reason).await;
                }
                return Err(WebhookError::Unavailable(format!(
                    "{busy}; this hint waits its turn"
                )));
            }
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

    /// Counts a confirming read of `connection_id` until the guard drops; refused at either
    /// limit.
    fn start_reading(&self, connection_id: Uuid) -> Result<Reading, Busy> {
        let mut under = self.reading.lock().unwrap_or_else(|e| e.into_inner());
        if under.total >= self.reads_in_replica {
            return Err(Busy::Replica(under.total));
        }
        let n = under.by_connection.entry(connection_id).or_default();
        if *n >= self.reads_per_connection {
            return Err(Busy::Connection(*n));
        }
        *n += 1;
        under.total += 1;
        Ok(Reading {
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
    reading: Arc<Mutex<Under>>,
    connection_id: Uuid,
}

impl Drop for Reading {
    fn drop(&mut self) {
        let mut under = self.reading.lock().unwrap_or_else(|e| e.into_inner());
        under.total = under.total.saturating_sub(1);
        if let Some(n) = under.by_connection.get_mut(&self.connection_id) {
            *n -= 1;
            if *n == 0 {
                under.by_connection.remove(&self.connection_id);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_and_all_connections_together_each_have_a_limit() {
        let c = Confirmations::new("test")
            .with_reads_per_connection(2)
            .with_reads_in_replica(3);
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let a1 = c.start_reading(a).unwrap();
        let _a2 = c.start_reading(a).unwrap();
        assert_eq!(c.start_reading(a).err(), Some(Busy::Connection(2)));
        let _b1 = c.start_reading(b).unwrap();
        // Three under way in all: nobody else starts, whatever its own count.
        assert_eq!(c.start_reading(b).err(), Some(Busy::Replica(3)));
        assert_eq!(
            c.start_reading(Uuid::new_v4()).err(),
            Some(Busy::Replica(3))
        );
        // A finished read gives its turn back to both counts.
        drop(a1);
        let _b2 = c.start_reading(b).unwrap();
        assert_eq!(c.start_reading(b).err(), Some(Busy::Replica(3)));
    }

    #[test]
    fn hints_hold_at_most_half_of_the_workers() {
        let c = Confirmations::for_workers("test", 16).with_reads_per_connection(100);
        let held: Vec<_> = (0..8)
            .map(|_| c.start_reading(Uuid::new_v4()).unwrap())
            .collect();
        assert_eq!(
            c.start_reading(Uuid::new_v4()).err(),
            Some(Busy::Replica(8))
        );
        drop(held);
        // One worker: one read at a time, never none.
        let one = Confirmations::for_workers("test", 1);
        let _r = one.start_reading(Uuid::new_v4()).unwrap();
        assert!(one.start_reading(Uuid::new_v4()).is_err());
    }
}
