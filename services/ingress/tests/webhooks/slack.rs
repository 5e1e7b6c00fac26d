//! Slack: v0 signatures, a 300 s replay window, url_verification answered and not stored.

use anyhow::Result;
use bus::Stream;
use reqwest::StatusCode;
use serde_json::json;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;

use crate::support::{Harness, assert_refused, now, sign};

const SECRET: &str = "slack-signing-secret";

fn signed(body: &[u8], ts: i64, secret: &str) -> Vec<(&'static str, String)> {
    let ts = ts.to_string();
    vec![
        ("X-Slack-Request-Timestamp", ts.clone()),
        (
            "X-Slack-Signature",
            format!("v0={}", sign(secret, &[b"v0:", ts.as_bytes(), b":", body])),
        ),
    ]
}

fn message_event() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "token": "legacy", "team_id": "T0ACME", "api_app_id": "A1", "type": "event_callback",
        "event_id": "Ev08MFMKH6", "event_time": 1_700_000_000,
        "event": {"type": "message", "channel": "C0GENERAL", "user": "U1", "text": "hi",
            "ts": "1700000000.000100", "channel_type": "channel"},
        "authorizations": [{"team_id": "T0ACME", "user_id": "U1", "is_bot": false}]
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_verification_echoes_the_challenge_and_stores_nothing() -> Result<()> {
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Slack, None).await?;
    h.endpoint(&conn, Registration::App, Some("T0ACME"), None, SECRET)
        .await?;
    let body = serde_json::to_vec(
        &json!({"token": "legacy", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}),
    )?;
    let (s, text) = h
        .post(
            "/webhooks/slack",
            &signed(&body, now(), SECRET),
            body.clone(),
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text)?;
    assert_eq!(
        answer["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );
    assert_eq!(h.footprint().await?, [0, 0, 0, 0]);
    // Even a challenge must be signed.
    assert_refused(
        &h,
        h.post("/webhooks/slack", &signed(&body, now(), "wrong"), body)
            .await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_signed_fresh_and_routed_by_team_and_channel() -> Result<()> {
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Slack, None).await?;
    h.endpoint(&conn, Registration::App, Some("T0ACME"), None, SECRET)
        .await?;
    let body = message_event();

    // A correctly signed but stale request is a replay.
    assert_refused(
        &h,
        h.post(
            "/webhooks/slack",
            &signed(&body, now() - 301, SECRET),
            body.clone(),
        )
        .await?,
        StatusCode::UNAUTHORIZED,
        "stale_timestamp",
    )
    .await?;
    assert_refused(
        &h,
        h.post(
            "/webhooks/slack",
            &signed(&body, now(), "wrong"),
            body.clone(),
        )
        .await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;
    let mut other_team = serde_json::from_slice::<serde_json::Value>(&body)?;
    other_team["team_id"] = json!("T0OTHER");
    let other = serde_json::to_vec(&other_team)?;
    assert_refused(
        &h,
        h.post("/webhooks/slack", &signed(&other, now(), SECRET), other)
            .await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;

    let started = std::time::Instant::now();
    let (s, text) = h
        .post(
            "/webhooks/slack",
            &signed(&body, now() - 200, SECRET),
            body.clone(),
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "Slack waits 3 s at most"
    );
    // Slack's retry carries the same event_id.
    let mut retry = signed(&body, now(), SECRET);
    retry.push(("X-Slack-Retry-Num", "1".into()));
    let (s, text) = h.post("/webhooks/slack", &retry, body.clone()).await?;
    assert_eq!(
        (s, text.contains("duplicate")),
        (StatusCode::OK, true),
        "{text}"
    );

    let got = h.settled(Stream::WebhooksSlack, 1).await?;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].subject, "slack.t0acme.c0general.message");
    h.ingress.stop().await
}
