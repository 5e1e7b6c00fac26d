//! The transactional outbox, write side: a state change and the message announcing it commit in
//! one transaction. `bus::relay` publishes the rows.

use std::collections::BTreeMap;

use sea_orm::{ActiveValue::Set, ConnectionTrait, DbErr, EntityTrait};
use uuid::Uuid;

use crate::entity::outbox;

/// A message to publish once the surrounding transaction commits.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxMessage {
    pub subject: String,
    pub headers: BTreeMap<String, String>,
    pub payload: Vec<u8>,
}

impl OutboxMessage {
    /// A message with a JSON payload and no extra headers.
    pub fn json(subject: impl Into<String>, payload: &serde_json::Value) -> Self {
        OutboxMessage {
            subject: subject.into(),
            headers: BTreeMap::new(),
            payload: serde_json::to_vec(payload).unwrap_or_default(),
        }
    }

    /// Adds a header (e.g. `Forgesync-Workspace`).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
}

/// Enqueues `message` inside the caller's transaction; returns the outbox id, which the relay
/// uses as `Nats-Msg-Id` so a republish after a crash is absorbed by the stream.
pub async fn enqueue<C: ConnectionTrait>(db: &C, message: OutboxMessage) -> Result<Uuid, DbErr> {
    let id = Uuid::now_v7();
    let headers = serde_json::to_value(&message.headers)
        .map_err(|e| DbErr::Custom(format!("outbox headers: {e}")))?;
    outbox::Entity::insert(outbox::ActiveModel {
        id: Set(id),
        subject: Set(message.subject),
        headers: Set(headers),
        payload: Set(message.payload),
        ..Default::default()
    })
    .exec_without_returning(db)
    .await?;
    Ok(id)
}
