//! Dead messages: what a consumer could not process within its delivery budget, kept in Postgres
//! with the reason, listed by `control-api` and replayed through the outbox.

use std::collections::BTreeMap;

use async_nats::HeaderMap;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ConnectionTrait, DbErr, EntityTrait, QuerySelect,
    TransactionTrait,
};
use store::entity::dead_message;
use store::outbox::{self, OutboxMessage};
use uuid::Uuid;

use crate::MSG_ID_HEADER;

/// A message to record as dead.
#[derive(Debug, Clone)]
pub struct DeadMessage {
    pub stream: String,
    pub consumer: String,
    /// Logical subject (without namespace).
    pub subject: String,
    pub headers: Option<HeaderMap>,
    pub payload: Vec<u8>,
    pub reason: String,
    pub attempts: i64,
}

/// Headers as JSON, first value per name; `Nats-Msg-Id` is dropped so a replay is new.
pub fn headers_to_json(headers: Option<&HeaderMap>) -> serde_json::Value {
    let mut map = BTreeMap::new();
    if let Some(h) = headers {
        for (name, values) in h.iter() {
            let name = name.to_string();
            if name.eq_ignore_ascii_case(MSG_ID_HEADER) {
                continue;
            }
            if let Some(v) = values.first() {
                map.insert(name, v.as_str().to_owned());
            }
        }
    }
    serde_json::to_value(map).unwrap_or_default()
}

/// Dead messages kept per workspace: past it, recording one drops that workspace's oldest.
pub const KEPT_PER_WORKSPACE: i64 = 1_000;

/// Records a dead message; returns its id. A message of a workspace past its quota
/// ([`KEPT_PER_WORKSPACE`]) displaces that workspace's oldest, counted in
/// `dead_messages_pruned_total`.
pub async fn record<C: ConnectionTrait>(db: &C, message: DeadMessage) -> Result<Uuid, DbErr> {
    let headers = headers_to_json(message.headers.as_ref());
    record_with_headers(db, message, headers).await
}

/// Records a dead message whose headers are already JSON (`message.headers` is ignored), such
/// as an outbox row's, which may hold what NATS cannot carry.
pub async fn record_with_headers<C: ConnectionTrait>(
    db: &C,
    message: DeadMessage,
    headers: serde_json::Value,
) -> Result<Uuid, DbErr> {
    let id = Uuid::now_v7();
    // The workspace the message belongs to, as its routing header names it (a header we wrote:
    // a relay or ingress stamps it, never a sender).
    let workspace = headers
        .get(store::headers::WORKSPACE)
        .and_then(|v| v.as_str())
        .and_then(|v| v.parse::<Uuid>().ok())
        .map(|w| w.to_string());
    dead_message::Entity::insert(dead_message::ActiveModel {
        id: Set(id),
        stream: Set(message.stream),
        consumer: Set(message.consumer),
        subject: Set(message.subject),
        headers: Set(headers),
        payload: Set(message.payload),
        reason: Set(message.reason),
        attempts: Set(message.attempts),
        ..Default::default()
    })
    .exec_without_returning(db)
    .await?;
    if let Some(workspace) = workspace {
        let pruned = db
            .execute_raw(sea_orm::Statement::from_sql_and_values(
                sea_orm::DbBackend::Postgres,
                format!(
                    "DELETE FROM dead_message WHERE id IN (
                         SELECT id FROM dead_message
                          WHERE headers ? '{w}' AND headers ->> '{w}' = $1
                          ORDER BY created_at DESC, id DESC
                         OFFSET $2)",
                    w = store::headers::WORKSPACE
                ),
                [workspace.clone().into(), KEPT_PER_WORKSPACE.into()],
            ))
            .await?
            .rows_affected();
        if pruned > 0 {
            metrics::counter!("dead_messages_pruned_total").increment(pruned);
            tracing::warn!(%workspace, pruned, kept = KEPT_PER_WORKSPACE,
                "a workspace's dead messages passed their quota; its oldest were dropped");
        }
    }
    Ok(id)
}

/// Deletes the dead copies of `deliveries` (by the delivery their headers name), when one
/// delivery is erased on its own ([`crate::erasure::erase_delivery`]).
pub async fn forget_deliveries<C: ConnectionTrait>(
    db: &C,
    deliveries: &[Uuid],
) -> Result<u64, DbErr> {
    if deliveries.is_empty() {
        return Ok(0);
    }
    let ids = format!(
        "{{{}}}",
        deliveries
            .iter()
            .map(Uuid::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    let res = db
        .execute_raw(sea_orm::Statement::from_sql_and_values(
            sea_orm::DbBackend::Postgres,
            format!(
                "DELETE FROM dead_message WHERE headers ->> '{}' = ANY($1::text[])",
                store::headers::DELIVERY
            ),
            [ids.into()],
        ))
        .await?;
    Ok(res.rows_affected())
}

/// Why a replay did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("no dead message {0}")]
    NotFound(Uuid),
    #[error(transparent)]
    Closed(#[from] store::inbound::ReplayClosed),
    #[error(transparent)]
    Db(#[from] DbErr),
}

/// Replays a dead message: in one transaction its copy goes to the outbox (a new message id, so
/// the stream does not absorb it) and the replay is counted.
pub async fn replay(
    db: &sea_orm::DatabaseConnection,
    id: Uuid,
) -> Result<dead_message::Model, ReplayError> {
    let txn = db.begin().await?;
    let row = dead_message::Entity::find_by_id(id)
        .lock_exclusive()
        .one(&txn)
        .await?
        .ok_or(ReplayError::NotFound(id))?;
    let mut headers: BTreeMap<String, String> =
        serde_json::from_value(row.headers.clone()).unwrap_or_default();
    relink_trace(&mut headers);
    // A message of a connection replays only while it is active (and its endpoint enabled).
    if let Some(conn) = headers.get(store::headers::CONNECTION) {
        let conn = Uuid::parse_str(conn).unwrap_or_default();
        let delivery = headers
            .get(store::headers::DELIVERY)
            .and_then(|d| Uuid::parse_str(d).ok());
        if let Some(closed) = store::inbound::replay_refusal(&txn, conn, delivery).await? {
            return Err(closed.into());
        }
    }
    let mut message = OutboxMessage {
        subject: row.subject.clone(),
        headers,
        payload: row.payload.clone(),
        msg_id: None,
    };
    message = message.header(store::headers::REPLAY_OF, id.to_string());
    outbox::enqueue(&txn, message).await?;
    let mut active: dead_message::ActiveModel = row.clone().into();
    active.replay_count = Set(row.replay_count + 1);
    active.replayed_at = Set(Some(time::OffsetDateTime::now_utc()));
    let updated = active.update(&txn).await?;
    txn.commit().await?;
    Ok(updated)
}

/// A replay travels in the trace of whoever replays it (the enqueue stamps it) and is linked to
/// the trace the message first travelled in: that `traceparent` moves to
/// [`store::trace::TRACE_LINK`] (a replay of a replay keeps the first original).
pub fn relink_trace(headers: &mut BTreeMap<String, String>) {
    use store::trace::{TRACE_LINK, TRACEPARENT, TRACESTATE};
    let original = headers.remove(TRACEPARENT);
    headers.remove(TRACESTATE);
    if let Some(original) = original
        && !headers.contains_key(TRACE_LINK)
        && store::trace::parse_traceparent(&original).is_some()
    {
        headers.insert(TRACE_LINK.to_owned(), original);
    }
}

/// What the bus holds of a connection, for the eraser: dispatch records of content not yet
/// published and dead messages (with their replay copies, which are dispatch records again), both naming the
/// connection in their headers. Runs after every other holder, so a message a holder's
/// erasure left in flight is caught too.
pub static ERASABLE: store::erasure::Erasable = store::erasure::Erasable {
    holder: "bus",
    order: 900,
    kinds: &[],
    tables: &[
        store::erasure::ErasableTable {
            table: "outbox",
            // Lifecycle and job announcements carry no content and still have readers.
            selector: store::erasure::Selector::Connection(
                "headers ->> 'Forgesync-Connection' = $1::text \
                 AND split_part(subject, '.', 1) NOT IN ('lifecycle', 'jobs')",
            ),
        },
        store::erasure::ErasableTable {
            table: "dead_message",
            selector: store::erasure::Selector::Connection(store::erasure::CONNECTION_HEADER),
        },
        store::erasure::ErasableTable {
            table: "outbox",
            selector: store::erasure::Selector::Workspace(
                "headers ->> 'Forgesync-Workspace' = $1::text \
                 AND split_part(subject, '.', 1) NOT IN ('lifecycle', 'jobs')",
            ),
        },
        store::erasure::ErasableTable {
            table: "dead_message",
            selector: store::erasure::Selector::Workspace(
                "headers ->> 'Forgesync-Workspace' = $1::text",
            ),
        },
    ],
    // Messages in flight and dead ones carry their payload; their rows go whole.
    content: &[
        store::erasure::ContentTable {
            table: "outbox",
            columns: &["payload"],
        },
        store::erasure::ContentTable {
            table: "dead_message",
            columns: &["payload"],
        },
    ],
    streams: &[],
    repository_streams: &[],
    connection_subjects: store::erasure::no_subjects,
    workspace_subjects: store::erasure::no_workspace_subjects,
};

#[cfg(test)]
mod tests {
    use super::*;
    use store::trace::{TRACE_LINK, TRACEPARENT, TRACESTATE};

    const FIRST: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_replay_links_the_trace_it_first_travelled_in_and_drops_its_context() {
        let mut h = BTreeMap::from([
            (TRACEPARENT.to_owned(), FIRST.to_owned()),
            (TRACESTATE.to_owned(), "a=b".to_owned()),
        ]);
        relink_trace(&mut h);
        assert_eq!(h.get(TRACE_LINK).map(String::as_str), Some(FIRST));
        assert!(!h.contains_key(TRACEPARENT) && !h.contains_key(TRACESTATE));
    }

    #[test]
    fn a_replay_of_a_replay_keeps_the_first_original_and_a_malformed_one_is_dropped() {
        let mut h = BTreeMap::from([
            (TRACE_LINK.to_owned(), FIRST.to_owned()),
            (
                TRACEPARENT.to_owned(),
                "00-1af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
            ),
        ]);
        relink_trace(&mut h);
        assert_eq!(h[TRACE_LINK], FIRST);
        let mut bad = BTreeMap::from([(TRACEPARENT.to_owned(), "garbage".to_owned())]);
        relink_trace(&mut bad);
        assert!(bad.is_empty(), "{bad:?}");
    }
}
