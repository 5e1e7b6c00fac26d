//! The generic events Outline publishes, one per change whichever path reports it (a delivery,
//! a reconcile's page, a confirmed vanish): `outline.document.published|updated|moved|deleted|
//! restored` and `outline.collection.deleted`, scoped to the document's collection. They carry
//! ids and dates, never titles or text. A version's source key is the document and its
//! `updatedAt`; a deletion's, the document and its date.

use serde_json::{Map, Value, json};
use sqlx::PgConnection;
use store::contracts::ItemRef;
use store::events::{EventSubject, IntegrationEvent, Recipient, Recorded, record, rfc3339};

use crate::OutlineConnection;
use crate::collection::{Collection, CollectionWritten};
use crate::document::{DocumentKey, Written};

pub const PUBLISHED: &str = "outline.document.published";
pub const UPDATED: &str = "outline.document.updated";
pub const MOVED: &str = "outline.document.moved";
pub const DELETED: &str = "outline.document.deleted";
pub const RESTORED: &str = "outline.document.restored";
pub const COLLECTION_DELETED: &str = "outline.collection.deleted";

/// Outline's event contract.
pub const EVENT_TYPES: &[&str] = &[
    PUBLISHED,
    UPDATED,
    MOVED,
    DELETED,
    RESTORED,
    COLLECTION_DELETED,
];

/// The scope kind of Outline's events: a connection's collection.
pub const COLLECTION: &str = "outline_collection";
/// The item kind of a document's events.
pub const DOCUMENT: &str = "outline_document";

/// The event type a document write announces; `None` when it announces nothing (unchanged, or
/// a draft inserted unpublished).
pub fn document_event_type(written: &Written) -> Option<&'static str> {
    match written {
        Written::Inserted(d) => d.published_at.is_some().then_some(PUBLISHED),
        Written::Published(_) => Some(PUBLISHED),
        Written::Updated(_) | Written::Renamed(_) => Some(UPDATED),
        Written::Moved { .. } => Some(MOVED),
        Written::Tombstoned(_) => Some(DELETED),
        Written::Restored(_) => Some(RESTORED),
        Written::Unchanged => None,
    }
}

/// Records a document's change for its connection's workspace, in the writer's transaction;
/// `None` when the write announces nothing.
pub async fn document(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    written: &Written,
) -> Result<Option<Recorded>, sqlx::Error> {
    let (Some(event_type), Some(d)) = (document_event_type(written), written.document()) else {
        return Ok(None);
    };
    let mut detail = Map::new();
    detail.insert("outline_id".into(), json!(d.outline_id));
    detail.insert("collection".into(), json!(d.collection_outline_id));
    if let Some(updated_at) = d.updated_at {
        detail.insert("updated_at".into(), json!(rfc3339(updated_at)));
    }
    if let Written::Moved {
        from_collection_outline_id,
        ..
    } = written
    {
        detail.insert("from_collection".into(), json!(from_collection_outline_id));
        detail.insert("parent".into(), json!(d.parent_outline_id));
    }
    if let Written::Renamed(_) = written {
        detail.insert("renamed".into(), Value::Bool(true));
    }
    // A version's identity is its `updatedAt`, a deletion's its date.
    let (source_key, occurred_at) = match (written, d.deleted_at, d.updated_at) {
        (Written::Tombstoned(_), Some(at), _) => {
            detail.insert("deleted_at".into(), json!(rfc3339(at)));
            (format!("{}:deleted:{}", d.outline_id, rfc3339(at)), at)
        }
        (_, _, Some(at)) => (format!("{}:{}", d.outline_id, rfc3339(at)), at),
        // Every change but a deletion writes a version.
        (_, _, None) => return Ok(None),
    };
    let event = IntegrationEvent {
        subject: EventSubject {
            kind: COLLECTION,
            id: d.collection_id,
        },
        item: ItemRef {
            kind: DOCUMENT.into(),
            id: d.id,
        },
        event_type: event_type.into(),
        source_key,
        occurred_at: Some(occurred_at),
        connection_id: Some(connection.id()),
        detail,
    };
    record(txn, &event, &[Recipient::new(connection.workspace_id())])
        .await
        .map(Some)
}

/// Records a collection write's events: a deletion announces the collection's and each of its
/// documents' (other collection writes announce nothing). Returns how many were new.
pub async fn collection(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    written: &CollectionWritten,
) -> Result<usize, sqlx::Error> {
    let CollectionWritten::Tombstoned {
        collection,
        documents,
    } = written
    else {
        return Ok(0);
    };
    let mut new = usize::from(
        collection_deleted(txn, connection, collection)
            .await?
            .is_new(),
    );
    for d in documents {
        let written = Written::Tombstoned(DocumentKey::clone(d));
        if let Some(recorded) = document(txn, connection, &written).await? {
            new += usize::from(recorded.is_new());
        }
    }
    Ok(new)
}

async fn collection_deleted(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    c: &Collection,
) -> Result<Recorded, sqlx::Error> {
    let at = c.deleted_at.unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let mut detail = Map::new();
    detail.insert("outline_id".into(), json!(c.outline_id));
    detail.insert("deleted_at".into(), json!(rfc3339(at)));
    let event = IntegrationEvent {
        subject: EventSubject {
            kind: COLLECTION,
            id: c.id,
        },
        item: ItemRef {
            kind: COLLECTION.into(),
            id: c.id,
        },
        event_type: COLLECTION_DELETED.into(),
        source_key: format!("{}:deleted:{}", c.outline_id, rfc3339(at)),
        occurred_at: Some(at),
        connection_id: Some(connection.id()),
        detail,
    };
    record(txn, &event, &[Recipient::new(connection.workspace_id())]).await
}
