//! Integration events, the generic ledger: one row in `integration_event` per change a vendor
//! reports, whichever path reports it, and one message per workspace of its audience on
//! `events.<workspaceId>.<type>`, through the outbox in the writer's transaction. Its unique key
//! (item, type, source key) absorbs a second report of the same change, which then publishes
//! nothing. A vendor calls [`record`] with its scope and the workspaces it decided hear of the
//! change; a forge item's change is one case of it (`scm_mirror::events`).

use serde_json::{Map, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::contracts::{IntegrationEventMessage, ItemRef};
use crate::outbox;

/// The vendor scope an event belongs to: a mirrored repository, a channel, a collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSubject {
    /// Lowercase ASCII, digits and `_`; the message names the scope as `<kind>_id`.
    pub kind: &'static str,
    pub id: Uuid,
}

impl EventSubject {
    /// The subject kind of a mirrored repository, shared between connections and erased with
    /// the repository (its messages carry `Forgesync-Repository`).
    pub const REPOSITORY: &'static str = "repository";

    pub fn repository(id: Uuid) -> Self {
        EventSubject {
            kind: Self::REPOSITORY,
            id,
        }
    }
}

/// One change, as any vendor reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct IntegrationEvent {
    pub subject: EventSubject,
    pub item: ItemRef,
    /// The event's type, the last token of its subject (`scm.issue.opened`, `chat.message.edited`).
    pub event_type: String,
    /// The change's identity: every path that reports the same change derives the same key.
    pub source_key: String,
    pub occurred_at: Option<OffsetDateTime>,
    /// The connection whose copy of the content it is alone, erased with it; `None` for content
    /// shared between connections (a forge repository), erased with its subject.
    pub connection_id: Option<Uuid>,
    /// The vendor's own fields, carried in the message beside the generic ones.
    pub detail: Map<String, Value>,
}

/// One workspace the event fans out to, and the id of its copy (the message's id and dedup key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recipient {
    pub workspace_id: Uuid,
    pub message_id: Uuid,
}

impl Recipient {
    /// A workspace with a fresh message id.
    pub fn new(workspace_id: Uuid) -> Self {
        Recipient {
            workspace_id,
            message_id: Uuid::now_v7(),
        }
    }
}

/// What [`record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// New: the ledger row's id, and one message enqueued per recipient.
    New { id: Uuid, published: usize },
    /// A second report of a recorded change: nothing written, nothing published.
    Absorbed,
}

impl Recorded {
    pub fn is_new(&self) -> bool {
        matches!(self, Recorded::New { .. })
    }
}

/// A timestamp as the events' readers expect it (RFC 3339), never serde's tuple form.
pub fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| at.unix_timestamp().to_string())
}

/// Records `event` inside the writer's transaction and enqueues its message for each of
/// `audience` (a workspace outside it hears nothing). A second report of the same change
/// (same item, type and source key) is absorbed.
pub async fn record(
    txn: &mut sqlx::PgConnection,
    event: &IntegrationEvent,
    audience: &[Recipient],
) -> Result<Recorded, sqlx::Error> {
    let workspaces: Vec<Uuid> = audience.iter().map(|r| r.workspace_id).collect();
    // The unique key (item, type, source key) absorbs a repeat.
    let inserted: Option<(Uuid,)> = sqlx::query_as(
        "INSERT INTO integration_event (id, connection_id, subject_kind, subject_id, item_kind,
                                        item_id, type, source_key, occurred_at, workspace_ids)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT DO NOTHING
         RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(event.connection_id)
    .bind(event.subject.kind)
    .bind(event.subject.id)
    .bind(&event.item.kind)
    .bind(event.item.id)
    .bind(&event.event_type)
    .bind(&event.source_key)
    .bind(event.occurred_at)
    .bind(&workspaces)
    .fetch_optional(&mut *txn)
    .await?;
    let Some((id,)) = inserted else {
        return Ok(Recorded::Absorbed);
    };
    let mut detail = event.detail.clone();
    detail.insert(
        format!("{}_id", event.subject.kind),
        Value::String(event.subject.id.to_string()),
    );
    let repository_id =
        (event.subject.kind == EventSubject::REPOSITORY).then_some(event.subject.id);
    for recipient in audience {
        let message = IntegrationEventMessage {
            id: recipient.message_id,
            event_type: event.event_type.clone(),
            workspace_id: recipient.workspace_id,
            item: event.item.clone(),
            source_key: event.source_key.clone(),
            occurred_at: event.occurred_at.map(rfc3339),
            detail: detail.clone(),
            connection_id: event.connection_id,
            repository_id,
        };
        outbox::enqueue_contract(&mut *txn, &message).await?;
    }
    Ok(Recorded::New {
        id,
        published: audience.len(),
    })
}

/// What the generic ledger holds of a connection whose events are its own (`connection_id`
/// set): the ledger rows and their messages in the event stream. A forge's events name no
/// connection and go with their repository (the SCM mirror's holder).
pub static ERASABLE: crate::erasure::Erasable = {
    use crate::erasure::{ErasableTable, Selector::Connection};
    crate::erasure::Erasable {
        holder: "events",
        order: 150,
        kinds: &[],
        tables: &[ErasableTable {
            table: "integration_event",
            selector: Connection("connection_id = $1"),
        }],
        content: &[],
        streams: &["EVENTS"],
        repository_streams: &[],
        connection_subjects: crate::erasure::no_subjects,
        workspace_subjects: crate::erasure::no_workspace_subjects,
    }
};
