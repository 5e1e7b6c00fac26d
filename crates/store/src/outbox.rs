//! The transactional outbox, write side: a state change and the message announcing it commit in
//! one transaction. `bus::relay` publishes the rows; a row is a dispatch record and is deleted
//! once the stream has accepted its message.

use std::collections::BTreeMap;
use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use uuid::Uuid;

use crate::contracts::Contract;
use crate::headers::{self, HeaderError};

/// A message to publish once the surrounding transaction commits.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxMessage {
    pub subject: String,
    pub headers: BTreeMap<String, String>,
    pub payload: Vec<u8>,
    /// The `Nats-Msg-Id` to publish with, when the caller has a dedup key of its own (ingress);
    /// otherwise the outbox row id.
    pub msg_id: Option<String>,
}

impl OutboxMessage {
    /// A contract message: its subject, headers, dedup key and JSON payload.
    pub fn contract<C: Contract>(message: &C) -> Result<Self, serde_json::Error> {
        Ok(OutboxMessage {
            subject: message.subject(),
            headers: message
                .headers()
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v))
                .collect(),
            payload: serde_json::to_vec(message)?,
            msg_id: message.msg_id(),
        })
    }

    /// A message with a JSON payload and no extra headers.
    pub fn json(subject: impl Into<String>, payload: &serde_json::Value) -> Self {
        OutboxMessage {
            subject: subject.into(),
            headers: BTreeMap::new(),
            payload: serde_json::to_vec(payload).unwrap_or_default(),
            msg_id: None,
        }
    }

    /// A message with a raw payload.
    pub fn bytes(subject: impl Into<String>, payload: Vec<u8>) -> Self {
        OutboxMessage {
            subject: subject.into(),
            headers: BTreeMap::new(),
            payload,
            msg_id: None,
        }
    }

    /// Publishes with `msg_id` as `Nats-Msg-Id` instead of the row id, so the stream dedups on
    /// the caller's key.
    pub fn msg_id(mut self, msg_id: impl Into<String>) -> Self {
        self.msg_id = Some(msg_id.into());
        self
    }

    /// Carries the current trace context (unless it already carries one); every enqueue does
    /// this, a caller that publishes the message itself does it first.
    pub fn traced(mut self) -> Self {
        crate::trace::stamp(&mut self.headers);
        self
    }

    /// The id the relay will publish with for outbox row `id`.
    pub fn effective_msg_id(&self, id: Uuid) -> String {
        self.msg_id.clone().unwrap_or_else(|| id.to_string())
    }

    /// Adds a header (e.g. `Forgesync-Workspace`); [`OutboxMessage::check`] vets it before
    /// the message is stored.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Refuses a message a NATS client could not publish: a header name or value (the message
    /// id included) with a control character or longer than [`headers::MAX_VALUE_BYTES`]. Every
    /// enqueue checks, so a dispatch record that would make the relay panic is never written.
    pub fn check(&self) -> Result<(), HeaderError> {
        for (name, value) in &self.headers {
            headers::check_name(name)?;
            headers::check_value(name, value)?;
        }
        if let Some(id) = &self.msg_id {
            headers::check_value(headers::MSG_ID, id)?;
        }
        Ok(())
    }
}

/// Where an outbox row can be written: a sea-orm connection or transaction, or a writer's sqlx
/// connection (the mirror writers use sqlx directly, so their state change and its announcement
/// still commit as one). One insert for both.
pub trait OutboxConn: Send {
    type Error;
    /// An error of this connection's kind for a message that cannot be written.
    fn invalid(message: String) -> Self::Error;
    /// Inserts the row `id` for `message`, kept from the relays for `hold`.
    fn insert(
        self,
        id: Uuid,
        message: &OutboxMessage,
        headers: String,
        hold: Duration,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

const INSERT: &str = "INSERT INTO outbox (id, subject, headers, payload, msg_id, available_at) \
     VALUES ($1, $2, $3::jsonb, $4, $5, now() + make_interval(secs => $6))";

impl<C: ConnectionTrait + Sync> OutboxConn for &C {
    type Error = DbErr;
    fn invalid(message: String) -> DbErr {
        DbErr::Custom(message)
    }
    async fn insert(
        self,
        id: Uuid,
        message: &OutboxMessage,
        headers: String,
        hold: Duration,
    ) -> Result<(), DbErr> {
        self.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            INSERT,
            [
                id.into(),
                message.subject.clone().into(),
                headers.into(),
                message.payload.clone().into(),
                message.msg_id.clone().into(),
                hold.as_secs_f64().into(),
            ],
        ))
        .await?;
        Ok(())
    }
}

impl OutboxConn for &mut sqlx::PgConnection {
    type Error = sqlx::Error;
    fn invalid(message: String) -> sqlx::Error {
        sqlx::Error::Protocol(message)
    }
    async fn insert(
        self,
        id: Uuid,
        message: &OutboxMessage,
        headers: String,
        hold: Duration,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(INSERT)
            .bind(id)
            .bind(&message.subject)
            .bind(headers)
            .bind(&message.payload)
            .bind(&message.msg_id)
            .bind(hold.as_secs_f64())
            .execute(self)
            .await?;
        Ok(())
    }
}

/// Enqueues `message` inside the caller's transaction; returns the outbox id. The relay publishes
/// with the message's `msg_id` or, when unset, the outbox id as `Nats-Msg-Id`, so a republish
/// after a crash is absorbed by the stream.
pub async fn enqueue<X: OutboxConn>(db: X, message: OutboxMessage) -> Result<Uuid, X::Error> {
    enqueue_with_id(db, Uuid::now_v7(), message, Duration::ZERO).await
}

/// Like [`enqueue`], with an id the caller chose (to reference the row from its own record),
/// and kept from the relays for `hold` after commit: the caller publishes it inline meanwhile
/// (and deletes it with [`delete_published`]); the relay takes it if the caller does not.
pub async fn enqueue_with_id<X: OutboxConn>(
    db: X,
    id: Uuid,
    mut message: OutboxMessage,
    hold: Duration,
) -> Result<Uuid, X::Error> {
    // The record carries the trace of whoever wrote it, so its publish and handling continue it.
    crate::trace::stamp(&mut message.headers);
    message
        .check()
        .map_err(|e| X::invalid(format!("outbox message refused: {e}")))?;
    let headers = serde_json::to_string(&message.headers)
        .map_err(|e| X::invalid(format!("outbox headers: {e}")))?;
    db.insert(id, &message, headers, hold).await?;
    Ok(id)
}

/// Enqueues a contract message (see [`crate::contracts`]) inside the caller's transaction.
pub async fn enqueue_contract<X: OutboxConn, C: Contract>(
    db: X,
    message: &C,
) -> Result<Uuid, X::Error> {
    let message =
        OutboxMessage::contract(message).map_err(|e| X::invalid(format!("outbox payload: {e}")))?;
    enqueue(db, message).await
}

/// Where a stream stored the message of a dispatch record (from the publish ack; a duplicate's
/// ack names the copy already stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    pub outbox_id: Uuid,
    /// The logical stream name (`WEBHOOKS_GITHUB`, ...), without namespace.
    pub stream: &'static str,
    pub sequence: u64,
}

/// Deletes the dispatch records of messages the stream has accepted and writes each one's place
/// into the stream ledger (`stream_message`, with the workspace, connection, repository and
/// delivery its headers name), in one statement, whoever published them (the relay, or an
/// inline publisher); returns how many records it deleted. The ledger is how the eraser deletes
/// exactly one connection's messages from streams other tenants share, and how one delivery's
/// copies are found ([`crate::inbound::erase_delivery`]).
///
/// Rows another transaction holds are skipped, not waited for: that is a relay mid-round, which
/// deletes (and records) them itself when it commits, or leaves them to be republished; the
/// duplicate's ack names the same sequence.
pub async fn delete_published<C: ConnectionTrait>(db: &C, landed: &[Landed]) -> Result<u64, DbErr> {
    if landed.is_empty() {
        return Ok(0);
    }
    // Array literals bound as text: one parameter each, whatever the batch size. Stream names
    // are our own constants and sequences numbers, so nothing needs quoting.
    let list = |f: &dyn Fn(&Landed) -> String| {
        format!("{{{}}}", landed.iter().map(f).collect::<Vec<_>>().join(","))
    };
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "WITH landed AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[]) \
                   AS l(id, stream, sequence)), \
                 gone AS (DELETE FROM outbox WHERE id IN (SELECT id FROM outbox \
                   WHERE id IN (SELECT id FROM landed) FOR UPDATE SKIP LOCKED) \
                   RETURNING id, subject, headers), \
                 ledger AS (INSERT INTO stream_message (stream, sequence, subject, workspace_id, \
                   connection_id, repository_id, delivery_id) \
                   SELECT l.stream, l.sequence, g.subject, \
                          uuid_or_null(g.headers ->> '{w}'), uuid_or_null(g.headers ->> '{c}'), \
                          uuid_or_null(g.headers ->> '{r}'), uuid_or_null(g.headers ->> '{d}') \
                     FROM gone g JOIN landed l ON l.id = g.id \
                    WHERE g.headers ?| array['{w}', '{c}'] \
                   ON CONFLICT (stream, sequence) DO NOTHING) \
                 SELECT count(*) AS n FROM gone",
                w = headers::WORKSPACE,
                c = headers::CONNECTION,
                r = headers::REPOSITORY,
                d = headers::DELIVERY,
            ),
            [
                list(&|l| l.outbox_id.to_string()).into(),
                list(&|l| l.stream.to_owned()).into(),
                list(&|l| l.sequence.to_string()).into(),
            ],
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("the dispatch delete returned no row".into()))?;
    let n: i64 = row.try_get("", "n")?;
    Ok(n as u64)
}

/// Deletes dispatch records that will never be published (parked as dead messages by the
/// caller in the same transaction); rows another transaction holds are skipped.
pub async fn discard<C: ConnectionTrait>(db: &C, ids: &[Uuid]) -> Result<u64, DbErr> {
    if ids.is_empty() {
        return Ok(0);
    }
    let list = format!(
        "{{{}}}",
        ids.iter()
            .map(Uuid::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    let res = db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox \
             WHERE id = ANY($1::uuid[]) FOR UPDATE SKIP LOCKED)",
            [list.into()],
        ))
        .await?;
    Ok(res.rows_affected())
}
