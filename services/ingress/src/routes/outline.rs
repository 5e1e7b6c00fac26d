//! `POST /webhooks/outline/{token}`: `Outline-Signature: t=<ms>,s=<hex HMAC("<t>.<body>")>`.
//! Subject `outline.?connection.<connectionId>.<event>`: the subscription id is Outline's to
//! assign, so deliveries are routed by the endpoint's connection, whose consumer was confirmed
//! before the subscription was created. The delivery id is the dedup key.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use lifecycle_core::subject;
use store::entity::ConnectionKind;

use super::{header, json_object, str_at};
use crate::accept::{Routed, accept, select_headers};
use crate::endpoint::{Endpoint, Lookup, with_fresh_retry};
use crate::reject::Rejection;
use crate::{AppState, verify};

const VENDOR: &str = "outline";

const KEPT: &[&str] = &["Content-Type", "User-Agent"];

pub async fn receive(
    State(state): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        // The token names the endpoint: an unknown one is refused before the body is read.
        let lookup = Lookup::AddressToken(&token);
        super::known(&state, lookup, Rejection::unknown_endpoint).await?;
        let body = state
            .read_body(&headers, body, state.settings.body_limits.outline)
            .await?;
        with_fresh_retry(|attempt| {
            let (state, headers, body) = (&state, &headers, body.bytes.clone());
            async move {
                let ep = state
                    .endpoints
                    .find_one(&state.db, &state.secret_key, lookup, &attempt)
                    .await?;
                if ep.ids.kind != ConnectionKind::Outline {
                    return Err(Rejection::unknown_endpoint());
                }
                deliver(state, &ep, headers, body).await
            }
        })
        .await
    };
    run.await.unwrap_or_else(|r| r.respond(VENDOR))
}

/// Verifies, routes and stores an Outline delivery to `ep`.
pub async fn deliver(
    state: &AppState,
    ep: &Endpoint,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    let raw = header(headers, "Outline-Signature")
        .ok_or_else(|| Rejection::missing_signature("Outline-Signature"))?;
    let sig = verify::parse_outline(raw).ok_or_else(Rejection::bad_signature)?;
    let verified = ep.verify(|secret| verify::outline(secret, &sig, &body))?;
    ep.ensure_enabled()?;
    let payload = json_object(&body)?;
    let routed = route(&payload, ep.ids.connection_id)?;
    // The subscription in a signed body must be the one this endpoint was made for; an endpoint
    // bound to none takes nothing (it would take every subscription's deliveries).
    if ep.provider_ref.as_deref() != str_at(&payload, "/webhookSubscriptionId") {
        return Err(Rejection::malformed(
            "webhookSubscriptionId is not the subscription this endpoint belongs to",
        ));
    }
    accept(
        state,
        VENDOR,
        ep,
        verified,
        routed,
        select_headers(headers, KEPT),
        body,
    )
    .await
}

/// The subject of an Outline delivery received on an endpoint of `connection_id`.
pub fn route(p: &serde_json::Value, connection_id: uuid::Uuid) -> Result<Routed, Rejection> {
    let (Some(_subscription), Some(event)) =
        (str_at(p, "/webhookSubscriptionId"), str_at(p, "/event"))
    else {
        return Err(Rejection::malformed(
            "the payload needs webhookSubscriptionId and event",
        ));
    };
    Ok(Routed {
        event: event.to_owned(),
        subject: subject::outline(&connection_id.to_string(), event)?,
        event_id: str_at(p, "/id").map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::route;
    use serde_json::json;

    #[test]
    fn deliveries_route_by_connection() {
        let p = json!({"id": "d1", "webhookSubscriptionId": "S1", "event": "documents.update",
            "payload": {"id": "doc", "model": {}}});
        let connection = uuid::Uuid::nil();
        let r = route(&p, connection).unwrap();
        assert_eq!(
            r.subject,
            format!("outline.?connection.{connection}.documents%2Eupdate")
        );
        assert_eq!(r.event_id.as_deref(), Some("d1"));
    }
}
