//! The generic events Slack publishes, one per change whichever path reports it (an event, a
//! replay): `slack.message.posted|edited|deleted` keyed by channel and ts, and
//! `slack.channel.activated|paused|resumed|erased`. They carry ids and dates, never text.

use lifecycle_core::forward::SlackTs;
use serde_json::{Map, Value, json};
use sqlx::PgConnection;
use store::contracts::ItemRef;
use store::events::{EventSubject, IntegrationEvent, Recipient, Recorded, record};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::channel::Channel;

pub const POSTED: &str = "slack.message.posted";
pub const EDITED: &str = "slack.message.edited";
pub const DELETED: &str = "slack.message.deleted";
pub const ACTIVATED: &str = "slack.channel.activated";
pub const PAUSED: &str = "slack.channel.paused";
pub const RESUMED: &str = "slack.channel.resumed";
pub const ERASED: &str = "slack.channel.erased";

/// Slack's event contract.
pub const EVENT_TYPES: &[&str] = &[POSTED, EDITED, DELETED, ACTIVATED, PAUSED, RESUMED, ERASED];

/// The scope kind of Slack's events: a connection's channel.
pub const CHANNEL: &str = "slack_channel";

/// A change of a kept message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageChange {
    Posted,
    /// Edited at this `edited.ts`.
    Edited(SlackTs),
    Deleted,
}

fn subject(channel: &Channel) -> EventSubject {
    EventSubject {
        kind: CHANNEL,
        id: channel.id,
    }
}

/// Records a message's change for the channel's workspace, in the writer's transaction.
pub async fn message(
    txn: &mut PgConnection,
    channel: &Channel,
    message_id: Uuid,
    ts: SlackTs,
    change: MessageChange,
) -> Result<Recorded, sqlx::Error> {
    let key = format!("{}:{ts}", channel.slack_id);
    let mut detail = Map::new();
    detail.insert("channel".into(), Value::String(channel.slack_id.clone()));
    detail.insert("ts".into(), Value::String(ts.to_string()));
    let (event_type, source_key, occurred_at) = match change {
        MessageChange::Posted => (POSTED, key, Some(ts.time())),
        MessageChange::Edited(edited) => {
            detail.insert("edited_ts".into(), Value::String(edited.to_string()));
            (
                EDITED,
                format!("{key}:edited:{edited}"),
                Some(edited.time()),
            )
        }
        MessageChange::Deleted => (DELETED, format!("{key}:deleted"), None),
    };
    let event = IntegrationEvent {
        subject: subject(channel),
        item: ItemRef {
            kind: "slack_message".into(),
            id: message_id,
        },
        event_type: event_type.into(),
        source_key,
        occurred_at,
        connection_id: Some(channel.connection_id),
        detail,
    };
    record(txn, &event, &[Recipient::new(channel.workspace_id)]).await
}

/// Records a channel's consent change (`ACTIVATED`, `PAUSED`, `RESUMED`, `ERASED`), keyed by
/// the instant it took effect.
pub async fn channel(
    txn: &mut PgConnection,
    channel: &Channel,
    event_type: &'static str,
    at: OffsetDateTime,
    consent_ts: Option<SlackTs>,
) -> Result<Recorded, sqlx::Error> {
    let mut detail = Map::new();
    detail.insert("channel".into(), json!(channel.slack_id));
    if let Some(consent) = consent_ts {
        detail.insert("consent_ts".into(), json!(consent.to_string()));
    }
    let event = IntegrationEvent {
        subject: subject(channel),
        item: ItemRef {
            kind: CHANNEL.into(),
            id: channel.id,
        },
        event_type: event_type.into(),
        source_key: format!(
            "{}:{event_type}:{}",
            channel.slack_id,
            at.unix_timestamp_nanos() / 1000
        ),
        occurred_at: Some(at),
        connection_id: Some(channel.connection_id),
        detail,
    };
    record(txn, &event, &[Recipient::new(channel.workspace_id)]).await
}
