//! What every durable consumer reports, labelled by its (namespaced) durable name only:
//!
//! - `bus_messages_total{consumer, outcome}`: settled messages; `outcome` is one of
//!   [`OUTCOMES`] (`nak` and `dead` are the errors);
//! - `bus_message_failures_total{consumer, reason}`: failed handlings by [`REASONS`];
//! - `bus_message_duration_seconds{consumer, outcome}`: receipt to settlement;
//! - `bus_redeliveries_total{consumer}`: messages received again (attempt > 1);
//! - `bus_consumer_pending_messages{consumer}`, `bus_consumer_ack_pending_messages{consumer}`,
//!   `bus_consumer_redelivered_messages{consumer}`: the server's own account of the durable
//!   (not yet delivered, delivered and unacked, redelivered and unacked), read every
//!   [`LAG_POLL`].
//!
//! Every counter is registered at zero when the consumer starts, so `increase()` sees its first
//! dead message and dashboards show a consumer that never failed as 0, not as no data.

use std::time::Duration;

use async_nats::jetstream::consumer::{Consumer, pull};
use tokio_util::sync::CancellationToken;

/// Settlement outcomes: handled (`applied`, `unchanged`, `ignored`), redelivered after backoff
/// (`nak`), recorded as a dead message (`dead`).
pub const OUTCOMES: &[&str] = &["applied", "unchanged", "ignored", "nak", "dead"];

/// Why a handling failed: the handler's transient or permanent error, a message that does not
/// decode, a handler dropped without settling (a panic), a delivery budget already spent.
pub const REASONS: &[&str] = &[
    "transient",
    "deadline",
    "permanent",
    "undecodable",
    "dropped",
    "exhausted",
];

/// How often the server is asked for the durable's pending counts.
pub const LAG_POLL: Duration = Duration::from_secs(10);

/// Registers every series of `consumer` at zero.
pub(crate) fn register(consumer: &str) {
    for outcome in OUTCOMES {
        metrics::counter!("bus_messages_total", "consumer" => consumer.to_owned(), "outcome" => *outcome)
            .increment(0);
    }
    for reason in REASONS {
        metrics::counter!("bus_message_failures_total", "consumer" => consumer.to_owned(), "reason" => *reason)
            .increment(0);
    }
    metrics::counter!("bus_redeliveries_total", "consumer" => consumer.to_owned()).increment(0);
}

pub(crate) fn failed(consumer: &str, reason: &'static str) {
    debug_assert!(REASONS.contains(&reason));
    metrics::counter!("bus_message_failures_total", "consumer" => consumer.to_owned(), "reason" => reason)
        .increment(1);
}

pub(crate) fn handled(consumer: &str, outcome: &'static str, took: Duration) {
    debug_assert!(OUTCOMES.contains(&outcome));
    metrics::histogram!("bus_message_duration_seconds", "consumer" => consumer.to_owned(), "outcome" => outcome)
        .record(took.as_secs_f64());
}

pub(crate) fn redelivered(consumer: &str) {
    metrics::counter!("bus_redeliveries_total", "consumer" => consumer.to_owned()).increment(1);
}

/// Reads the durable's pending counts from the server every [`LAG_POLL`] until `stop`.
pub(crate) async fn watch_lag(
    consumer: Consumer<pull::Config>,
    name: String,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(LAG_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match consumer.get_info().await {
            Ok(info) => {
                metrics::gauge!("bus_consumer_pending_messages", "consumer" => name.clone())
                    .set(info.num_pending as f64);
                metrics::gauge!("bus_consumer_ack_pending_messages", "consumer" => name.clone())
                    .set(info.num_ack_pending as f64);
                metrics::gauge!("bus_consumer_redelivered_messages", "consumer" => name.clone())
                    .set(info.num_redelivered as f64);
            }
            // The last values stay; the pull loop reports a broken connection itself.
            Err(e) => tracing::debug!(consumer = %name, error = %e, "consumer info unavailable"),
        }
    }
}
