//! The transactional outbox, write side: a state change and the message announcing it commit in
//! one transaction. `bus::relay` publishes the rows.

use std::collections::BTreeMap;

use sea_orm::{ActiveValue::Set, ConnectionTrait, DbBackend, DbErr, EntityTrait, Statement};
use uuid::Uuid;

use crate::entity::outbox;

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

    /// The id the relay will publish with for outbox row `id`.
    pub fn effective_msg_id(&self, id: Uuid) -> String {
        self.msg_id.clone().unwrap_or_else(|| id.to_string())
    }

    /// Adds a header (e.g. `Forgesync-Workspace`).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
}

/// Enqueues `message` inside the caller's transaction; returns the outbox id. The relay publishes
/// with the message's `msg_id` or, when unset, the outbox id as `Nats-Msg-Id`, so a republish
/// after a crash is absorbed by the stream.
pub async fn enqueue<C: ConnectionTrait>(db: &C, message: OutboxMessage) -> Result<Uuid, DbErr> {
    enqueue_with_id(db, Uuid::now_v7(), message).await
}

/// Like [`enqueue`], with an id the caller chose (to reference the row from its own record).
pub async fn enqueue_with_id<C: ConnectionTrait>(
    db: &C,
    id: Uuid,
    message: OutboxMessage,
) -> Result<Uuid, DbErr> {
    let headers = serde_json::to_value(&message.headers)
        .map_err(|e| DbErr::Custom(format!("outbox headers: {e}")))?;
    outbox::Entity::insert(outbox::ActiveModel {
        id: Set(id),
        subject: Set(message.subject),
        headers: Set(headers),
        payload: Set(message.payload),
        msg_id: Set(message.msg_id),
        ..Default::default()
    })
    .exec_without_returning(db)
    .await?;
    Ok(id)
}

/// Like [`enqueue`], inside a writer's sqlx transaction (the mirror writers use sqlx directly, so
/// their state change and its announcement still commit as one).
pub async fn enqueue_pg(
    conn: &mut sqlx::PgConnection,
    message: OutboxMessage,
) -> Result<Uuid, sqlx::Error> {
    let id = Uuid::now_v7();
    let headers = serde_json::to_string(&message.headers)
        .map_err(|e| sqlx::Error::Protocol(format!("outbox headers: {e}")))?;
    sqlx::query(
        "INSERT INTO outbox (id, subject, headers, payload, msg_id)
         VALUES ($1, $2, $3::jsonb, $4, $5)",
    )
    .bind(id)
    .bind(&message.subject)
    .bind(headers)
    .bind(&message.payload)
    .bind(&message.msg_id)
    .execute(conn)
    .await?;
    Ok(id)
}

/// Stamps the rows `ids` published (those not stamped yet); returns how many it stamped. One
/// statement for the whole set, whoever published them (the relay, or an inline publisher).
///
/// Rows another transaction holds are skipped, not waited for: that is a relay mid-round, which
/// stamps them itself when it commits (or leaves them to be republished and absorbed).
pub async fn mark_published<C: ConnectionTrait>(db: &C, ids: &[Uuid]) -> Result<u64, DbErr> {
    if ids.is_empty() {
        return Ok(0);
    }
    // A uuid[] literal bound as text: one parameter, whatever the batch size.
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
            "UPDATE outbox SET published_at = now() WHERE id IN (SELECT id FROM outbox \
             WHERE id = ANY($1::uuid[]) AND published_at IS NULL FOR UPDATE SKIP LOCKED)",
            [list.into()],
        ))
        .await?;
    Ok(res.rows_affected())
}
