//! `POST /webhooks/slack`: the Events API. v0 signature over `v0:<timestamp>:<body>`, requests
//! older than the tolerance refused, `url_verification` answered with its challenge and nothing
//! stored. The body is verified against the app-level Slack endpoints' secrets before anything of
//! it is parsed; then its `team_id` picks the team's endpoint among those whose secret signed it
//! (a challenge names no team: any of them). Subject `slack.<team>.<channel or ?>.<event>`.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use lifecycle_core::subject;
use store::entity::ConnectionKind;

use super::{header, json_object, str_at};
use crate::accept::{Routed, accept, select_headers};
use crate::endpoint::{Endpoint, Lookup, signed_by, with_fresh_retry};
use crate::reject::Rejection;
use crate::{AppState, verify};

const VENDOR: &str = "slack";

const KEPT: &[&str] = &[
    "X-Slack-Request-Timestamp",
    "X-Slack-Retry-Num",
    "X-Slack-Retry-Reason",
    "Content-Type",
    "User-Agent",
];

/// App-level Slack endpoints read for one delivery at most.
const APP_ENDPOINTS: u32 = 10_000;

/// Distinct signing secrets one delivery is checked against at most. The route is for the
/// operator's Slack app, whose installations share its signing secret; an endpoint with a secret
/// of its own belongs on its token route (`/hooks/{token}`).
const APP_SECRETS: usize = 32;

pub async fn receive(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let run = async {
        // A request without a fresh timestamp and a signature, or with no Slack app to verify it,
        // is refused before its body is read.
        signed(&state, &headers)?;
        let app = Lookup::AppLevel(ConnectionKind::Slack);
        super::known(&state, app, Rejection::unknown_hook).await?;
        let body = state
            .read_body(&headers, body, state.settings.body_limits.slack)
            .await?;
        with_fresh_retry(|attempt| {
            let (state, headers, body) = (&state, &headers, body.bytes.clone());
            async move {
                let candidates = state
                    .endpoints
                    .find(&state.db, &state.secret_key, app, APP_ENDPOINTS, &attempt)
                    .await?;
                let (ts, sig) = signed(state, headers)?;
                // Nothing of the body is parsed before its signature verifies: the body is
                // checked against each distinct secret once, and only then is the team read,
                // to pick among the endpoints whose secret signed it.
                let verified = signed_by(&candidates, APP_SECRETS, |secret| {
                    verify::slack(secret, ts, sig, &body)
                });
                if verified.is_empty() {
                    return Err(Rejection::bad_signature());
                }
                let ep = match team_id(&body) {
                    Some(team) => verified
                        .into_iter()
                        .find(|ep| {
                            ep.provider_ref
                                .as_deref()
                                .is_some_and(|t| t.eq_ignore_ascii_case(&team))
                        })
                        // Signed, but not by this team's app: answered like any refusal here.
                        .ok_or_else(Rejection::unknown_hook)?,
                    None => verified[0],
                };
                deliver(state, ep, headers, body).await
            }
        })
        .await
    };
    run.await.unwrap_or_else(|r| r.respond(VENDOR))
}

/// The top-level `team_id` of a verified body, read without building the rest of the document;
/// `None` when absent, empty or not JSON.
fn team_id(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Team {
        team_id: Option<String>,
    }
    serde_json::from_slice::<Team>(body)
        .ok()?
        .team_id
        .filter(|t| !t.is_empty())
}

/// The timestamp and signature headers, once the timestamp is fresh.
fn signed<'a>(state: &AppState, headers: &'a HeaderMap) -> Result<(&'a str, &'a str), Rejection> {
    let ts = header(headers, "X-Slack-Request-Timestamp")
        .ok_or_else(|| Rejection::missing_signature("X-Slack-Request-Timestamp"))?;
    let sig = header(headers, "X-Slack-Signature")
        .ok_or_else(|| Rejection::missing_signature("X-Slack-Signature"))?;
    // Replay guard: a timestamp too far from now is refused before any verification.
    let tolerance = state.settings.slack_tolerance.as_secs();
    let then: i64 = ts
        .parse()
        .map_err(|_| Rejection::stale_timestamp(tolerance))?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    if now.abs_diff(then) > tolerance {
        return Err(Rejection::stale_timestamp(tolerance));
    }
    Ok((ts, sig))
}

/// Verifies and routes a Slack request to `ep`; a challenge is echoed and nothing is stored.
pub async fn deliver(
    state: &AppState,
    ep: &Endpoint,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    let (ts, sig) = signed(state, headers)?;
    let verified = ep.verify(|secret| verify::slack(secret, ts, sig, &body))?;
    ep.ensure_enabled()?;
    let payload = json_object(&body)?;
    if str_at(&payload, "/type") == Some("url_verification") {
        let challenge = str_at(&payload, "/challenge")
            .ok_or_else(|| Rejection::malformed("url_verification without a challenge"))?;
        return Ok((
            StatusCode::OK,
            Json(serde_json::json!({ "challenge": challenge })),
        )
            .into_response());
    }
    let routed = route(&payload)?;
    // A team's endpoint carries only its own team's events (the generic route finds the
    // endpoint by its token, not by the team the body names).
    if let Some(expected) = &ep.provider_ref
        && let Some(team) = str_at(&payload, "/team_id")
        && !expected.eq_ignore_ascii_case(team)
    {
        return Err(Rejection::malformed(
            "team_id is not the Slack team this endpoint belongs to",
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

/// The subject of an Events API payload.
pub fn route(p: &serde_json::Value) -> Result<Routed, Rejection> {
    // Without a team only url_verification is accepted (answered before routing).
    let team = str_at(p, "/team_id").ok_or_else(|| {
        Rejection::malformed("a Slack request without team_id is accepted only as url_verification")
    })?;
    let event = str_at(p, "/event/type")
        .or_else(|| str_at(p, "/type"))
        .ok_or_else(|| Rejection::malformed("the payload has no event type"))?;
    // The channel is a string on message events, an object on channel_* events, and under
    // `item` on reactions.
    let channel = str_at(p, "/event/channel")
        .or_else(|| str_at(p, "/event/channel/id"))
        .or_else(|| str_at(p, "/event/item/channel"))
        .or_else(|| str_at(p, "/event/channel_id"));
    Ok(Routed {
        event: event.to_owned(),
        subject: subject::slack(team, channel, event)?,
        event_id: str_at(p, "/event_id").map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::route;
    use serde_json::json;

    #[test]
    fn channel_events_route_by_channel_and_team_events_by_team() {
        let m = json!({"team_id": "T1", "event_id": "Ev1", "type": "event_callback",
            "event": {"type": "message", "channel": "C9"}});
        let r = route(&m).unwrap();
        assert_eq!(r.subject, "slack.t1.c9.message");
        assert_eq!(r.event_id.as_deref(), Some("Ev1"));
        let t = json!({"team_id": "T1", "event": {"type": "team_join", "user": {}}});
        assert_eq!(route(&t).unwrap().subject, "slack.t1.?.team_join");
        let c =
            json!({"team_id": "T1", "event": {"type": "channel_rename", "channel": {"id": "C2"}}});
        assert_eq!(route(&c).unwrap().subject, "slack.t1.c2.channel_rename");
    }
}
