//! `GET .../connections/{c}/gitlab/activation`: discovery, consumer and hook as gitlab-sync
//! recorded them, for the connection's own workspace only; real service and Postgres.

use anyhow::Result;
use control_api::Role;
use reqwest::StatusCode;
use scm_mirror::gitlab::GROUP_HOOK;
use scm_mirror::gitlab::activation::{self as gitlab_activation, DiscoveryRecord};
use serde_json::{Value, json};
use sqlx::PgPool;
use store::registration::{self, NewRegistration};
use testkit::TestEnv;
use uuid::Uuid;

struct Fixture {
    _env: TestEnv,
    _api: testkit::Running,
    http: reqwest::Client,
    base: String,
    keys: control_api::Keys,
    admin: String,
    pool: PgPool,
}

impl Fixture {
    async fn start() -> Result<Fixture> {
        let env = TestEnv::new().await?;
        let api = testkit::spawn(testkit::control_api_config(env.common_args())).await?;
        let keys = testkit::control_api_keys()?;
        Ok(Fixture {
            http: reqwest::Client::new(),
            base: api.url(),
            admin: testkit::token(&keys, Role::Admin, None)?,
            keys,
            pool: env.db.db.get_postgres_connection_pool().clone(),
            _env: env,
            _api: api,
        })
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        let res = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.admin)
            .json(&body)
            .send()
            .await?;
        assert!(res.status().is_success(), "{path}: {}", res.status());
        Ok(res.json().await?)
    }

    async fn get(&self, path: &str, token: &str) -> Result<(StatusCode, Value)> {
        let res = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
            .send()
            .await?;
        Ok((res.status(), res.json().await.unwrap_or(Value::Null)))
    }

    /// A workspace with an active connection of `kind`: (workspace, connection).
    async fn connected(&self, kind: &str) -> Result<(Uuid, Uuid)> {
        let ws = self.post("/workspaces", json!({"name": "w"})).await?;
        let ws: Uuid = ws["id"].as_str().unwrap().parse()?;
        let conn = self
            .post(
                &format!("/workspaces/{ws}/connections"),
                json!({"kind": kind, "server_url": "https://gitlab.example.com",
                       "settings": {"group": "acme"}}),
            )
            .await?;
        let conn: Uuid = conn["id"].as_str().unwrap().parse()?;
        self.post(
            &format!("/workspaces/{ws}/connections/{conn}/activate"),
            json!({}),
        )
        .await?;
        Ok((ws, conn))
    }
}

fn path(ws: Uuid, conn: Uuid) -> String {
    format!("/workspaces/{ws}/connections/{conn}/gitlab/activation")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activation_shows_discovery_consumer_and_hook_to_its_own_workspace_only() -> Result<()> {
    let f = Fixture::start().await?;
    let (ws_a, conn_a) = f.connected("gitlab").await?;
    let (ws_b, conn_b) = f.connected("gitlab").await?;

    // Before gitlab-sync recorded anything: no discovery, no hook.
    let (status, body) = f.get(&path(ws_a, conn_a), &f.admin).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["discovery"], Value::Null);
    assert_eq!(body["hook"]["state"], "none");

    // An incomplete discovery, a confirmed consumer, no hook and why.
    gitlab_activation::record_discovery(
        &f.pool,
        conn_a,
        ws_a,
        &DiscoveryRecord {
            complete: false,
            reason: Some("3 distinct projects found (3 listed), GitLab counts 4".into()),
            groups_found: 2,
            projects_found: 3,
            project_count: Some(4),
        },
    )
    .await?;
    gitlab_activation::record_consumer(
        &f.pool,
        conn_a,
        ws_a,
        "gitlab-sync-connection-events",
        None,
    )
    .await?;
    gitlab_activation::record_hook(&f.pool, conn_a, ws_a, Some("discovery is incomplete")).await?;
    let (status, body) = f.get(&path(ws_a, conn_a), &f.admin).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["discovery"]["complete"], false);
    assert_eq!(
        body["discovery"]["reason"],
        "3 distinct projects found (3 listed), GitLab counts 4"
    );
    assert_eq!(body["discovery"]["project_count"], 4);
    assert_eq!(body["consumer"]["name"], "gitlab-sync-connection-events");
    assert!(body["consumer"]["confirmed_at"].is_string());
    assert_eq!(body["hook"]["state"], "none");
    assert_eq!(body["hook"]["reason"], "discovery is incomplete");

    // The hook adopted by the connection's own version and generation; GitLab disabled it.
    let (version, generation): (i64, i64) =
        sqlx::query_as("SELECT version, lifecycle_generation FROM connection WHERE id = $1")
            .bind(conn_a)
            .fetch_one(&f.pool)
            .await?;
    let instance: Uuid =
        sqlx::query_scalar("SELECT provider_instance_id FROM connection WHERE id = $1")
            .bind(conn_a)
            .fetch_one(&f.pool)
            .await?;
    let mut tx = f.pool.begin().await?;
    let reg = registration::request(
        &mut tx,
        &NewRegistration {
            connection_id: conn_a,
            provider_instance_id: instance,
            kind: GROUP_HOOK,
            target: "11",
            marker: "marker-a",
            url: "https://hooks.example.com/webhooks/gitlab/connections/x/k1/marker-a",
            generation: registration::generation(version, generation),
            endpoint_id: None,
        },
    )
    .await?
    .unwrap();
    tx.commit().await?;
    registration::resolve_created(&f.pool, reg.id, "77").await?;
    gitlab_activation::record_hook(&f.pool, conn_a, ws_a, None).await?;
    let until = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    gitlab_activation::record_hook_health(
        &f.pool,
        conn_a,
        ws_a,
        Some(until),
        Some("temporarily_disabled"),
    )
    .await?;
    let viewer_a = testkit::token(&f.keys, Role::Viewer, Some(ws_a))?;
    let (status, body) = f.get(&path(ws_a, conn_a), &viewer_a).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["hook"]["state"], "open");
    assert_eq!(body["hook"]["hook_id"], "77");
    assert_eq!(body["hook"]["group_id"], "11");
    assert_eq!(body["hook"]["disabled"], true);
    assert_eq!(body["hook"]["alert_status"], "temporarily_disabled");

    // The attack: workspace B's token reaches nothing of A, by A's path or by its own.
    let admin_b = testkit::token(&f.keys, Role::Admin, Some(ws_b))?;
    for p in [path(ws_a, conn_a), path(ws_b, conn_a)] {
        let (status, body) = f.get(&p, &admin_b).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{p}: {body}");
        assert_eq!(body["error"], "not_found");
        assert!(body.to_string().find("77").is_none(), "{body}");
    }
    // B's own connection answers, and shows nothing of A's.
    let (status, body) = f.get(&path(ws_b, conn_b), &admin_b).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["hook"]["state"], "none");
    assert_eq!(body["discovery"], Value::Null);

    // Not a GitLab connection; a malformed id.
    let (ws_c, conn_c) = f.connected("outline").await?;
    let (status, body) = f.get(&path(ws_c, conn_c), &f.admin).await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"], "not_found");
    let (status, body) = f
        .get(
            &format!("/workspaces/{ws_a}/connections/not-a-uuid/gitlab/activation"),
            &f.admin,
        )
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].is_string(), "{body}");
    Ok(())
}
