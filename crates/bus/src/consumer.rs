//! Durable pull consumers with bounded concurrency.
//!
//! The runner settles every message; handlers never ack. It decodes the handler's typed message
//! (a message that does not decode is dead), calls the handler, sends in-progress acks while it
//! works, and settles on what it returns: `Ok(Settle)` acks, [`HandlerError::Transient`] naks with
//! backoff, [`HandlerError::Permanent`] records the message dead and acks it. A handler that
//! panics is nak'ed like a transient failure. On its last allowed attempt a failing message
//! becomes a dead message in Postgres and is acked. The server's own `max_deliver` stays
//! unlimited: the budget is enforced here, so a message is only ever acked after it is recorded
//! somewhere. Acking a message that carries its body by reference marks that body consumed, which
//! lets retention delete it. Every outcome is counted in `bus_messages_total{consumer, outcome}`;
//! [`crate::consumer_metrics`] lists what else each consumer reports.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind, consumer::pull};
use futures::StreamExt;
use sea_orm::DatabaseConnection;
use time::OffsetDateTime;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::consumer_metrics as report;
use crate::contracts::Incoming;
use crate::{Bus, BusError, Namespace, Stream, dead};

/// Headers that carry the ids every span and log line should name.
pub mod headers {
    pub use store::headers::{CONNECTION, DELIVERY, WORKSPACE};
}

/// How one durable consumer behaves.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    pub stream: Stream,
    /// Durable name without namespace; replicas sharing it share the work.
    pub durable: String,
    /// Logical filter subjects (empty: the whole stream).
    pub filter_subjects: Vec<String>,
    /// Deliveries allowed before the message is recorded dead.
    pub max_deliveries: i64,
    /// How long the server waits for an ack before redelivering.
    pub ack_wait: Duration,
    /// Handlers running at once in this replica.
    pub concurrency: usize,
    /// Nak delay by attempt (the last entry repeats).
    pub backoff: Vec<Duration>,
    /// The longest one handling may take; past it the handling is dropped (its transaction
    /// rolls back) and the message comes again after its backoff. `None`: no limit (a handler
    /// that must finish, such as an erasure).
    pub handler_deadline: Option<Duration>,
}

impl ConsumerSpec {
    /// A spec with production defaults: 10 deliveries, 30 s ack wait, 8 at once, backoff
    /// 1 s, 5 s, 30 s, 2 min, 10 min.
    pub fn new(stream: Stream, durable: impl Into<String>) -> Self {
        ConsumerSpec {
            stream,
            durable: durable.into(),
            filter_subjects: Vec::new(),
            max_deliveries: 10,
            ack_wait: Duration::from_secs(30),
            concurrency: 8,
            backoff: [1, 5, 30, 120, 600].map(Duration::from_secs).to_vec(),
            handler_deadline: None,
        }
    }

    fn nak_delay(&self, attempt: i64) -> Duration {
        let i = usize::try_from(attempt.saturating_sub(1)).unwrap_or(0);
        self.backoff
            .get(i)
            .or(self.backoff.last())
            .copied()
            .unwrap_or(Duration::from_secs(1))
    }
}

/// How a handled message settled (it is acked); the label names what happened, for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Something changed (or was recorded).
    Applied(&'static str),
    /// Already there, or older than what is stored: nothing changed.
    Unchanged(&'static str),
    /// Not for this consumer, or nothing to do.
    Ignored(&'static str),
}

impl Settle {
    /// The outcome as counted: `applied`, `unchanged` or `ignored`.
    pub fn outcome(self) -> &'static str {
        match self {
            Settle::Applied(_) => "applied",
            Settle::Unchanged(_) => "unchanged",
            Settle::Ignored(_) => "ignored",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Settle::Applied(l) | Settle::Unchanged(l) | Settle::Ignored(l) => l,
        }
    }
}

/// Why a handler did not settle a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// May succeed later (the database is unavailable): redelivered after backoff, dead once the
    /// delivery budget is spent.
    #[error("transient: {0}")]
    Transient(String),
    /// Can never succeed: recorded dead now (replayable later) and acked.
    #[error("permanent: {0}")]
    Permanent(String),
}

impl HandlerError {
    pub fn transient(reason: impl std::fmt::Display) -> Self {
        HandlerError::Transient(reason.to_string())
    }

    pub fn permanent(reason: impl std::fmt::Display) -> Self {
        HandlerError::Permanent(reason.to_string())
    }
}

/// Processes one decoded message; the runner settles it on what this returns, after the
/// handler's transaction committed.
pub trait Handler: Send + Sync + 'static {
    /// The message family consumed (see [`crate::contracts`]).
    type Message: Incoming;
    fn handle(
        &self,
        message: Self::Message,
        delivery: &Delivery,
    ) -> impl Future<Output = Result<Settle, HandlerError>> + Send;
}

#[derive(Clone)]
struct Context {
    db: DatabaseConnection,
    bus: Bus,
    namespace: Namespace,
    spec: Arc<ConsumerSpec>,
    stream_name: String,
    consumer_name: String,
}

/// One received message as its handler sees it (ids, headers, attempt); the runner settles it.
/// Nak'ed (or recorded dead) on drop unless settled.
pub struct Delivery {
    message: Option<jetstream::Message>,
    subject: String,
    attempt: i64,
    stored_at: OffsetDateTime,
    ctx: Context,
}

impl Delivery {
    /// The logical subject (without the namespace).
    pub fn subject(&self) -> &str {
        &self.subject
    }

    pub fn payload(&self) -> &[u8] {
        self.message
            .as_ref()
            .map(|m| m.payload.as_ref())
            .unwrap_or_default()
    }

    pub fn headers(&self) -> Option<&HeaderMap> {
        self.message.as_ref().and_then(|m| m.headers.as_ref())
    }

    /// A header's value, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers().and_then(|h| h.get(name)).map(|v| v.as_str())
    }

    /// 1 on the first delivery.
    pub fn attempt(&self) -> i64 {
        self.attempt
    }

    /// Whether a failed handling of this delivery is its last: the consumer's budget is spent,
    /// so what it hands back is kept dead rather than redelivered.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.ctx.spec.max_deliveries
    }

    /// When the stream stored the message (the NATS server's clock).
    pub fn stored_at(&self) -> OffsetDateTime {
        self.stored_at
    }

    /// Erases this delivery everywhere it is kept, its copy in this stream included (by the
    /// sequence it was delivered from, whether or not the ledger has recorded it yet): see
    /// [`crate::erasure::erase_delivery`]. For a vendor that must not keep what it is handling
    /// (a message from a channel without consent); the handler then settles as usual.
    pub async fn erase(
        &self,
    ) -> Result<store::inbound::ErasedDelivery, crate::erasure::EraseError> {
        use crate::erasure::EraseError::NotADelivery;
        let id = |name: &'static str| {
            self.header(name)
                .and_then(|v| v.parse::<uuid::Uuid>().ok())
                .ok_or(NotADelivery(name))
        };
        let (connection_id, delivery_id) = (id(headers::CONNECTION)?, id(headers::DELIVERY)?);
        let in_hand = self
            .message
            .as_ref()
            .and_then(|m| m.info().ok())
            .map(|info| store::inbound::StreamCopy {
                stream: self.ctx.spec.stream.name().to_owned(),
                sequence: info.stream_sequence,
            });
        crate::erasure::erase_delivery(
            &self.ctx.bus,
            &self.ctx.db,
            connection_id,
            delivery_id,
            in_hand,
        )
        .await
    }

    /// Acknowledges after the handler's transaction committed; waits for the server to confirm.
    async fn ack(mut self, outcome: &'static str) -> Result<(), BusError> {
        let Some(message) = self.message.take() else {
            return Ok(());
        };
        message.double_ack().await.map_err(|e| BusError::Consumer {
            consumer: self.ctx.consumer_name.clone(),
            message: format!("ack failed: {e}"),
        })?;
        metrics::counter!("bus_messages_total", "consumer" => self.ctx.consumer_name.clone(), "outcome" => outcome).increment(1);
        // A body carried by reference may go once its message is handled (retention keeps it
        // until then); a failed mark only keeps it longer.
        if let Some(id) = message
            .headers
            .as_ref()
            .and_then(|h| h.get(store::headers::BODY_REF))
            .and_then(|v| v.as_str().parse::<uuid::Uuid>().ok())
            && let Err(e) = store::inbound::mark_consumed(&self.ctx.db, id).await
        {
            tracing::warn!(consumer = %self.ctx.consumer_name, error = %e, "marking a body consumed failed; retention keeps it longer");
        }
        Ok(())
    }

    /// Tells the server the handler is still working, restarting the ack wait.
    async fn in_progress(&self) -> Result<(), BusError> {
        let Some(message) = self.message.as_ref() else {
            return Ok(());
        };
        message
            .ack_with(AckKind::Progress)
            .await
            .map_err(|e| BusError::Consumer {
                consumer: self.ctx.consumer_name.clone(),
                message: format!("progress ack failed: {e}"),
            })
    }

    /// A transient failure: redeliver after backoff, or record it dead on the last attempt.
    async fn retry(mut self, reason: &str) {
        if let Some(message) = self.message.take() {
            settle_failure(self.ctx.clone(), message, self.attempt, reason.to_owned()).await;
        }
    }

    /// A message that can never succeed: record it dead now (replayable later) and ack it.
    async fn reject(mut self, reason: &str) {
        if let Some(message) = self.message.take() {
            dead_letter(self.ctx.clone(), message, self.attempt, reason.to_owned()).await;
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        let Some(message) = self.message.take() else {
            return;
        };
        let ctx = self.ctx.clone();
        let attempt = self.attempt;
        report::failed(&ctx.consumer_name, "dropped");
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(settle_failure(
                ctx,
                message,
                attempt,
                "dropped without ack".to_owned(),
            ));
        }
        // Without a runtime nothing can be sent; the server redelivers after ack_wait.
    }
}

async fn settle_failure(ctx: Context, message: jetstream::Message, attempt: i64, reason: String) {
    if attempt >= ctx.spec.max_deliveries {
        dead_letter(ctx, message, attempt, reason).await;
        return;
    }
    let delay = ctx.spec.nak_delay(attempt);
    tracing::warn!(consumer = %ctx.consumer_name, attempt, ?delay, %reason, "message not acked; redelivering");
    metrics::counter!("bus_messages_total", "consumer" => ctx.consumer_name.clone(), "outcome" => "nak").increment(1);
    if let Err(e) = message.ack_with(AckKind::Nak(Some(delay))).await {
        // The server redelivers after ack_wait anyway.
        tracing::warn!(consumer = %ctx.consumer_name, error = %e, "nak failed");
    }
}

async fn dead_letter(ctx: Context, message: jetstream::Message, attempt: i64, reason: String) {
    let record = dead::DeadMessage {
        stream: ctx.stream_name.clone(),
        consumer: ctx.consumer_name.clone(),
        subject: ctx_subject(&ctx, &message),
        headers: message.headers.clone(),
        payload: message.payload.to_vec(),
        reason: reason.clone(),
        attempts: attempt,
    };
    match dead::record(&ctx.db, record).await {
        Ok(id) => {
            tracing::error!(consumer = %ctx.consumer_name, attempt, %reason, dead_message = %id, "message recorded dead");
            metrics::counter!("bus_messages_total", "consumer" => ctx.consumer_name.clone(), "outcome" => "dead").increment(1);
            // Recorded first, then acked: a crash in between only duplicates the dead record.
            if let Err(e) = message.double_ack().await {
                tracing::warn!(consumer = %ctx.consumer_name, error = %e, "ack of dead message failed");
            }
        }
        Err(e) => {
            // Not recorded: keep it in the stream and try again later.
            tracing::error!(consumer = %ctx.consumer_name, error = %e, "recording dead message failed; redelivering");
            let _ = message
                .ack_with(AckKind::Nak(Some(ctx.spec.nak_delay(attempt))))
                .await;
        }
    }
}

/// The logical subject, so a replay lands in the same namespace it came from.
fn ctx_subject(ctx: &Context, message: &jetstream::Message) -> String {
    let full = message.subject.as_str();
    ctx.namespace.strip(full).unwrap_or(full).to_owned()
}

/// Decodes, handles with in-progress acks, and settles one delivery.
async fn handle_one<H: Handler>(handler: &H, delivery: Delivery) {
    let started = std::time::Instant::now();
    let consumer = delivery.ctx.consumer_name.clone();
    // A failed handling is redelivered, or dead once its budget is spent.
    let failure = if delivery.attempt >= delivery.ctx.spec.max_deliveries {
        "dead"
    } else {
        "nak"
    };
    let decoded = H::Message::decode(
        &delivery.subject,
        &|name| delivery.header(name).map(str::to_owned),
        delivery.payload(),
    );
    let message = match decoded {
        Ok(m) => m,
        // A message that does not decode never will.
        Err(reason) => {
            tracing::Span::current().record("otel.status_code", "ERROR");
            report::failed(&consumer, "undecodable");
            delivery.reject(&format!("undecodable: {reason}")).await;
            return report::handled(&consumer, "dead", started.elapsed());
        }
    };
    // Keep the message ours while the handler works; a dead replica's message comes back.
    let every = (delivery.ctx.spec.ack_wait / 3).max(Duration::from_millis(100));
    let deadline = delivery.ctx.spec.handler_deadline;
    let result = {
        let work = handler.handle(message, &delivery);
        tokio::pin!(work);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let expired = async {
            match deadline {
                Some(deadline) => tokio::time::sleep(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(expired);
        loop {
            tokio::select! {
                r = &mut work => break r,
                () = &mut expired => {
                    // A handler stalled on a slow vendor must not hold its worker: it is
                    // dropped, and the message tried again later.
                    let deadline = deadline.unwrap_or_default();
                    report::failed(&consumer, "deadline");
                    break Err(HandlerError::Transient(format!(
                        "the handler passed its {} s deadline",
                        deadline.as_secs()
                    )));
                }
                _ = tick.tick() => {
                    if let Err(e) = delivery.in_progress().await {
                        tracing::warn!(error = %e, "progress ack failed");
                    }
                }
            }
        }
    };
    match result {
        Ok(settle) => {
            tracing::debug!(
                outcome = settle.outcome(),
                label = settle.label(),
                "message handled"
            );
            if let Err(e) = delivery.ack(settle.outcome()).await {
                tracing::warn!(error = %e, "ack failed; the message will come again");
            }
            report::handled(&consumer, settle.outcome(), started.elapsed());
        }
        Err(HandlerError::Transient(reason)) => {
            tracing::Span::current().record("otel.status_code", "ERROR");
            report::failed(&consumer, "transient");
            delivery.retry(&reason).await;
            report::handled(&consumer, failure, started.elapsed());
        }
        Err(HandlerError::Permanent(reason)) => {
            tracing::Span::current().record("otel.status_code", "ERROR");
            report::failed(&consumer, "permanent");
            delivery.reject(&reason).await;
            report::handled(&consumer, "dead", started.elapsed());
        }
    }
}

/// The durable's configuration: explicit acks, redelivery after `ack_wait`, no server-side
/// delivery limit (the dead-message budget is ours), `filters` already namespaced.
fn durable_config(spec: &ConsumerSpec, durable: String, filters: Vec<String>) -> pull::Config {
    pull::Config {
        durable_name: Some(durable),
        filter_subjects: filters,
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: spec.ack_wait,
        max_deliver: -1,
        max_ack_pending: i64::try_from(spec.concurrency * 4).unwrap_or(1000),
        ..Default::default()
    }
}

/// The stream of `spec`'s durable on the server, and the durable's namespaced name.
async fn durable_stream(
    bus: &Bus,
    spec: &ConsumerSpec,
) -> Result<(async_nats::jetstream::stream::Stream, String), BusError> {
    let ns = bus.namespace();
    let consumer_name = ns.name(&spec.durable);
    let stream_name = ns.name(spec.stream.name());
    match bus.jetstream().get_stream(&stream_name).await {
        Ok(stream) => Ok((stream, consumer_name)),
        Err(e) => Err(BusError::Consumer {
            consumer: consumer_name,
            message: format!("stream {stream_name}: {e}"),
        }),
    }
}

/// Declares the durable of `spec` with a filter no published subject matches (`<root>.%`: a
/// lone `%` is never an encoded token, and no subject of the stream has two levels), so a
/// consumer with nothing to take keeps its position but stops counting deliveries of subjects
/// it used to take as pending work: an autoscaler reading its pending count sees none, and the
/// durable is not left holding a backlog nobody will pull.
pub async fn park(bus: &Bus, spec: &ConsumerSpec) -> Result<(), BusError> {
    let ns = bus.namespace();
    let (stream, consumer_name) = durable_stream(bus, spec).await?;
    let err = |message: String| BusError::Consumer {
        consumer: consumer_name.clone(),
        message,
    };
    let idle = ns.subject(&format!("{}.%", spec.stream.root_token()));
    stream
        .create_consumer(durable_config(spec, consumer_name.clone(), vec![idle]))
        .await
        .map_err(|e| err(format!("park: {e}")))?;
    Ok(())
}

/// The logical filter subjects the durable `spec` names holds on the server now (its
/// namespace stripped), or `None` when the server has no such durable.
pub async fn server_filters(
    bus: &Bus,
    spec: &ConsumerSpec,
) -> Result<Option<Vec<String>>, BusError> {
    use async_nats::jetstream::context::ConsumerInfoErrorKind;
    let ns = bus.namespace();
    let (stream, consumer_name) = durable_stream(bus, spec).await?;
    let err = |message: String| BusError::Consumer {
        consumer: consumer_name.clone(),
        message,
    };
    let info = match stream.consumer_info(&consumer_name).await {
        Ok(info) => info,
        Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(format!("info: {e}"))),
    };
    let mut filters = info.config.filter_subjects.clone();
    if !info.config.filter_subject.is_empty() {
        filters.push(info.config.filter_subject.clone());
    }
    Ok(Some(
        filters
            .iter()
            .map(|f| ns.strip(f).unwrap_or(f).to_owned())
            .collect(),
    ))
}

/// Makes the durable of `spec` take `filter` (logical) and returns the filters it holds on the
/// server afterwards: a missing durable is declared with `spec`'s settings and `filter`; an
/// existing one keeps its settings and filters, `filter` is added unless one already covers it
/// (a parked durable's idle filter is replaced). A runner re-declaring the durable later keeps
/// `filter` only if its own filters include it.
///
/// The server has no compare-and-set for a consumer's filters: two callers adding theirs at once
/// may each write the list it read, and one's filter is lost. So the filters are read back, and
/// the addition is made again (a few times, after a short pause) until the server holds it.
pub async fn ensure_filter(
    bus: &Bus,
    spec: &ConsumerSpec,
    filter: &str,
) -> Result<Vec<String>, BusError> {
    use lifecycle_core::subject::filter_covers;
    const ATTEMPTS: u32 = 5;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let held = ensure_filter_once(bus, spec, filter).await?;
        if held.iter().any(|f| filter_covers(f, filter)) || attempt >= ATTEMPTS {
            return Ok(held);
        }
        tracing::info!(
            filter,
            attempt,
            "a concurrent update dropped the consumer filter just added; adding it again"
        );
        // Callers racing on one durable pause for different times before trying again.
        let jitter = u64::from(uuid::Uuid::new_v4().as_u128() as u8 % 50);
        tokio::time::sleep(std::time::Duration::from_millis(
            20 * u64::from(attempt) + jitter,
        ))
        .await;
    }
}

async fn ensure_filter_once(
    bus: &Bus,
    spec: &ConsumerSpec,
    filter: &str,
) -> Result<Vec<String>, BusError> {
    use lifecycle_core::subject::filter_covers;
    let ns = bus.namespace();
    let (stream, consumer_name) = durable_stream(bus, spec).await?;
    let err = |message: String| BusError::Consumer {
        consumer: consumer_name.clone(),
        message,
    };
    let wanted = ns.subject(filter);
    let idle = ns.subject(&format!("{}.%", spec.stream.root_token()));
    match server_filters(bus, spec).await? {
        None => {
            stream
                .create_consumer(durable_config(spec, consumer_name.clone(), vec![wanted]))
                .await
                .map_err(|e| err(format!("create: {e}")))?;
        }
        Some(held) => {
            let mut held: Vec<String> = held.iter().map(|f| ns.subject(f)).collect();
            if held.iter().any(|f| filter_covers(f, &wanted)) {
                return Ok(held
                    .iter()
                    .map(|f| ns.strip(f).unwrap_or(f).to_owned())
                    .collect());
            }
            let mut config = stream
                .consumer_info(&consumer_name)
                .await
                .map_err(|e| err(format!("info: {e}")))?
                .config
                .clone();
            held.retain(|f| *f != idle && !filter_covers(&wanted, f));
            held.push(wanted);
            held.sort();
            config.filter_subject = String::new();
            config.filter_subjects = held;
            stream
                .update_consumer(config)
                .await
                .map_err(|e| err(format!("update: {e}")))?;
        }
    }
    server_filters(bus, spec)
        .await?
        .ok_or_else(|| err("the durable vanished right after it was declared".into()))
}

/// Runs a durable consumer until `shutdown`: stops pulling, then waits for in-flight handlers.
pub async fn run<H: Handler>(
    bus: &Bus,
    db: DatabaseConnection,
    spec: ConsumerSpec,
    handler: Arc<H>,
    shutdown: CancellationToken,
) -> Result<(), BusError> {
    let ns = bus.namespace().clone();
    let stream_name = ns.name(spec.stream.name());
    let consumer_name = ns.name(&spec.durable);
    let err = |message: String| BusError::Consumer {
        consumer: consumer_name.clone(),
        message,
    };
    let stream = bus
        .jetstream()
        .get_stream(&stream_name)
        .await
        .map_err(|e| err(format!("stream {stream_name}: {e}")))?;
    let filters: Vec<String> = spec.filter_subjects.iter().map(|s| ns.subject(s)).collect();
    let consumer = stream
        .create_consumer(durable_config(&spec, consumer_name.clone(), filters))
        .await
        .map_err(|e| err(format!("create: {e}")))?;
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(spec.concurrency.max(1))
        .heartbeat(Duration::from_secs(5))
        .expires(Duration::from_secs(10))
        .messages()
        .await
        .map_err(|e| err(format!("pull: {e}")))?;

    report::register(&consumer_name);
    let lag = shutdown.child_token();
    tokio::spawn(report::watch_lag(
        consumer.clone(),
        consumer_name.clone(),
        lag.clone(),
    ));
    let _stop_lag = lag.drop_guard();
    let ctx = Context {
        db,
        bus: bus.clone(),
        namespace: ns.clone(),
        spec: Arc::new(spec),
        stream_name: stream_name.clone(),
        consumer_name: consumer_name.clone(),
    };
    let permits = Arc::new(Semaphore::new(ctx.spec.concurrency.max(1)));
    let mut in_flight = JoinSet::new();
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            p = permits.clone().acquire_owned() => p.map_err(|e| err(e.to_string()))?,
        };
        let next = tokio::select! {
            _ = shutdown.cancelled() => break,
            n = messages.next() => n,
        };
        let message = match next {
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                tracing::warn!(consumer = %consumer_name, error = %e, "pull error; continuing");
                continue;
            }
            None => break,
        };
        // Reap finished handlers so the set does not grow.
        while in_flight.try_join_next().is_some() {}
        let (attempt, stored_at, sequence) = match message.info() {
            Ok(info) => (info.delivered, info.published, info.stream_sequence),
            Err(_) => (1, OffsetDateTime::now_utc(), 0),
        };
        let subject = ns
            .strip(message.subject.as_str())
            .unwrap_or(message.subject.as_str())
            .to_owned();
        let delivery = Delivery {
            message: Some(message),
            subject,
            attempt,
            stored_at,
            ctx: ctx.clone(),
        };
        if attempt > 1 {
            report::redelivered(&consumer_name);
        }
        if attempt > ctx.spec.max_deliveries {
            report::failed(&consumer_name, "exhausted");
            // The last attempt's dead record failed; record it now rather than handle it again.
            let reason = format!("delivery budget of {} exhausted", ctx.spec.max_deliveries);
            in_flight.spawn(async move {
                delivery.reject(&reason).await;
                drop(permit);
            });
            continue;
        }
        let span = tracing::info_span!(
            "message",
            otel.name = %format_args!("consume {}", ctx.spec.durable),
            otel.kind = "consumer",
            otel.status_code = tracing::field::Empty,
            consumer = %consumer_name,
            subject = %delivery.subject,
            stream_sequence = sequence,
            attempt,
            workspace_id = delivery.header(headers::WORKSPACE).unwrap_or_default(),
            connection_id = delivery.header(headers::CONNECTION).unwrap_or_default(),
            delivery_id = delivery.header(headers::DELIVERY).unwrap_or_default(),
            replay_of = delivery.header(store::headers::REPLAY_OF).unwrap_or_default(),
        );
        // The handling continues the trace the message carries (and links a replay's original).
        store::trace::continue_from(&span, |name| delivery.header(name));
        let handler = handler.clone();
        in_flight.spawn(
            async move {
                handle_one(&*handler, delivery).await;
                drop(permit);
            }
            .instrument(span),
        );
    }
    // Stop taking work, finish what is in flight; unacked work is redelivered to another replica.
    while in_flight.join_next().await.is_some() {}
    Ok(())
}
