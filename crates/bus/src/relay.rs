//! The outbox relay: publishes committed outbox rows to JetStream with the row's explicit
//! `msg_id` (or else its id) as `Nats-Msg-Id`, then deletes them (a dispatch record lasts until
//! the stream accepts its message).
//!
//! Any number of relays may run: each batch is claimed with `FOR UPDATE SKIP LOCKED`, and a relay
//! that dies mid-batch rolls back its claim, so another relay republishes those rows and the
//! stream's duplicate window absorbs what had already been stored. It wakes on `NOTIFY outbox`
//! and also polls, so a lost notification only delays a message.

use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use sea_orm::{DatabaseConnection, DbBackend, DbErr, EntityTrait, Statement, TransactionTrait};
use sqlx::postgres::PgListener;
use store::entity::outbox;
use tokio_util::sync::CancellationToken;

use crate::{Bus, BusError};

/// Why a batch failed; the rows stay unpublished and are retried.
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
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            batch_size: 500,
            poll_interval: Duration::from_secs(1),
            settle: Duration::from_millis(100),
        }
    }
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

    /// Publishes one claimed batch; returns how many rows it published.
    #[tracing::instrument(skip(self), level = "debug")]
    pub async fn publish_batch(&self) -> Result<usize, RelayError> {
        let txn = self.db.begin().await?;
        // Rows held for an inline publisher are not available yet.
        let rows = outbox::Entity::find()
            .from_raw_sql(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT * FROM outbox WHERE available_at <= now() ORDER BY available_at, id \
                 LIMIT $1 FOR UPDATE SKIP LOCKED",
                [(self.config.batch_size as i64).into()],
            ))
            .all(&txn)
            .await?;
        if rows.is_empty() {
            return Ok(0);
        }
        // Pipeline the batch: send everything, then wait for every ack.
        let mut acks = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut headers = HeaderMap::new();
            if let Some(map) = row.headers.as_object() {
                for (k, v) in map {
                    if let Some(v) = v.as_str() {
                        headers.insert(k.as_str(), v);
                    }
                }
            }
            let ack = self
                .bus
                .publish_start(
                    &row.subject,
                    &row.msg_id.clone().unwrap_or_else(|| row.id.to_string()),
                    headers,
                    Bytes::from(row.payload.clone()),
                )
                .await?;
            acks.push(ack);
        }
        for ack in acks {
            ack.await?;
        }
        let ids: Vec<_> = rows.iter().map(|r| r.id).collect();
        store::outbox::delete_published(&txn, &ids).await?;
        txn.commit().await?;
        metrics::counter!("outbox_published_total").increment(rows.len() as u64);
        Ok(rows.len())
    }

    /// Relays until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        let mut listener = self.listen().await;
        while !shutdown.is_cancelled() {
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
