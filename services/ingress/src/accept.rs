//! Making a verified delivery durable, answering, then publishing it.
//!
//! The 2xx is sent only after the transaction commits. The publish after it is best-effort: the
//! outbox row stays until the stream stores the message, and the relay publishes what is left.

use std::collections::BTreeMap;

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sea_orm::DatabaseTransaction;
use store::inbound::{Dedup, NewMessage, Recorded};
use store::outbox::OutboxMessage;
use uuid::Uuid;

use crate::AppState;
use crate::endpoint::{Endpoint, Verified};
use crate::reject::Rejection;

/// Where a verified delivery goes.
#[derive(Debug, Clone)]
pub struct Routed {
    pub event: String,
    pub subject: String,
    /// The vendor's id for this event, if it sends one.
    pub event_id: Option<String>,
}

/// Copies the `names` headers that are present (never signatures or tokens).
pub fn select_headers(headers: &HeaderMap, names: &[&str]) -> BTreeMap<String, String> {
    names
        .iter()
        .filter_map(|n| {
            headers
                .get(*n)
                .and_then(|v| v.to_str().ok())
                .map(|v| (n.to_ascii_lowercase(), v.to_owned()))
        })
        .collect()
}

/// Stores the delivery in `txn` (the one its endpoint was found in) and answers 200 once it
/// commits; a duplicate answers 200 and stores nothing.
#[allow(clippy::too_many_arguments)]
pub async fn accept(
    state: &AppState,
    txn: DatabaseTransaction,
    vendor: &'static str,
    endpoint: &Endpoint,
    verified: Verified,
    routed: Routed,
    headers: BTreeMap<String, String>,
    body: Bytes,
) -> Result<Response, Rejection> {
    let ids = endpoint.ids;
    let recorded = store::inbound::record(
        &txn,
        NewMessage {
            endpoint: ids,
            verification: match verified {
                Verified::Current => "signature".into(),
                Verified::Previous => "previous_signature".into(),
            },
            headers,
            body: body.to_vec(),
            event: routed.event.clone(),
            subject: routed.subject.clone(),
            dedup: Dedup::Keys {
                event_id: routed.event_id.clone(),
                digest_window: state.settings.digest_window,
            },
            retention: state.settings.retention(ids.kind),
            inline_body_max: state.settings.inline_body_bytes,
        },
    )
    .await?;
    match recorded {
        Recorded::Duplicate => {
            let _ = txn.rollback().await;
            metrics::counter!("ingress_duplicates_total", "vendor" => vendor).increment(1);
            tracing::info!(vendor, endpoint = %ids.endpoint_id, connection = %ids.connection_id,
                event_id = ?routed.event_id, "duplicate delivery; nothing stored");
            Ok((
                StatusCode::OK,
                Json(serde_json::json!({ "status": "duplicate" })),
            )
                .into_response())
        }
        Recorded::Accepted(a) => {
            txn.commit().await?;
            metrics::counter!("ingress_accepted_total", "vendor" => vendor).increment(1);
            tracing::info!(vendor, endpoint = %ids.endpoint_id, connection = %ids.connection_id,
                workspace = %ids.workspace_id, message = %a.message_id, subject = %routed.subject,
                "delivery stored");
            spawn_publish(state, a.outbox_id, a.message);
            Ok((
                StatusCode::OK,
                Json(serde_json::json!({ "status": "accepted", "message_id": a.message_id })),
            )
                .into_response())
        }
    }
}

/// Publishes a committed dispatch record now, unless the relay holds it or too many publishes
/// are in flight (the relay then takes it); the stamper then marks the row published.
pub fn spawn_publish(state: &AppState, outbox_id: Uuid, message: OutboxMessage) {
    let Ok(permit) = state.inline_publish.clone().try_acquire_owned() else {
        return;
    };
    let bus = state.bus.clone();
    let stamper = state.stamper.clone();
    tokio::spawn(async move {
        let _permit = permit;
        match publish_now(&bus, outbox_id, message).await {
            Ok(()) => stamper.stamp(outbox_id),
            Err(e) => {
                tracing::warn!(error = %e, outbox = %outbox_id, "inline publish failed; the relay will retry");
            }
        }
    });
}

async fn publish_now(
    bus: &bus::Bus,
    outbox_id: Uuid,
    message: OutboxMessage,
) -> anyhow::Result<()> {
    // No row lock and no open transaction while NATS answers: the message id is the dedup key,
    // so if the relay publishes the same row meanwhile the stream keeps one copy, and a
    // database connection is not held for a broker round trip on every delivery.
    let mut headers = async_nats::HeaderMap::new();
    for (k, v) in &message.headers {
        headers.insert(k.as_str(), v.as_str());
    }
    let msg_id = message.effective_msg_id(outbox_id);
    bus.publish(
        &message.subject,
        &msg_id,
        headers,
        Bytes::from(message.payload),
    )
    .await?;
    Ok(())
}
