//! Bad input changes nothing and says why: a message dated past its receipt, a malformed ts,
//! another team's event on the connection's endpoint, an unknown channel. And a connection
//! resumed after a suspension keeps nothing from the suspension.

mod common;

use anyhow::{Result, anyhow};
use common::{World, send_to_token_route, token_endpoint};
use lifecycle_core::forward::SlackTs;
use store::outbox::OutboxMessage;
use uuid::Uuid;

const OWN_SECRET: &str = "a-token-route-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_is_refused_with_its_reason_and_nothing_is_stored() -> Result<()> {
    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    let channel = w.consent(w.a, &general).await?;
    w.drained().await?;
    let rows_before = w.messages(channel.id).await?;
    // The connection's own token-addressed endpoint: any team id can be sent to it.
    let address = token_endpoint(&w.env, w.a, OWN_SECRET).await?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let message = |team: &str, channel: &str, ts: &str, n: u32| {
        serde_json::json!({
            "token": "x", "team_id": team, "api_app_id": "A0", "type": "event_callback",
            "event_id": format!("EvBad{n}"), "event_time": now,
            "event": {"type": "message", "channel": channel, "user": w.user, "text": "bad",
                      "ts": ts, "event_ts": ts},
        })
    };
    let cases = [
        (
            "future_ts",
            message(&w.team, &general, &format!("{}.000000", now + 86_400), 0),
        ),
        ("malformed_ts", message(&w.team, &general, "yesterday", 1)),
        (
            "other_team",
            message("T0THEIRS", &general, &format!("{now}.000001"), 2),
        ),
        (
            "unknown_channel",
            message(&w.team, "C0NOSUCH", &format!("{now}.000002"), 3),
        ),
    ];
    for (_, body) in &cases {
        let status = send_to_token_route(&w, &address, OWN_SECRET, now, body).await?;
        assert!(status.is_success(), "{status}");
    }
    w.drained().await?;
    assert_eq!(w.messages(channel.id).await?, rows_before, "nothing stored");
    let bodies: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM inbound_message_body b JOIN inbound_message m ON m.id = b.message_id
          WHERE m.connection_id = $1 AND convert_from(b.body, 'UTF8') LIKE '%\"text\":\"bad\"%'",
    )
    .bind(w.a.connection_id)
    .fetch_one(&w.pool)
    .await?;
    assert_eq!(bodies, 0, "no bad delivery is kept");
    let reasons: Vec<String> = sqlx::query_scalar(
        "SELECT detail ->> 'reason' FROM connection_activity
          WHERE connection_id = $1 AND activity = 'slack_event_refused'",
    )
    .bind(w.a.connection_id)
    .fetch_all(&w.pool)
    .await?;
    for reason in ["future_ts", "malformed_ts", "other_team"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "{reason} not recorded: {reasons:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resumed_connection_keeps_nothing_from_its_suspension() -> Result<()> {
    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    let user = w.user.clone();
    let channel = w.consent(w.a, &general).await?;
    // Said while the connection was suspended; delivered late, after the resume.
    w.deafen();
    let during = w
        .sim
        .model(|m| m.post(&general, &user, "said while suspended"))
        .map_err(|e| anyhow!("{e:?}"))?;
    w.sim.settle().await;
    let resumed_at = time::OffsetDateTime::now_utc();
    let transition = bus::contracts::LifecycleTransition {
        connection_id: w.a.connection_id,
        workspace_id: w.a.workspace_id,
        kind: "slack".into(),
        transition: "resumed".into(),
        before_status: "suspended".into(),
        status: "active".into(),
        version: 2,
        lifecycle_generation: 2,
        provider_instance_id: w.provider_instance_id,
        actor: "test".into(),
        at: store::events::rfc3339(resumed_at),
    };
    w.env
        .bus
        .publish_outbox(Uuid::now_v7(), OutboxMessage::contract(&transition)?)
        .await?;
    let moved = common::eventually("the consent did not move to the resume", || async {
        Ok(w.channel(w.a, &general)
            .await?
            .filter(|c| c.consent_ts > channel.consent_ts))
    })
    .await?;
    assert_eq!(moved.consent_ts, SlackTs::at(resumed_at));
    w.listen();
    let late = w
        .sim
        .deliveries()
        .into_iter()
        .find(|d| String::from_utf8_lossy(&d.body).contains("said while suspended"))
        .expect("recorded");
    w.sim
        .send_event(&late.body, Some((1, "http_timeout")))
        .await
        .map_err(|e| anyhow!("{e:?}"))?;
    w.drained().await?;
    let stored: Vec<String> = w
        .messages(channel.id)
        .await?
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert!(!stored.contains(&during), "{stored:?}");
    assert_eq!(w.events(w.a, "slack.channel.resumed").await?, 1);
    Ok(())
}
