//! The outbox relay: publishes committed outbox rows to JetStream with the row's explicit
//! `msg_id` (or else its id) as `Nats-Msg-Id`, then deletes them (a dispatch record lasts until
//! the stream accepts its message), writing where each message landed into the stream ledger.
//!
//! Any number of relays may run: each batch is claimed with `FOR UPDATE SKIP LOCKED`, and a relay
//! that dies mid-batch rolls back its claim, so another relay republishes those rows and the
//! stream's duplicate window absorbs what had already been stored. It wakes on `NOTIFY outbox`
//! and also polls, so a lost notification only delays a message.
//!
//! One row never stops the relay: a row that can never be published (too large, an invalid
//! subject or header, refused by its stream) is parked as a dead message, replayable once
//! mended, and the relay goes on; a transient failure (NATS down, a timeout) leaves the row for
//! the next round.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use sea_orm::{
    ConnectionTrait as _, DatabaseConnection, DbBackend, DbErr, EntityTrait, Statement,
    TransactionTrait,
};
use sqlx::postgres::PgListener;
use store::entity::outbox;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::{Bus, BusError, Stream, dead};

/// The name dead messages parked by the relay carry as their consumer.
pub const RELAY_CONSUMER: &str = "outbox-relay";

/// How often a relay counts the rows waiting (`outbox_backlog_rows`).
pub const BACKLOG_POLL: Duration = Duration::from_secs(15);

/// The most rows the backlog count reads: past this the gauge says "at least", and the count
/// stays cheap while NATS is away and the outbox grows.
pub const BACKLOG_COUNT_CAP: i64 = 1_000_000;

/// Why a batch failed; the rows not settled stay in the outbox and are retried.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Db(#[from] DbErr),
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// Relay settings.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    pub batch_size: u64,
    pub poll_interval: Duration,
    /// After a round that left nothing available, the relay waits this long before the next
    /// one, so a burst of notifications costs one round, not one each. (Rows an inline publisher
    /// handles are kept from relays by their `available_at`, not by this wait.)
    pub settle: Duration,
    /// The logical subjects (NATS filters) whose rows this relay claims; empty: every row. A
    /// service's relay claims what its NATS identity may publish
    /// ([`crate::permissions::Identity::publishes`]), so it never holds a row the server would
    /// refuse it while another service's relay could send it.
    pub subjects: Vec<String>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            batch_size: 500,
            poll_interval: Duration::from_secs(1),
            settle: Duration::from_millis(100),
            subjects: Vec::new(),
        }
    }
}

/// A regular expression matching the subjects `filters` match (NATS wildcards: `*` one token,
/// a trailing `>` one or more); no filter matches every subject.
fn subjects_regex(filters: &[String]) -> String {
    if filters.is_empty() {
        return "^".to_owned();
    }
    let one = |filter: &String| {
        filter
            .split('.')
            .map(|token| match token {
                "*" => "[^.]+".to_owned(),
                ">" => ".+".to_owned(),
                literal => literal
                    .chars()
                    .map(|c| match c.is_ascii_alphanumeric() {
                        true => c.to_string(),
                        false => format!("\\{c}"),
                    })
                    .collect(),
            })
            .collect::<Vec<_>>()
            .join("\\.")
    };
    let alternatives: Vec<String> = filters.iter().map(one).collect();
    format!("^({})$", alternatives.join("|"))
}

/// One relay; run as many as you like.
pub struct Relay {
    db: DatabaseConnection,
    bus: Bus,
    config: RelayConfig,
}

impl Relay {
    pub fn new(db: DatabaseConnection, bus: Bus, config: RelayConfig) -> Self {
        Relay { db, bus, config }
    }

    /// Publishes one claimed batch; returns how many rows it settled (published, or parked as
    /// dead when no retry can publish them). A transient failure keeps its rows for the next
    /// round and is returned once the rest of the batch is settled.
    #[tracing::instrument(skip(self), level = "debug")]
    pub async fn publish_batch(&self) -> Result<usize, RelayError> {
        let txn = self.db.begin().await?;
        // Rows held for an inline publisher are not available yet.
        let rows = outbox::Entity::find()
            .from_raw_sql(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT * FROM outbox WHERE available_at <= now() AND subject ~ $2 \
                 ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED",
                [
                    (self.config.batch_size as i64).into(),
                    subjects_regex(&self.config.subjects).into(),
                ],
            ))
            .all(&txn)
            .await?;
        // How long the oldest available row has waited: the relay's backlog, for alerts.
        let lag = rows.first().map_or(0.0, |oldest| {
            (time::OffsetDateTime::now_utc() - oldest.available_at).as_seconds_f64()
        });
        metrics::gauge!("outbox_relay_lag_seconds").set(lag.max(0.0));
        if rows.is_empty() {
            return Ok(0);
        }
        // Pipeline the batch: send everything, then wait for every ack.
        let mut pending = Vec::with_capacity(rows.len());
        let mut parked = Vec::new();
        let mut transient: Option<BusError> = None;
        let mut note = |row: &outbox::Model, e: BusError, parked: &mut Vec<_>| {
            if e.is_permanent() {
                parked.push((row.clone(), e.to_string()));
            } else if transient.is_none() {
                transient = Some(e);
            }
        };
        for row in &rows {
            match self.start(row).await {
                Ok(ack) => pending.push((row, ack)),
                // Sending itself failed for the moment (the connection is down or saturated):
                // the rest of the batch would wait out the same timeout one by one.
                Err(e) if !e.is_permanent() => {
                    note(row, e, &mut parked);
                    break;
                }
                Err(e) => note(row, e, &mut parked),
            }
        }
        // Acks are awaited together, so a batch without answers costs one timeout, not one each.
        let (sent, acks): (Vec<_>, Vec<_>) = pending.into_iter().unzip();
        let answers = futures::future::join_all(acks).await;
        let mut published = Vec::with_capacity(sent.len());
        for (row, answer) in sent.into_iter().zip(answers) {
            match answer {
                // `start` refused rows no stream captures, so the stream is known here.
                Ok(ack) => published.extend(Stream::for_subject(&row.subject).map(|stream| {
                    store::outbox::Landed {
                        outbox_id: row.id,
                        stream: stream.name(),
                        sequence: ack.sequence,
                    }
                })),
                Err(e) => note(row, e, &mut parked),
            }
        }
        // Each published message's place goes into the stream ledger with its record's removal.
        store::outbox::delete_published(&txn, &published).await?;
        // Park: the dead record and the row's removal commit together.
        for (row, reason) in &parked {
            tracing::error!(outbox_id = %row.id, subject = %row.subject, %reason, "outbox row can never be published; parked as a dead message");
            dead::record_with_headers(
                &txn,
                dead::DeadMessage {
                    stream: Stream::for_subject(&row.subject)
                        .map(|s| self.bus.namespace().name(s.name()))
                        .unwrap_or_default(),
                    consumer: RELAY_CONSUMER.to_owned(),
                    subject: row.subject.clone(),
                    headers: None,
                    payload: row.payload.clone(),
                    reason: format!("publish refused: {reason}"),
                    attempts: 1,
                },
                row.headers.clone(),
            )
            .await?;
        }
        let parked_ids: Vec<_> = parked.iter().map(|(r, _)| r.id).collect();
        store::outbox::discard(&txn, &parked_ids).await?;
        txn.commit().await?;
        metrics::counter!("outbox_published_total").increment(published.len() as u64);
        metrics::counter!("outbox_parked_total").increment(parked.len() as u64);
        match transient {
            Some(e) => Err(e.into()),
            None => Ok(published.len() + parked.len()),
        }
    }

    /// Sends one row; a row whose subject no stream captures, or whose headers NATS cannot
    /// carry, fails permanently before anything is sent.
    async fn start(
        &self,
        row: &outbox::Model,
    ) -> Result<impl Future<Output = Result<crate::Published, BusError>> + use<>, BusError> {
        let refuse = |message: String| BusError::Publish {
            subject: row.subject.clone(),
            message,
            permanent: true,
        };
        if Stream::for_subject(&row.subject).is_none() {
            return Err(refuse("no stream captures this subject".to_owned()));
        }
        let pairs = row
            .headers
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v)));
        let headers = crate::header_map(pairs).map_err(|e| refuse(e.to_string()))?;
        // The publish continues the trace of whoever wrote the row.
        let span = tracing::info_span!("outbox relay", outbox_id = %row.id);
        store::trace::continue_from(&span, |name| row.headers.get(name)?.as_str());
        self.bus
            .publish_start(
                &row.subject,
                &row.msg_id.clone().unwrap_or_else(|| row.id.to_string()),
                headers,
                Bytes::from(row.payload.clone()),
            )
            .instrument(span)
            .await
    }

    /// Relays until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        // Registered at zero: an alert's increase() sees the first parked row.
        metrics::counter!("outbox_published_total").increment(0);
        metrics::counter!("outbox_parked_total").increment(0);
        let mut listener = self.listen().await;
        let mut counted_at: Option<tokio::time::Instant> = None;
        while !shutdown.is_cancelled() {
            if counted_at.is_none_or(|at| at.elapsed() >= BACKLOG_POLL) {
                counted_at = Some(tokio::time::Instant::now());
                self.count_backlog().await;
            }
            match self.publish_batch().await {
                Ok(n) if n as u64 >= self.config.batch_size => continue,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "outbox batch failed; retrying after the poll interval");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(self.config.settle) => {}
            }
            let wait =
                tokio::time::sleep(self.config.poll_interval.saturating_sub(self.config.settle));
            match listener.as_mut() {
                Some(l) => {
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = wait => {}
                        r = l.recv() => match r {
                            // One batch answers every notification already received.
                            Ok(_) => while l.next_buffered().is_some() {},
                            Err(e) => {
                                tracing::warn!(error = %e, "outbox LISTEN lost; polling until it is back");
                                listener = None;
                            }
                        }
                    }
                }
                None => {
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = wait => {}
                    }
                    listener = self.listen().await;
                }
            }
        }
    }

    /// Sets `outbox_backlog_rows`: rows available to relays and not yet published (at most
    /// [`BACKLOG_COUNT_CAP`]). Every relay reports the same table, so dashboards take the max.
    async fn count_backlog(&self) {
        let counted = self
            .db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT count(*) AS n FROM (SELECT 1 FROM outbox WHERE available_at <= now() LIMIT $1) AS waiting",
                [BACKLOG_COUNT_CAP.into()],
            ))
            .await
            .and_then(|row| row.map(|r| r.try_get::<i64>("", "n")).transpose());
        match counted {
            Ok(n) => metrics::gauge!("outbox_backlog_rows").set(n.unwrap_or(0) as f64),
            // The last value stays; publish_batch reports the database being away.
            Err(e) => tracing::debug!(error = %e, "counting the outbox backlog failed"),
        }
    }

    async fn listen(&self) -> Option<PgListener> {
        let pool = self.db.get_postgres_connection_pool();
        let mut listener = match PgListener::connect_with(pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN for outbox notifications; polling");
                return None;
            }
        };
        match listener.listen("outbox").await {
            Ok(()) => Some(listener),
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN for outbox notifications; polling");
                None
            }
        }
    }
}
