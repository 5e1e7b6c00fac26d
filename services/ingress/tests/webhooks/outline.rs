//! Outline: token-addressed, `Outline-Signature` with a millisecond timestamp.

use anyhow::Result;
use bus::Stream;
use reqwest::StatusCode;
use serde_json::json;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;

use crate::support::{Harness, assert_refused, sign};

const SECRET: &str = "ol_whs_secret";

fn signed(body: &[u8], secret: &str) -> Vec<(&'static str, String)> {
    let t = (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).to_string();
    vec![(
        "Outline-Signature",
        format!("t={t},s={}", sign(secret, &[t.as_bytes(), b".", body])),
    )]
}

fn delivery() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": "3f1e-delivery", "actorId": "u-1", "webhookSubscriptionId": "sub-1",
        "createdAt": "2026-01-02T03:04:05.000Z", "event": "documents.update",
        "payload": {"id": "doc-1", "model": {"id": "doc-1", "title": "Runbook", "collectionId": "col-1",
            "updatedAt": "2026-01-02T03:04:05.000Z"}}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_routes_verify_and_route_by_connection() -> Result<()> {
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Outline, None).await?;
    h.endpoint(
        &conn,
        Registration::Registered,
        Some("sub-1"),
        Some("tok-outline-1"),
        SECRET,
    )
    .await?;
    let body = delivery();

    assert_refused(
        &h,
        h.post(
            "/webhooks/outline/tok-unknown",
            &signed(&body, SECRET),
            body.clone(),
        )
        .await?,
        StatusCode::NOT_FOUND,
        "unknown_endpoint",
    )
    .await?;
    assert_refused(
        &h,
        h.post(
            "/webhooks/outline/tok-outline-1",
            &signed(&body, "wrong"),
            body.clone(),
        )
        .await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;
    assert_refused(
        &h,
        h.post("/webhooks/outline/tok-outline-1", &[], body.clone())
            .await?,
        StatusCode::UNAUTHORIZED,
        "missing_signature",
    )
    .await?;

    let (s, text) = h
        .post(
            "/webhooks/outline/tok-outline-1",
            &signed(&body, SECRET),
            body.clone(),
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    // The generic token route reaches the same endpoint; the delivery id dedups it.
    let (s, text) = h
        .post("/hooks/tok-outline-1", &signed(&body, SECRET), body.clone())
        .await?;
    assert_eq!(
        (s, text.contains("duplicate")),
        (StatusCode::OK, true),
        "{text}"
    );

    let got = h.settled(Stream::WebhooksOutline, 1).await?;
    assert_eq!(got.len(), 1);
    // Routed by the endpoint's connection: the subscription's id is Outline's to assign.
    assert_eq!(
        got[0].subject,
        format!("outline.?connection.{}.documents%2Eupdate", conn.id)
    );
    h.ingress.stop().await
}

/// An Outline endpoint bound to no subscription (written before ids were required) takes no
/// delivery, whatever subscription its signed body names: it would otherwise carry every
/// subscription's deliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_bound_to_no_subscription_takes_nothing() -> Result<()> {
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Outline, None).await?;
    h.endpoint(
        &conn,
        Registration::Registered,
        None,
        Some("tok-outline-unbound"),
        SECRET,
    )
    .await?;
    let body = delivery();
    assert_refused(
        &h,
        h.post(
            "/webhooks/outline/tok-outline-unbound",
            &signed(&body, SECRET),
            body.clone(),
        )
        .await?,
        StatusCode::BAD_REQUEST,
        "malformed",
    )
    .await?;
    h.ingress.stop().await
}
