//! A Slack connection's life through the whole system: control-api creates and activates it,
//! slack-ingest records its directory, an operator consents to one channel, messages arrive
//! through ingress, a reconcile runs; then the operator disconnects it and the eraser runs.
//! Nothing of its content stays anywhere the erasure scan looks, its jobs and audit stay, and a
//! new connection to the same team keeps nothing until a channel is consented anew; a purge
//! of the workspace then leaves no content of it either. Real
//! Postgres and NATS, the Slack simulator over HTTP.

use anyhow::{Result, anyhow};
use control_api::Role;
use forgesync_e2e::{eventually, send_json};
use serde_json::{Value, json};
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::NewEndpoint;
use store::secrets::Keyring;
use testkit::TestEnv;
use uuid::Uuid;
use vendor_sim::slack::{Model, SlackSim};

const TOKEN: &str = "xoxb-erasure";
const SECRET: &str = "slack-app-signing-secret";

fn place(scan: &Value, name: &str) -> i64 {
    scan["places"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["place"] == name)
        .and_then(|p| p["count"].as_i64())
        .unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slack_disconnect_leaves_no_content_and_a_reconnect_needs_consent_anew() -> Result<()> {
    let env = TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();
    let mut model = Model::default();
    let team = model.add_team("acme");
    model.add_token(TOKEN, &team);
    let mut channels = Vec::new();
    for name in ["general", "random"] {
        let id = model
            .add_channel(&team, name, false)
            .map_err(|e| anyhow!("{e:?}"))?;
        model.join_bot(&id).map_err(|e| anyhow!("{e:?}"))?;
        channels.push(id);
    }
    let user = model.add_user(&team);
    let sim = SlackSim::start(model).await?;

    let control = testkit::spawn(testkit::control_api_config(env.common_args())).await?;
    let ingress = testkit::spawn(testkit::ingress_config(env.common_args())).await?;
    let slack: slack_ingest::Config = testkit::config(
        env.common_args(),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            format!("--slack-api-url={}", sim.api_url()),
            "--reconcile-cron=off".to_owned(),
        ],
    )?;
    let _slack = testkit::spawn(slack).await?;
    let eraser = testkit::spawn(testkit::eraser_config(env.common_args())).await?;
    sim.subscribe_events(&format!("{}/webhooks/slack", ingress.url()), SECRET);

    let token = testkit::token(&testkit::control_api_keys()?, Role::Admin, None)?;
    let http = reqwest::Client::new();
    let api = control.url();
    let get = |path: String| send_json(http.get(format!("{api}{path}")).bearer_auth(&token));
    let post = |path: String, body: Value| {
        send_json(
            http.post(format!("{api}{path}"))
                .bearer_auth(&token)
                .json(&body),
        )
    };
    let (status, ws) = post("/workspaces".into(), json!({"name": "acme"})).await?;
    assert_eq!(status, 201, "{ws}");
    let ws = ws["id"].as_str().unwrap().to_owned();

    // Connects, consents to `general`, and waits for a message of it in the mirror.
    let db = &env.db.db;
    let connect = |post_text: &'static str| {
        let (get, post, pool, sim, team, user, general) =
            (&get, &post, &pool, &sim, &team, &user, channels[0].clone());
        let ws = ws.clone();
        async move {
            let (status, conn) = post(
                format!("/workspaces/{ws}/connections"),
                json!({"kind": "slack", "settings": {"team_id": team}, "secrets": {"token": TOKEN}}),
            )
            .await?;
            anyhow::ensure!(status == 201, "{conn}");
            let conn = conn["id"].as_str().unwrap().to_owned();
            let conn_id: Uuid = conn.parse()?;
            // The Slack app's endpoint for the team, as the operator sets it up.
            store::inbound::create_endpoint(
                db,
                &Keyring::parse(&testkit::secret_key())?,
                NewEndpoint {
                    workspace_id: ws.parse()?,
                    connection_id: conn_id,
                    kind: ConnectionKind::Slack,
                    registration: Registration::App,
                    provider_ref: Some(team.clone()),
                    address_token: None,
                    tenant_keyed: false,
                },
                SECRET.as_bytes(),
            )
            .await?;
            let (status, body) = post(
                format!("/workspaces/{ws}/connections/{conn}/activate"),
                json!({}),
            )
            .await?;
            anyhow::ensure!(status == 200, "{body}");
            let channel: Value = eventually("the directory did not list general", || {
                let (get, ws, conn, general) = (get, ws.clone(), conn.clone(), general.clone());
                async move {
                    let (_, list) = get(format!("/workspaces/{ws}/slack/channels")).await?;
                    Ok(list.as_array().and_then(|l| {
                        l.iter()
                            .find(|c| {
                                c["slack_id"] == general.as_str()
                                    && c["connection_id"] == conn.as_str()
                            })
                            .cloned()
                    }))
                }
            })
            .await?;
            anyhow::ensure!(
                channel["status"] == "none",
                "a new connection keeps nothing: {channel}"
            );
            let channel_id = channel["id"].as_str().unwrap().to_owned();
            let (status, body) = post(
                format!("/workspaces/{ws}/slack/channels/{channel_id}/consent"),
                json!({}),
            )
            .await?;
            anyhow::ensure!(status == 202, "{body}");
            eventually("the consent was not announced", || {
                let (get, ws, channel_id) = (get, ws.clone(), channel_id.clone());
                async move {
                    let (_, list) = get(format!("/workspaces/{ws}/slack/channels")).await?;
                    Ok(list
                        .as_array()
                        .and_then(|l| l.iter().find(|c| c["id"] == channel_id.as_str()))
                        .filter(|c| c["status"] == "active")
                        .map(|_| ()))
                }
            })
            .await?;
            let ts = sim
                .model(|m| m.post(&general, user, post_text))
                .map_err(|e| anyhow!("{e:?}"))?;
            let _: i64 = eventually("the message did not reach the mirror", || {
                let (pool, ts) = (pool, ts.clone());
                async move {
                    Ok(sqlx::query_scalar(
                        "SELECT 1::bigint FROM slack_message WHERE connection_id = $1 AND ts = $2::numeric",
                    )
                    .bind(conn_id)
                    .bind(ts)
                    .fetch_optional(pool)
                    .await?)
                }
            })
            .await?;
            anyhow::Ok((conn, channel_id))
        }
    };
    let (conn, channel_id) = connect("said before the disconnect").await?;
    let (status, body) = get(format!(
        "/workspaces/{ws}/slack/channels/{channel_id}/messages"
    ))
    .await?;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.to_string().contains("said before the disconnect"),
        "{body}"
    );
    let (status, job) = post(
        format!("/workspaces/{ws}/connections/{conn}/sync"),
        json!({"type": "RECONCILIATION"}),
    )
    .await?;
    assert!(status == 201 || status == 202, "{status} {job}");
    let _: String = eventually("the reconcile did not finish", || {
        let pool = &pool;
        async move {
            Ok(sqlx::query_scalar(
                "SELECT status FROM sync_job WHERE job_type = 'RECONCILIATION' AND finished_at IS NOT NULL",
            )
            .fetch_optional(pool)
            .await?)
        }
    })
    .await?;

    let scan = |ws: String| {
        let get = &get;
        async move {
            let (status, body) = get(format!("/workspaces/{ws}/erasure-scan")).await?;
            anyhow::ensure!(status == 200, "erasure-scan: {status} {body}");
            anyhow::Ok(body)
        }
    };
    let before = scan(ws.clone()).await?;
    for table in [
        "table:slack_message",
        "table:slack_channel",
        "table:inbound_message",
    ] {
        assert!(place(&before, table) > 0, "{table}: {before}");
    }
    assert!(place(&before, "stream:WEBHOOKS_SLACK") > 0, "{before}");

    let (status, body) = post(
        format!("/workspaces/{ws}/connections/{conn}/disconnect"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    eventually("the erasure did not finish", || {
        let get = &get;
        let ws = ws.clone();
        async move {
            let (status, body) = get(format!("/workspaces/{ws}/erasures")).await?;
            anyhow::ensure!(status == 200, "erasures: {status} {body}");
            let done = body
                .as_array()
                .is_some_and(|l| !l.is_empty() && l.iter().all(|r| r["status"] == "done"));
            Ok(done.then_some(()))
        }
    })
    .await?;
    let after = scan(ws.clone()).await?;
    assert_eq!(after["total"], 0, "{after}");
    for table in ["sync_job", "connection_audit"] {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE connection_id = $1::uuid"
        )))
        .bind(&conn)
        .fetch_one(&pool)
        .await?;
        assert!(n > 0, "{table} keeps the connection's rows");
    }

    // A new connection to the same team starts from nothing: its channels are NONE until
    // consented again, which posts a new announcement.
    let announcements = |sim: &SlackSim| {
        sim.model(|m| {
            m.channel(&channels[0]).map_or(0, |c| {
                c.messages()
                    .filter(|m| m.text.contains("mirrored by forgesync"))
                    .count()
            })
        })
    };
    assert_eq!(announcements(&sim), 1);
    let first = conn;
    let (conn, _) = connect("said after the reconnect").await?;
    assert_eq!(announcements(&sim), 2, "a reconnect needs consent anew");

    // The workspace is purged with the new connection's content in it: none of it stays.
    let held = scan(ws.clone()).await?;
    assert!(place(&held, "table:slack_message") > 0, "{held}");
    let (status, body) = post(format!("/workspaces/{ws}/purge"), json!({})).await?;
    assert_eq!(status, 202, "{body}");
    eventually("the purge did not finish", || {
        let get = &get;
        let ws = ws.clone();
        async move {
            let (_, workspace) = get(format!("/workspaces/{ws}")).await?;
            let (status, erasures) = get(format!("/workspaces/{ws}/erasures")).await?;
            anyhow::ensure!(status == 200, "erasures: {status} {erasures}");
            let done = erasures
                .as_array()
                .is_some_and(|l| l.len() >= 3 && l.iter().all(|r| r["status"] == "done"));
            Ok((workspace["status"] == "purged" && done).then_some(()))
        }
    })
    .await?;
    let purged = scan(ws.clone()).await?;
    assert_eq!(purged["total"], 0, "{purged}");
    // The jobs' history and the audit of both connections stay.
    for (table, conn) in [
        ("sync_job", &first),
        ("connection_audit", &first),
        ("connection_audit", &conn),
    ] {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE connection_id = $1::uuid"
        )))
        .bind(conn)
        .fetch_one(&pool)
        .await?;
        assert!(n > 0, "{table} keeps {conn}'s rows after the purge");
    }
    eraser.stop().await
}
