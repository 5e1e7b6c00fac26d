//! Hints: deliveries signed by a secret a tenant chose or was shown ([`Claim::Hint`]). Anyone in
//! that workspace could have written one, dated it 2099 or called an open request merged, and
//! the rows it names are shared with every workspace that monitors the same repository. So a
//! hint writes nothing of its own: the vendor re-reads what it names (an item, with the comments
//! and reviews under it) with the delivering connection's credentials, and what the vendor
//! returns goes through the same forward-only writes a sync uses, events included. A read that
//! fails writes nothing and is recorded as connection activity (`hint_unconfirmed`); the next
//! reconcile heals what it missed.
//!
//! Reads are coalesced per item: a hint that arrived before a confirming read of its item began
//! is answered by that read, so a burst of hints about one item costs about one read per read's
//! duration, not one per delivery. Counted in `webhook_hints_total{vendor, outcome}`
//! (`read`, `coalesced`) and `webhook_hint_confirmations_total{vendor, outcome}` (`applied`,
//! `unchanged`, `unconfirmed`).
//!
//! [`Claim::Hint`]: super::Claim::Hint

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use time::OffsetDateTime;

use super::{Outcome, Webhook, WebhookError};

/// How much later than a hint's receipt a read must begin to answer it. The receipt is the NATS
/// server's clock and the read's start ours; the margin keeps a small skew between the two from
/// answering a hint with a read that began before it arrived.
pub const CLOCK_MARGIN: Duration = Duration::from_secs(2);

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
    items: Mutex<Items>,
}

struct Items {
    slots: HashMap<String, Arc<tokio::sync::Mutex<Slot>>>,
    /// When idle slots were last forgotten.
    swept: OffsetDateTime,
}

#[derive(Default)]
struct Slot {
    /// When the last read that wrote what the vendor returned began (our clock).
    confirmed_from: Option<OffsetDateTime>,
}

impl Confirmations {
    /// An empty memory; `vendor` labels the metrics.
    pub fn new(vendor: &'static str) -> Self {
        Confirmations {
            vendor,
            items: Mutex::new(Items {
                slots: HashMap::new(),
                swept: OffsetDateTime::now_utc(),
            }),
        }
    }

    /// Confirms `hook`, a hint about the item `key` names, by `read` (the vendor's read and the
    /// forward-only write of what it returned), unless a read of that item that began after the
    /// hint arrived already confirmed it. Hints about one item wait for each other, so the
    /// second of two concurrent hints is answered by the first one's read.
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
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        let answered_after = hook.received_at + CLOCK_MARGIN;
        if slot.confirmed_from.is_some_and(|at| at >= answered_after) {
            metrics::counter!("webhook_hints_total", "vendor" => vendor, "outcome" => "coalesced")
                .increment(1);
            return Ok(Outcome::Unchanged);
        }
        metrics::counter!("webhook_hints_total", "vendor" => vendor, "outcome" => "read")
            .increment(1);
        let began = OffsetDateTime::now_utc();
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
                    Outcome::Unchanged | Outcome::Ignored => "unchanged",
                });
                Ok(outcome)
            }
            Confirmation::Unconfirmed(reason) => {
                confirmed("unconfirmed");
                tracing::info!(vendor, connection_id = %hook.connection_id, event = hook.event,
                    %reason, "a hint the vendor did not confirm; nothing written, reconcile heals it");
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
        }
    }

    /// The slot of `key`, forgetting slots idle for longer than they are useful.
    fn slot(&self, key: String) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        let now = OffsetDateTime::now_utc();
        // Bounded by the items hinted at within the last few minutes: a slot nobody holds whose
        // read is older than it is useful goes, once per period.
        if now - items.swept >= REMEMBERED {
            let horizon = now - REMEMBERED;
            items.slots.retain(|_, slot| {
                Arc::strong_count(slot) > 1
                    || slot
                        .try_lock()
                        .map(|s| s.confirmed_from.is_some_and(|at| at > horizon))
                        .unwrap_or(true)
            });
            items.swept = now;
        }
        items.slots.entry(key).or_default().clone()
    }
}
