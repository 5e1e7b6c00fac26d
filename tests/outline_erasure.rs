//! An Outline connection's life through the whole system: control-api creates and activates it,
//! outline-sync registers its subscription at the simulator (subscription first) and reads the
//! team, a change reaches the mirror through ingress; then the operator disconnects it and the
//! eraser runs. Nothing of its content stays anywhere the erasure scan looks; its subscription's
//! registration stays for provider repair, as do its jobs and audit; a reconnect reads the team
//! again; a purge of the workspace then leaves no content either. Real Postgres and NATS, the
//! Outline simulator over HTTP.

use anyhow::Result;
use control_api::Role;
use forgesync_e2e::{eventually, send_json};
use serde_json::{Value, json};
use testkit::TestEnv;
use vendor_sim::outline::{Model, NewDocument, OutlineSim};

const TOKEN: &str = "ol_api_erasure";

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
async fn an_outline_disconnect_leaves_no_content_and_a_reconnect_reads_the_team_again() -> Result<()>
{
    let env = TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();
    let mut model = Model::new("acme");
    model.add_token(TOKEN);
    let mut documents = Vec::new();
    for name in ["Engineering", "Handbook"] {
        let collection = model.add_collection(name);
        for n in 0..4 {
            let new = NewDocument::new(&collection, &format!("{name} {n}")).text("secret text");
            documents.push(
                model
                    .add_document(new)
                    .map_err(|e| anyhow::anyhow!("{e:?}"))?,
            );
        }
    }
    let sim = OutlineSim::start(model).await?;

    let control = testkit::spawn(testkit::control_api_config(env.common_args())).await?;
    let ingress = testkit::spawn(testkit::ingress_config(env.common_args())).await?;
    let outline: outline_sync::Config = testkit::config(
        env.common_args(),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            format!("--outline-api-url={}", sim.base_url()),
            format!("--public-webhook-url={}", ingress.url()),
            "--reconcile-cron=off".to_owned(),
        ],
    )?;
    let _outline = testkit::spawn(outline).await?;
    let eraser = testkit::spawn(testkit::eraser_config(env.common_args())).await?;

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

    // Connects and activates; waits for the subscription and the team's documents.
    let connect = || {
        let (get, post, ws) = (&get, &post, ws.clone());
        async move {
            let (status, conn) = post(
                format!("/workspaces/{ws}/connections"),
                json!({"kind": "outline", "settings": {}, "secrets": {"token": TOKEN}}),
            )
            .await?;
            anyhow::ensure!(status == 201, "{conn}");
            let conn = conn["id"].as_str().unwrap().to_owned();
            let (status, body) = post(
                format!("/workspaces/{ws}/connections/{conn}/activate"),
                json!({}),
            )
            .await?;
            anyhow::ensure!(status == 200, "{body}");
            eventually("the subscription was not adopted", || {
                let (get, ws, conn) = (get, ws.clone(), conn.clone());
                async move {
                    let (status, body) = get(format!(
                        "/workspaces/{ws}/connections/{conn}/outline/subscription"
                    ))
                    .await?;
                    Ok((status == 200 && body["state"] == "adopted").then_some(()))
                }
            })
            .await?;
            eventually("the INITIAL did not read the team", || {
                let (get, ws, conn) = (get, ws.clone(), conn.clone());
                async move {
                    let (_, page) =
                        get(format!("/workspaces/{ws}/outline/documents?limit=100")).await?;
                    let n = page
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|d| d["connection_id"] == conn.as_str())
                        .filter(|d| d["deleted_at"].is_null())
                        .count();
                    Ok((n >= 8).then_some(()))
                }
            })
            .await?;
            anyhow::Ok(conn)
        }
    };
    let conn = connect().await?;

    // A change at Outline reaches the mirror through the subscription and ingress.
    let changed = documents[0].clone();
    sim.model(|m| m.update_document(&changed, Some("renamed at Outline"), None))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    eventually("the delivery did not reach the mirror", || {
        let pool = &pool;
        let changed = changed.clone();
        async move {
            Ok(sqlx::query_scalar::<_, i64>(
                "SELECT 1::bigint FROM outline_document
                  WHERE outline_id = $1 AND title = 'renamed at Outline'",
            )
            .bind(changed)
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
    for name in [
        "table:outline_document",
        "table:outline_collection",
        "table:inbound_message",
        "stream:WEBHOOKS_OUTLINE",
    ] {
        assert!(place(&before, name) > 0, "{name}: {before}");
    }

    let (status, body) = post(
        format!("/workspaces/{ws}/connections/{conn}/disconnect"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    let erased = |ws: String, at_least: usize| {
        let get = &get;
        async move {
            eventually("the erasure did not finish", || {
                let ws = ws.clone();
                async move {
                    let (status, body) = get(format!("/workspaces/{ws}/erasures")).await?;
                    anyhow::ensure!(status == 200, "erasures: {status} {body}");
                    let done = body.as_array().is_some_and(|l| {
                        l.len() >= at_least && l.iter().all(|r| r["status"] == "done")
                    });
                    Ok(done.then_some(()))
                }
            })
            .await
        }
    };
    erased(ws.clone(), 1).await?;
    let after = scan(ws.clone()).await?;
    assert_eq!(after["total"], 0, "{after}");
    // What forgesync created at Outline stays registered for provider repair to remove, and the
    // jobs' history and audit stay.
    for table in ["provider_registration", "sync_job", "connection_audit"] {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE connection_id = $1::uuid"
        )))
        .bind(&conn)
        .fetch_one(&pool)
        .await?;
        assert!(n > 0, "{table} keeps the connection's rows");
    }
    let subscriptions = sim.model(|m| m.subscriptions().count());
    assert_eq!(
        subscriptions, 1,
        "only provider repair deletes a subscription"
    );

    // A reconnect reads the team again, into the new connection's own rows.
    let second = connect().await?;
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outline_document WHERE connection_id = $1::uuid AND deleted_at IS NULL",
    )
    .bind(&second)
    .fetch_one(&pool)
    .await?;
    assert_eq!(held, 8, "a reconnect re-fetches every document");

    // The purge leaves none of it either.
    let (status, body) = post(format!("/workspaces/{ws}/purge"), json!({})).await?;
    assert_eq!(status, 202, "{body}");
    eventually("the purge did not finish", || {
        let get = &get;
        let ws = ws.clone();
        async move {
            let (_, workspace) = get(format!("/workspaces/{ws}")).await?;
            Ok((workspace["status"] == "purged").then_some(()))
        }
    })
    .await?;
    erased(ws.clone(), 2).await?;
    let purged = scan(ws.clone()).await?;
    assert_eq!(purged["total"], 0, "{purged}");
    eraser.stop().await
}
