//! The attack: workspace B, with its own bot token (of its own team) and a Slack connection
//! that names A's team, signs Events API deliveries for A's consented channel with its own
//! endpoint secret and sends them to its token route. A's rows, events and reads are
//! unchanged; B's connection is refused at activation and keeps nothing.

mod common;

use anyhow::{Result, anyhow};
use common::{World, send_to_token_route, tenant, token_endpoint};

const B_SECRET: &str = "b-chose-this-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_workspace_naming_our_team_changes_nothing_of_ours() -> Result<()> {
    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    let user = w.user.clone();
    let ours = w.consent(w.a, &general).await?;
    let said = w
        .sim
        .model(|m| m.post(&general, &user, "ours"))
        .map_err(|e| anyhow!("{e:?}"))?;
    w.drained().await?;
    let rows_before = w.messages(ours.id).await?;
    let events_before: i64 = sqlx::query_scalar("SELECT count(*) FROM integration_event")
        .fetch_one(&w.pool)
        .await?;

    // B: its own team and token, a connection naming A's team, a token-addressed endpoint
    // whose secret B chose.
    let team_b = w.sim.model(|m| {
        let team = m.add_team("globex");
        m.add_token("xoxb-globex", &team);
        team
    });
    let b = tenant(&w.env, w.provider_instance_id, &w.team, "xoxb-globex").await?;
    let address = token_endpoint(&w.env, b, B_SECRET).await?;
    w.activate(b).await?;
    // Its activation is refused: the token is not of the team the connection names.
    let refusal: String = common::eventually("B's activation was not refused", || async {
        Ok(sqlx::query_scalar::<_, Option<String>>(
            "SELECT credentials_refusal FROM connection WHERE id = $1",
        )
        .bind(b.connection_id)
        .fetch_one(&w.pool)
        .await?)
    })
    .await?;
    assert!(refusal.contains(&team_b), "{refusal}");

    // B forges a new message, an edit and a deletion of ours, signed with its own secret.
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let envelope = |event: serde_json::Value, n: u32| {
        serde_json::json!({
            "token": "x", "team_id": w.team, "api_app_id": "A0", "type": "event_callback",
            "event_id": format!("EvForged{n}"), "event_time": now, "event": event,
        })
    };
    let forged = [
        serde_json::json!({"type": "message", "channel": general, "user": user,
            "text": "forged", "ts": format!("{now}.000100"), "event_ts": format!("{now}.000100")}),
        serde_json::json!({"type": "message", "subtype": "message_changed", "channel": general,
            "ts": format!("{now}.000200"), "event_ts": format!("{now}.000200"),
            "message": {"type": "message", "user": user, "text": "defaced", "ts": said,
                "edited": {"user": user, "ts": format!("{now}.000200")}}}),
        serde_json::json!({"type": "message", "subtype": "message_deleted", "channel": general,
            "ts": format!("{now}.000300"), "event_ts": format!("{now}.000300"), "deleted_ts": said}),
    ];
    for (n, event) in forged.into_iter().enumerate() {
        let status =
            send_to_token_route(&w, &address, B_SECRET, now, &envelope(event, n as u32)).await?;
        assert!(
            status.is_success(),
            "ingress verifies B's own secret: {status}"
        );
    }
    w.drained().await?;

    assert_eq!(
        w.messages(ours.id).await?,
        rows_before,
        "A's rows are unchanged"
    );
    let events_after: i64 = sqlx::query_scalar("SELECT count(*) FROM integration_event")
        .fetch_one(&w.pool)
        .await?;
    assert_eq!(events_after, events_before, "no event for anyone");
    let b_channels: i64 =
        sqlx::query_scalar("SELECT count(*) FROM slack_channel WHERE connection_id = $1")
            .bind(b.connection_id)
            .fetch_one(&w.pool)
            .await?;
    assert_eq!(
        b_channels, 0,
        "B's refused connection recorded no directory"
    );
    let b_bodies: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM inbound_message_body b JOIN inbound_message m ON m.id = b.message_id
          WHERE m.connection_id = $1",
    )
    .bind(b.connection_id)
    .fetch_one(&w.pool)
    .await?;
    assert_eq!(b_bodies, 0, "what B sent is not kept");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delivery_signed_with_our_own_chosen_secret_is_a_claim_slack_must_confirm() -> Result<()>
{
    const A_SECRET: &str = "a-chose-this-secret";
    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    let user = w.user.clone();
    let ours = w.consent(w.a, &general).await?;
    w.drained().await?;
    // A's admin also set up a Slack app of their own, on a token-addressed endpoint whose
    // secret they chose: what it delivers is a claim.
    let address = token_endpoint(&w.env, w.a, A_SECRET).await?;
    // A message Slack has, whose app delivery never arrived.
    w.deafen();
    let real = w
        .sim
        .model(|m| m.post(&general, &user, "what was really said"))
        .map_err(|e| anyhow!("{e:?}"))?;
    w.sim.settle().await;
    w.listen();

    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let send = |n: u32, event: serde_json::Value| claim(&w, &address, A_SECRET, now, n, event);
    // A message Slack never had; the real one with other words; an edit and a deletion of it.
    // After the consent (which may be within this very second), before any skew bound.
    let invented = format!("{}.000100", now + 2);
    send(
        1,
        serde_json::json!({"type": "message", "channel": general, "user": user,
        "text": "invented", "ts": invented, "event_ts": invented}),
    )
    .await?;
    send(
        2,
        serde_json::json!({"type": "message", "channel": general, "user": user,
        "text": "tampered", "ts": real, "event_ts": real}),
    )
    .await?;
    send(
        3,
        serde_json::json!({"type": "message", "subtype": "message_changed",
        "channel": general, "ts": format!("{now}.000200"), "event_ts": format!("{now}.000200"),
        "message": {"type": "message", "user": user, "text": "defaced", "ts": real,
            "edited": {"user": user, "ts": format!("{now}.000200")}}}),
    )
    .await?;
    send(
        4,
        serde_json::json!({"type": "message", "subtype": "message_deleted",
        "channel": general, "ts": format!("{now}.000300"), "event_ts": format!("{now}.000300"),
        "deleted_ts": real}),
    )
    .await?;
    w.drained().await?;

    // Only what Slack shows was written, once; nothing was invented, changed or deleted.
    let rows = w.messages(ours.id).await?;
    let texts: Vec<(&str, Option<&str>, bool)> = rows
        .iter()
        .map(|r| (r.0.as_str(), r.1.as_deref(), r.3))
        .collect();
    let real_row = texts.iter().find(|r| r.0 == real);
    assert_eq!(
        real_row,
        Some(&(real.as_str(), Some("what was really said"), false)),
        "{texts:?}"
    );
    assert!(!texts.iter().any(|r| r.0 == invented), "{texts:?}");
    assert_eq!(
        w.events(w.a, "slack.message.posted").await?,
        2,
        "the announcement and the real one"
    );
    assert_eq!(w.events(w.a, "slack.message.edited").await?, 0);
    assert_eq!(w.events(w.a, "slack.message.deleted").await?, 0);
    let unconfirmed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM connection_activity WHERE connection_id = $1 AND activity = 'hint_unconfirmed'",
    )
    .bind(w.a.connection_id)
    .fetch_one(&w.pool)
    .await?;
    let all: Vec<(String, serde_json::Value)> =
        sqlx::query_as("SELECT activity, detail FROM connection_activity WHERE connection_id = $1")
            .bind(w.a.connection_id)
            .fetch_all(&w.pool)
            .await?;
    assert!(
        unconfirmed >= 2,
        "the invented message and the deletion: {all:?}"
    );
    // No claim is kept.
    let claims: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM inbound_message_body b JOIN inbound_message m ON m.id = b.message_id
          WHERE m.connection_id = $1 AND convert_from(b.body, 'UTF8') LIKE '%EvClaim%'",
    )
    .bind(w.a.connection_id)
    .fetch_one(&w.pool)
    .await?;
    assert_eq!(claims, 0, "the claims' bodies are erased");
    Ok(())
}

/// Sends `event` of `w`'s team to the token route `address`, signed with `secret` as a Slack app
/// would (event id `EvClaim<n>`).
async fn claim(
    w: &World,
    address: &str,
    secret: &str,
    now: i64,
    n: u32,
    event: serde_json::Value,
) -> Result<()> {
    let body = serde_json::json!({
        "token": "x", "team_id": w.team, "api_app_id": "A1", "type": "event_callback",
        "event_id": format!("EvClaim{n}"), "event_time": now, "event": event,
    });
    let status = send_to_token_route(w, address, secret, now, &body).await?;
    anyhow::ensure!(status.is_success(), "{status}");
    Ok(())
}
