//! A consumer that follows the monitors: its filters are the consumer subject math
//! ([`filter_subjects`]) over what the vendor's connections monitor now, less the subjects a
//! fixed consumer of the same stream already takes. When the monitors' filters change, the
//! in-flight deliveries finish and the durable consumer is re-declared with the new filters.
//! The filters are bounded ([`Filters::cap`], [`bounded_filters`]): every tenant's monitors widen
//! them, and past the cap whole owners are taken instead, so the server never refuses the
//! consumer for its size. What a wider filter takes besides is refused by admission as for any
//! delivery; what it takes of another consumer's subjects (`excluded`) is left to that one.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bus::Bus;
use bus::consumer::{self, ConsumerSpec, Delivery, Handler, HandlerError, Settle};
use lifecycle_core::subject::{Monitor, bounded_filters, filter_covers, filter_subjects};
use sea_orm::DatabaseConnection;
use tokio_util::sync::CancellationToken;

/// What the vendor's connections monitor now, as the consumer subject math sees it.
pub trait Monitors: Send + Sync + 'static {
    fn monitors(&self) -> impl Future<Output = Result<Vec<Monitor>, sqlx::Error>> + Send;
}

/// The filters a following consumer takes.
pub struct Filters<M> {
    pub monitors: M,
    /// Filters another consumer of the stream takes (e.g. owner-level events): any monitor
    /// filter one of them covers is left out, and a delivery on one of them that a bounded
    /// filter takes is settled untouched, so no delivery is handled twice.
    pub excluded: Vec<String>,
    /// The most filters the consumer declares ([`DEFAULT_MAX_FILTERS`] as services run).
    pub cap: usize,
}

/// Filters a following consumer declares at most: far below what a server's request limit
/// (`max_payload`, 1 MiB by default) holds.
pub const DEFAULT_MAX_FILTERS: usize = 256;

impl<M: Monitors> Filters<M> {
    /// The sorted, non-overlapping filters of the current monitors, less the excluded ones,
    /// bounded to the cap.
    pub async fn current(&self) -> Result<Vec<String>, sqlx::Error> {
        let monitors = self.monitors.monitors().await?;
        let filters: Vec<String> = filter_subjects(&monitors)
            .into_iter()
            .filter(|f| !self.excluded.iter().any(|x| filter_covers(x, f)))
            .collect();
        Ok(bounded_filters(filters, self.cap))
    }
}

/// The consumer's handler, settling untouched a delivery on a subject another consumer of the
/// stream takes (a bounded filter may take it too).
struct Excluding<H> {
    inner: Arc<H>,
    excluded: Arc<[String]>,
}

impl<H: Handler> Handler for Excluding<H> {
    type Message = H::Message;

    async fn handle(
        &self,
        message: H::Message,
        delivery: &Delivery,
    ) -> Result<Settle, HandlerError> {
        if self
            .excluded
            .iter()
            .any(|x| filter_covers(x, delivery.subject()))
        {
            return Ok(Settle::Ignored("another consumer's subject"));
        }
        self.inner.handle(message, delivery).await
    }
}

/// Says that the consumer could not run with `filters` filters, and counts it in
/// `webhook_consumer_refusals_total{consumer}`.
fn refused(consumer: &str, filters: usize, error: &dyn std::fmt::Display) {
    metrics::counter!("webhook_consumer_refusals_total", "consumer" => consumer.to_owned())
        .increment(1);
    tracing::error!(consumer, filters, %error, "the consumer could not run with its filters; declaring it again");
}

/// Runs the consumer `template` (its filters replaced by [`Filters::current`]) until
/// `shutdown`, checking the monitors every `refresh` and re-declaring the consumer when its
/// filters change. Without any monitor nothing is consumed and the durable is parked
/// ([`consumer::park`]). The gauge
/// `webhook_consumer_filters{consumer}` counts the filters in force.
pub async fn run<H: Handler, M: Monitors>(
    bus: Bus,
    db: DatabaseConnection,
    template: ConsumerSpec,
    handler: Arc<H>,
    filters: Filters<M>,
    refresh: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let gauge = metrics::gauge!("webhook_consumer_filters", "consumer" => template.durable.clone());
    let handler = Arc::new(Excluding {
        inner: handler,
        excluded: Arc::from(filters.excluded.clone()),
    });
    let mut current: Vec<String> = Vec::new();
    let mut parked = false;
    while !shutdown.is_cancelled() {
        match filters.current().await {
            Ok(next) => current = next,
            Err(e) => tracing::warn!(error = %e, "reading monitors for consumer filters failed"),
        }
        gauge.set(current.len() as f64);
        if current.is_empty() {
            // Nothing monitored (the last connection paused or left): the durable keeps its
            // place but stops holding the old filters' deliveries as pending.
            if !parked {
                match consumer::park(&bus, &template).await {
                    Ok(()) => {
                        parked = true;
                        tracing::info!(consumer = %template.durable, "nothing monitored; consumer parked");
                    }
                    Err(e) => tracing::warn!(error = %e, "parking the consumer failed"),
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(refresh) => continue,
            }
        }
        parked = false;
        tracing::info!(consumer = %template.durable, filters = current.len(), "consuming monitored webhooks");
        let stop = shutdown.child_token();
        let spec = ConsumerSpec {
            filter_subjects: current.clone(),
            ..template.clone()
        };
        let run = consumer::run(&bus, db.clone(), spec, handler.clone(), stop.clone());
        tokio::pin!(run);
        loop {
            tokio::select! {
                done = &mut run => {
                    // The server may refuse the consumer (its filters grew past what it takes,
                    // or it is down): every tenant's deliveries wait on this service, so it
                    // says why and declares again, and never ends for it.
                    if let Err(e) = done {
                        refused(&template.durable, current.len(), &e);
                        tokio::select! {
                            _ = shutdown.cancelled() => {}
                            _ = tokio::time::sleep(refresh.max(Duration::from_secs(1))) => {}
                        }
                    }
                    break;
                }
                _ = tokio::time::sleep(refresh) => {
                    match filters.current().await {
                        Ok(next) if next != current => {
                            // Monitors changed: finish in-flight work, then re-declare.
                            stop.cancel();
                            if let Err(e) = (&mut run).await {
                                refused(&template.durable, current.len(), &e);
                            }
                            break;
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "reading monitors for consumer filters failed"),
                    }
                }
            }
        }
    }
    Ok(())
}
