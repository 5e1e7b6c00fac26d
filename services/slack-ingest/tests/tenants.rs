//! The attack: workspace B, with its own bot token (of its own team) and a Slack connection
//! that names A's team, signs Events API deliveries for A's consented channel with its own
//! endpoint secret and sends them to its token route. A's rows, events and reads are
//! unchanged; B's connection is refused at activation and keeps nothing.

mod common;

use anyhow::{Result, anyhow};
use common::{World, tenant};
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::NewEndpoint;
use store::secrets::Keyring;
use uuid::Uuid;

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
    let address = Uuid::now_v7().simple().to_string();
    store::inbound::create_endpoint(
        &w.env.db.db,
        &Keyring::parse(&testkit::secret_key())?,
        NewEndpoint {
            workspace_id: b.workspace_id,
            connection_id: b.connection_id,
            kind: ConnectionKind::Slack,
            registration: Registration::Operator,
            provider_ref: None,
            address_token: Some(address.clone()),
            tenant_keyed: true,
        },
        B_SECRET.as_bytes(),
    )
    .await?;
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
    let http = reqwest::Client::new();
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
        let body = serde_json::to_vec(&envelope(event, n as u32))?;
        let mut headers = vendor_sim::slack::signed_headers(B_SECRET.as_bytes(), now, &body);
        headers.remove("user-agent");
        let status = http
            .post(format!("{}/hooks/{address}", w.ingress.url()))
            .headers(headers)
            .body(body)
            .send()
            .await?
            .status();
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
