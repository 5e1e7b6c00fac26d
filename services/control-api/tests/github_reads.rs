//! Reads of the GitHub mirror: a workspace sees only the repositories its monitors cover, on the
//! provider instance of a connection that authorises reads; real service, Postgres and NATS.

use anyhow::Result;
use control_api::Role;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
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
        let (api, keys) = (
            testkit::spawn(testkit::control_api_config(env.common_args())).await?,
            testkit::control_api_keys()?,
        );
        let pool = env.db.db.get_postgres_connection_pool().clone();
        Ok(Fixture {
            http: reqwest::Client::new(),
            base: api.url(),
            admin: testkit::token(&keys, Role::Admin, None)?,
            keys,
            pool,
            _env: env,
            _api: api,
        })
    }

    async fn call(&self, post: bool, path: &str, token: &str) -> Result<(StatusCode, Value)> {
        let url = format!("{}{path}", self.base);
        let req = if post {
            self.http.post(url).json(&json!({ "name": "acme" }))
        } else {
            self.http.get(url)
        };
        let res = req.bearer_auth(token).send().await?;
        Ok((res.status(), res.json().await.unwrap_or(Value::Null)))
    }

    /// A workspace with an active GitHub connection on `server_url`: (workspace, connection).
    async fn workspace(&self, server_url: &str) -> Result<(Uuid, Uuid)> {
        let (_, ws) = self.call(true, "/workspaces", &self.admin).await?;
        let ws: Uuid = ws["id"].as_str().unwrap().parse()?;
        let res = self
            .http
            .post(format!("{}/workspaces/{ws}/connections", self.base))
            .bearer_auth(&self.admin)
            .json(&json!({ "kind": "github", "server_url": server_url }))
            .send()
            .await?;
        let conn: Value = res.json().await?;
        let conn: Uuid = conn["id"].as_str().unwrap().parse()?;
        self.transition(ws, conn, "activate").await?;
        Ok((ws, conn))
    }

    async fn transition(&self, ws: Uuid, conn: Uuid, name: &str) -> Result<()> {
        let (status, body) = self
            .call(
                true,
                &format!("/workspaces/{ws}/connections/{conn}/{name}"),
                &self.admin,
            )
            .await?;
        assert_eq!(status, StatusCode::OK, "{body}");
        Ok(())
    }

    async fn instance_of(&self, conn: Uuid) -> Result<Uuid> {
        let (id,): (Uuid,) =
            sqlx::query_as("SELECT provider_instance_id FROM connection WHERE id = $1")
                .bind(conn)
                .fetch_one(&self.pool)
                .await?;
        Ok(id)
    }

    /// A mirrored repository, as github-sync writes it.
    async fn repository(&self, instance: Uuid, native_id: i64, name: &str) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO repository (id, provider_instance_id, native_id, node_id, owner, name) VALUES ($1, $2, $3, $4, 'acme', $5)")
            .bind(id).bind(instance).bind(native_id).bind(format!("R_{native_id}")).bind(name)
            .execute(&self.pool).await?;
        Ok(id)
    }

    async fn monitor(
        &self,
        ws: Uuid,
        conn: Uuid,
        name: &str,
        native_id: Option<i64>,
    ) -> Result<()> {
        sqlx::query("INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id) VALUES ($1, $2, $3, 'acme', $4, $5)")
            .bind(Uuid::now_v7()).bind(ws).bind(conn).bind(name).bind(native_id)
            .execute(&self.pool).await?;
        Ok(())
    }

    async fn issue(&self, repository: Uuid, number: i32) -> Result<()> {
        sqlx::query("INSERT INTO issue (id, repository_id, native_id, node_id, number, title, state, upstream_created_at, upstream_updated_at) VALUES ($1, $2, $3, $4, $5, $6, 'open', now(), now())")
            .bind(Uuid::now_v7()).bind(repository).bind(i64::from(number) + 5000).bind(format!("I_{number}")).bind(number).bind(format!("issue {number}"))
            .execute(&self.pool).await?;
        Ok(())
    }

    /// Names of the repositories `token` sees in `ws`.
    async fn visible(&self, ws: Uuid, token: &str) -> Result<Vec<String>> {
        let (status, body) = self
            .call(
                false,
                &format!("/workspaces/{ws}/github/repositories"),
                token,
            )
            .await?;
        assert_eq!(status, StatusCode::OK, "{body}");
        Ok(body
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect())
    }

    async fn issues(&self, ws: Uuid, repo: Uuid, token: &str) -> Result<(StatusCode, Value)> {
        self.call(
            false,
            &format!("/workspaces/{ws}/github/repositories/{repo}/issues"),
            token,
        )
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_reads_only_what_its_monitors_cover_on_its_connections_instance() -> Result<()>
{
    let f = Fixture::start().await?;
    let (ws, conn) = f.workspace("https://github.example.com").await?;
    let (other_ws, other_conn) = f.workspace("https://ghe.other.example").await?;
    let ours = f.instance_of(conn).await?;
    let theirs = f.instance_of(other_conn).await?;

    let widgets = f.repository(ours, 1, "widgets").await?;
    f.monitor(ws, conn, "widgets", Some(1)).await?;
    f.issue(widgets, 1).await?;
    f.issue(widgets, 2).await?;
    // The monitor resolved `gadgets` to another repository (a reused name): not this one.
    let gadgets = f.repository(ours, 2, "gadgets").await?;
    f.monitor(ws, conn, "gadgets", Some(99)).await?;
    // A name alone covers nothing: only a monitor bound to a resolved native id grants reads.
    let pending = f.repository(ours, 4, "pending").await?;
    f.monitor(ws, conn, "pending", None).await?;
    // Same owner and name and id, but on the other workspace's GitHub server.
    let elsewhere = f.repository(theirs, 1, "widgets").await?;
    f.monitor(other_ws, other_conn, "widgets", Some(1)).await?;

    let viewer = testkit::token(&f.keys, Role::Viewer, Some(ws))?;
    assert_eq!(f.visible(ws, &viewer).await?, ["widgets"]);
    let (status, body) = f.issues(ws, widgets, &viewer).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    let numbers: Vec<i64> = body
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2]);
    for repo in [gadgets, pending, elsewhere] {
        let (status, body) = f.issues(ws, repo, &viewer).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
    assert_eq!(f.visible(other_ws, &f.admin).await?, ["widgets"]);
    let (status, body) = f.issues(other_ws, widgets, &f.admin).await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // A suspended connection still authorises reads, and so does a paused one (a pause keeps
    // the retained mirror); a disconnected one authorises none.
    f.transition(ws, conn, "suspend").await?;
    assert_eq!(f.visible(ws, &viewer).await?, ["widgets"]);
    f.transition(ws, conn, "resume").await?;
    f.transition(ws, conn, "pause").await?;
    assert_eq!(f.visible(ws, &viewer).await?, ["widgets"]);
    f.transition(ws, conn, "disconnect").await?;
    assert!(f.visible(ws, &viewer).await?.is_empty());
    let (status, _) = f.issues(ws, widgets, &viewer).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_workspaces_token_sees_nothing() -> Result<()> {
    let f = Fixture::start().await?;
    let (ws, conn) = f.workspace("https://github.example.com").await?;
    let (other_ws, _) = f.workspace("https://github.example.com").await?;
    let widgets = f
        .repository(f.instance_of(conn).await?, 1, "widgets")
        .await?;
    f.monitor(ws, conn, "widgets", Some(1)).await?;
    f.issue(widgets, 1).await?;

    let stranger = testkit::token(&f.keys, Role::Admin, Some(other_ws))?;
    let (status, body) = f
        .call(
            false,
            &format!("/workspaces/{ws}/github/repositories"),
            &stranger,
        )
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = f.issues(ws, widgets, &stranger).await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Its own workspace shares the GitHub server but monitors nothing.
    assert!(f.visible(other_ws, &stranger).await?.is_empty());
    let (status, _) = f.issues(other_ws, widgets, &stranger).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    Ok(())
}
