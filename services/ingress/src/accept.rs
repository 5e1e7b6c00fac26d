//! Making a verified delivery durable, answering, then publishing it.
//!
//! The 2xx is sent only after the transaction commits. The publish after it is best-effort: the
//! outbox row stays until the stream stores the message, and the relay publishes what is left.

use std::collections::BTreeMap;

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sea_orm::TransactionTrait as _;
use store::inbound::{Dedup, NewMessage, Recorded};
use store::outbox::OutboxMessage;
use tracing::Instrument as _;
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

/// Longest event name or event id a vendor may send; both become message headers (the id inside
/// `Nats-Msg-Id`), and real ones are far shorter.
pub const MAX_VENDOR_VALUE_BYTES: usize = 256;

impl Routed {
    /// Refuses what could not be published: an event name or id with a control character or
    /// longer than [`MAX_VENDOR_VALUE_BYTES`], a subject longer than the server takes.
    pub fn vet(&self, max_subject_bytes: usize) -> Result<(), Rejection> {
        let check = |name, value: &str| {
            store::headers::check_value_within(name, value, MAX_VENDOR_VALUE_BYTES)
                .map_err(|e| Rejection::bad_header_value(&e))
        };
        check("event", &self.event)?;
        if let Some(id) = &self.event_id {
            check("delivery id", id)?;
        }
        if self.subject.len() > max_subject_bytes {
            return Err(Rejection::subject_too_long(format_args!(
                "its subject would be {} bytes, more than the {max_subject_bytes} the server takes",
                self.subject.len()
            )));
        }
        Ok(())
    }
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

/// Stores the delivery and answers 200 once it commits; a duplicate answers 200 and stores
/// nothing. The store re-checks, in the statement that takes the dedup keys, that `endpoint`
/// still accepts a delivery verified as `verified` (it may have been read from the cache).
pub async fn accept(
    state: &AppState,
    vendor: &'static str,
    endpoint: &Endpoint,
    verified: Verified,
    routed: Routed,
    headers: BTreeMap<String, String>,
    body: Bytes,
) -> Result<Response, Rejection> {
    // Vetted before anything is stored: a value the NATS client cannot carry never becomes a
    // dispatch record that could never publish.
    routed.vet(state.bus.max_subject_bytes())?;
    let ids = endpoint.ids;
    // What a tenant signs itself it can sign without end: its workspace's quotas bound it.
    let tenant_signed = endpoint.tenant_signed(&verified);
    if tenant_signed
        && let Err(wait) = state
            .quota
            .take(ids.workspace_id, std::time::Instant::now())
    {
        return Err(Rejection::over_quota(wait));
    }
    // The transaction that makes the delivery durable: the dispatch record it writes carries
    // this span's trace, which the publish and every consumer continue.
    let insert = tracing::info_span!(
        "durable insert",
        vendor,
        connection_id = %ids.connection_id,
        outcome = tracing::field::Empty,
    );
    let txn = state.db.begin().instrument(insert.clone()).await?;
    let daily = state.settings.workspace_bytes_per_day;
    if tenant_signed && daily > 0 {
        let bytes = i64::try_from(body.len()).unwrap_or(i64::MAX);
        let stored = store::usage::add_stored(&txn, ids.workspace_id, bytes)
            .instrument(insert.clone())
            .await?;
        if u64::try_from(stored).unwrap_or(u64::MAX) > daily {
            let _ = txn.rollback().await;
            return Err(Rejection::over_daily_quota(daily));
        }
    }
    let recorded = store::inbound::record(
        &txn,
        NewMessage {
            endpoint: ids,
            verification: if verified.previous {
                "previous_signature".into()
            } else {
                "signature".into()
            },
            headers,
            body: body.to_vec(),
            event: routed.event.clone(),
            subject: routed.subject.clone(),
            dedup: Dedup::Keys {
                event_id: routed.event_id.clone(),
                digest_window: state.settings.digest_window,
                verified_by: verified.secret,
            },
            retention: state.settings.retention(ids.kind),
            inline_body_max: state.inline_body_max(),
            relay_hold: state.settings.relay_hold,
        },
    )
    .instrument(insert.clone())
    .await?;
    match recorded {
        Recorded::EndpointClosed => {
            let _ = txn.rollback().await;
            Err(Rejection::endpoint_changed())
        }
        Recorded::Duplicate => {
            let _ = txn.rollback().await;
            insert.record("outcome", "duplicate");
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
            txn.commit().instrument(insert.clone()).await?;
            insert.record("outcome", "accepted");
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

/// Publishes a committed dispatch record now, unless too many publishes are in flight (the relay
/// then takes it once its hold ends); the record is then deleted in the background.
pub fn spawn_publish(state: &AppState, outbox_id: Uuid, message: OutboxMessage) {
    let Ok(permit) = state.inline_publish.clone().try_acquire_owned() else {
        return;
    };
    let bus = state.bus.clone();
    let published = state.published.clone();
    // Inside the request's trace, though it outlives the response.
    let span = tracing::info_span!("inline publish", outbox = %outbox_id);
    tokio::spawn(
        async move {
            let _permit = permit;
            match publish_now(&bus, outbox_id, message).await {
                Ok(landed) => published.record(landed),
                Err(e) => {
                    tracing::warn!(error = %e, outbox = %outbox_id, "inline publish failed; the relay will retry");
                }
            }
        }
        .instrument(span),
    );
}

/// Publishes and says where the stream stored the message (the ack's sequence).
async fn publish_now(
    bus: &bus::Bus,
    outbox_id: Uuid,
    message: OutboxMessage,
) -> anyhow::Result<store::outbox::Landed> {
    let stream = bus::Stream::for_subject(&message.subject)
        .ok_or_else(|| anyhow::anyhow!("no stream captures {}", message.subject))?;
    // No row lock and no open transaction while NATS answers: the message id is the dedup key,
    // so if the relay publishes the same row meanwhile the stream keeps one copy, and a
    // database connection is not held for a broker round trip on every delivery.
    let ack = bus.publish_outbox(outbox_id, message).await?;
    Ok(store::outbox::Landed {
        outbox_id,
        stream: stream.name(),
        sequence: ack.sequence,
    })
}
