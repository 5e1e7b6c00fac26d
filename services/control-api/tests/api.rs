//! control-api end to end: the real service on port 0 against real Postgres and NATS.

use std::time::Duration;

use anyhow::Result;
use bus::Stream;
use control_api::Role;
use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use serde_json::{Value, json};
use testkit::{Running, TestEnv};

struct Api {
    http: reqwest::Client,
    base: String,
    admin: String,
    viewer: String,
    keys: control_api::Keys,
}

impl Api {
    async fn start(env: &TestEnv) -> Result<(Api, Running)> {
        Self::start_with(env, |_| {}).await
    }

    async fn start_with(
        env: &TestEnv,
        tweak: impl FnOnce(&mut control_api::Config),
    ) -> Result<(Api, Running)> {
        let mut config = testkit::control_api_config(env.common_args());
        tweak(&mut config);
        let (running, keys) = (testkit::spawn(config).await?, testkit::control_api_keys()?);
        let api = Api {
            http: reqwest::Client::new(),
            base: running.url(),
            admin: testkit::token(&keys, Role::Admin, None)?,
            viewer: testkit::token(&keys, Role::Viewer, None)?,
            keys,
        };
        Ok((api, running))
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Result<(StatusCode, Value)> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await?;
        let status = res.status();
        let text = res.text().await?;
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    async fn post(&self, path: &str, body: Value) -> Result<(StatusCode, Value)> {
        self.call(reqwest::Method::POST, path, Some(&self.admin), Some(body))
            .await
    }

    async fn get(&self, path: &str) -> Result<(StatusCode, Value)> {
        self.call(reqwest::Method::GET, path, Some(&self.admin), None)
            .await
    }

    async fn workspace(&self, name: &str) -> Result<String> {
        let (status, body) = self.post("/workspaces", json!({ "name": name })).await?;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        Ok(body["id"].as_str().unwrap().to_owned())
    }

    async fn connection(&self, ws: &str, kind: &str) -> Result<Value> {
        let (status, body) = self
            .post(
                &format!("/workspaces/{ws}/connections"),
                json!({ "kind": kind, "secrets": { "token": "ghp_supersecretvalue" } }),
            )
            .await?;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        Ok(body)
    }
}

async fn count(db: &DatabaseConnection, sql: &str) -> Result<i64> {
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Postgres, sql.to_owned()))
        .await?
        .expect("a count row");
    Ok(row.try_get_by_index(0)?)
}

/// Rows that a refused request must not have written.
///
/// Messages: outbox rows are deleted once published, so this waits for the relay to empty the
/// outbox and counts what the streams hold; a message a refused request wrote would end there.
async fn footprint(env: &TestEnv) -> Result<(i64, i64, i64, i64)> {
    let db = &env.db.db;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while count(db, "SELECT count(*) FROM outbox").await? > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay did not empty the outbox"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut messages = 0;
    for stream in Stream::ALL {
        let name = env.bus.namespace().name(stream.name());
        if let Ok(mut s) = env.bus.jetstream().get_stream(name).await {
            messages += s.info().await?.state.messages as i64;
        }
    }
    Ok((
        messages,
        count(db, "SELECT count(*) FROM connection_audit").await?,
        count(db, "SELECT count(*) FROM sync_job").await?,
        count(
            db,
            "SELECT coalesce(sum(version), 0)::bigint FROM connection",
        )
        .await?,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_needs_a_valid_token_and_the_right_role() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let (s, body) = api
        .call(reqwest::Method::GET, "/workspaces", None, None)
        .await?;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "unauthorized");
    let (s, _) = api
        .call(reqwest::Method::GET, "/workspaces", Some("not.a.jwt"), None)
        .await?;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let forged = control_api::Keys::hs256(&[9u8; 32])?;
    let forged = testkit::token(&forged, Role::Admin, None)?;
    let (s, _) = api
        .call(reqwest::Method::GET, "/workspaces", Some(&forged), None)
        .await?;
    assert_eq!(
        s,
        StatusCode::UNAUTHORIZED,
        "a token signed with another key"
    );

    let (s, _) = api
        .call(reqwest::Method::GET, "/workspaces", Some(&api.viewer), None)
        .await?;
    assert_eq!(s, StatusCode::OK, "viewers read");
    let (s, body) = api
        .call(
            reqwest::Method::POST,
            "/workspaces",
            Some(&api.viewer),
            Some(json!({"name": "x"})),
        )
        .await?;
    assert_eq!(s, StatusCode::FORBIDDEN, "viewers do not write");
    assert_eq!(body["error"], "forbidden");
    assert_eq!(
        count(&env.db.db, "SELECT count(*) FROM workspace").await?,
        0
    );
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activation_puts_the_new_version_on_the_lifecycle_stream() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let ws = api.workspace("acme").await?;
    let conn = api.connection(&ws, "github").await?;
    let id = conn["id"].as_str().unwrap();
    assert_eq!(conn["status"], "pending");
    assert_eq!(conn["version"], 1);
    assert_eq!(conn["secret_names"], json!(["token"]));
    assert!(
        !conn.to_string().contains("supersecret"),
        "secret values are never returned"
    );
    let stored = count(
        &env.db.db,
        "SELECT count(*) FROM connection_secret WHERE position('supersecret'::bytea in ciphertext) > 0",
    )
    .await?;
    assert_eq!(stored, 0, "secrets are encrypted at rest");

    let (s, body) = api
        .post(
            &format!("/workspaces/{ws}/connections/{id}/activate"),
            json!({}),
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "active");
    assert_eq!(body["version"], 2);
    assert_eq!(body["lifecycle_generation"], 1);

    let subject = format!("lifecycle.github.{id}.activated");
    let messages = testkit::read_stream(
        &env.bus,
        Stream::Lifecycle,
        &subject,
        1,
        Duration::from_secs(10),
    )
    .await?;
    assert_eq!(messages.len(), 1, "one message for one transition");
    let payload = messages[0].json();
    assert_eq!(payload["version"], 2);
    assert_eq!(payload["status"], "active");
    assert_eq!(payload["workspace_id"], ws);

    let (s, audit) = api
        .get(&format!("/workspaces/{ws}/connections/{id}/audit"))
        .await?;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(audit[0]["action"], "activate");
    assert_eq!(audit[0]["before_status"], "pending");
    assert_eq!(audit[0]["after_status"], "active");
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_illegal_transition_is_409_and_writes_nothing() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let ws = api.workspace("acme").await?;
    let conn = api.connection(&ws, "gitlab").await?;
    let id = conn["id"].as_str().unwrap();
    let before = footprint(&env).await?;
    let (s, body) = api
        .post(
            &format!("/workspaces/{ws}/connections/{id}/resume"),
            json!({}),
        )
        .await?;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(body["error"], "illegal_transition");
    assert!(
        body["message"].as_str().unwrap().contains("pending"),
        "{body}"
    );
    assert_eq!(footprint(&env).await?, before);

    let (s, _) = api
        .post(
            &format!("/workspaces/{ws}/connections/{id}/explode"),
            json!({}),
        )
        .await?;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "unknown transitions are not routes"
    );
    assert_eq!(footprint(&env).await?, before);
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_initial_is_422_and_reconciliation_queues_a_job_with_its_message() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let ws = api.workspace("acme").await?;
    let conn = api.connection(&ws, "github").await?;
    let id = conn["id"].as_str().unwrap();
    let sync = format!("/workspaces/{ws}/connections/{id}/sync");

    let (s, body) = api.post(&sync, json!({ "type": "RECONCILIATION" })).await?;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "a pending connection does not sync: {body}"
    );
    api.post(
        &format!("/workspaces/{ws}/connections/{id}/activate"),
        json!({}),
    )
    .await?;

    let before = footprint(&env).await?;
    let (s, body) = api.post(&sync, json!({ "type": "INITIAL" })).await?;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body["message"].as_str().unwrap().contains("activat"),
        "{body}"
    );
    let (s, _) = api.post(&sync, json!({ "type": "EVERYTHING" })).await?;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(footprint(&env).await?, before, "refused jobs write nothing");

    let (s, job) = api.post(&sync, json!({ "type": "RECONCILIATION" })).await?;
    assert_eq!(s, StatusCode::ACCEPTED, "{job}");
    assert_eq!(job["status"], "queued");
    assert_eq!(job["trigger"], "manual");
    let subject = format!("jobs.github.{id}.reconciliation");
    let messages =
        testkit::read_stream(&env.bus, Stream::Jobs, &subject, 1, Duration::from_secs(10)).await?;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].json()["job_id"], job["id"]);

    let (s, jobs) = api
        .get(&format!("/workspaces/{ws}/connections/{id}/jobs"))
        .await?;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(jobs.as_array().unwrap().len(), 1);
    assert_eq!(jobs[0]["type"], "RECONCILIATION");
    running.stop().await
}

/// A connection cannot queue without bound: while a job of a type waits, asking for another one
/// of that type answers the waiting job (one job row, one message); another type queues its own,
/// and once the waiting job has started, the next request queues again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_one_job_per_type_waits_for_a_connection() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let ws = api.workspace("acme").await?;
    let conn = api.connection(&ws, "github").await?;
    let id = conn["id"].as_str().unwrap();
    api.post(
        &format!("/workspaces/{ws}/connections/{id}/activate"),
        json!({}),
    )
    .await?;
    let sync = format!("/workspaces/{ws}/connections/{id}/sync");
    let mut ids = Vec::new();
    for _ in 0..20 {
        let (s, job) = api.post(&sync, json!({ "type": "RECONCILIATION" })).await?;
        assert_eq!(s, StatusCode::ACCEPTED, "{job}");
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "a second waiting job was queued: {ids:?}");
    let (s, backfill) = api.post(&sync, json!({ "type": "BACKFILL" })).await?;
    assert_eq!(s, StatusCode::ACCEPTED, "{backfill}");
    assert_ne!(backfill["id"].as_str().unwrap(), ids[0]);
    let reconciles = |db| {
        count(
            db,
            "SELECT count(*) FROM sync_job WHERE job_type = 'RECONCILIATION'",
        )
    };
    assert_eq!(reconciles(&env.db.db).await?, 1);
    let subject = format!("jobs.github.{id}.reconciliation");
    let messages =
        testkit::read_stream(&env.bus, Stream::Jobs, &subject, 2, Duration::from_secs(2)).await?;
    assert_eq!(messages.len(), 1, "one message for the one job");

    // Once it runs, the next request waits as a job of its own.
    count(
        &env.db.db,
        "WITH s AS (UPDATE sync_job SET status = 'running' WHERE job_type = 'RECONCILIATION' RETURNING 1) SELECT count(*) FROM s",
    )
    .await?;
    let (s, next) = api.post(&sync, json!({ "type": "RECONCILIATION" })).await?;
    assert_eq!(s, StatusCode::ACCEPTED, "{next}");
    assert_ne!(next["id"].as_str().unwrap(), ids[0]);
    assert_eq!(reconciles(&env.db.db).await?, 2);
    running.stop().await
}

/// A tenant cannot grow without bound: a workspace holds at most its cap of connections (a
/// disconnected one frees its place) and a connection's settings name at most its cap of
/// repositories; each refusal is 422 naming the cap, and writes nothing. Another workspace is not
/// held to the first one's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_and_monitors_are_capped_per_tenant() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start_with(&env, |c| {
        c.max_connections_per_workspace = 2;
        c.max_monitors_per_connection = 3;
    })
    .await?;
    let ws = api.workspace("acme").await?;
    let first = api.connection(&ws, "gitlab").await?;
    api.connection(&ws, "gitlab").await?;
    let path = format!("/workspaces/{ws}/connections");
    let before = count(&env.db.db, "SELECT count(*) FROM connection").await?;
    let (s, body) = api
        .post(
            &path,
            json!({ "kind": "gitlab", "secrets": { "token": "glpat-x" } }),
        )
        .await?;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"], "connection_cap");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("FORGESYNC_MAX_CONNECTIONS_PER_WORKSPACE = 2"),
        "{body}"
    );
    assert_eq!(
        count(&env.db.db, "SELECT count(*) FROM connection").await?,
        before
    );
    // Another workspace has its own count.
    let other = api.workspace("globex").await?;
    api.connection(&other, "gitlab").await?;
    // A disconnected connection frees its place.
    let id = first["id"].as_str().unwrap();
    let (s, body) = api
        .post(
            &format!("/workspaces/{ws}/connections/{id}/disconnect"),
            json!({}),
        )
        .await?;
    assert!(s.is_success(), "{body}");
    api.connection(&ws, "gitlab").await?;

    let (s, body) = api
        .post(
            &format!("/workspaces/{other}/connections"),
            json!({ "kind": "github", "secrets": { "token": "ghp-x" },
                "settings": { "auth": "pat", "repositories": ["a/1", "a/2", "a/3", "a/4"] } }),
        )
        .await?;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"], "monitor_cap");
    assert!(
        body["message"].as_str().unwrap().contains("cap of 3"),
        "{body}"
    );
    running.stop().await
}

/// Every list pages: at most `limit` entries, and `after` the last one the next page, neither
/// skipping nor repeating; a `limit` past the bound is held to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_by_keyset() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let mut workspaces = Vec::new();
    for name in ["a", "b", "c"] {
        workspaces.push(api.workspace(name).await?);
    }
    let ws = &workspaces[0];
    let mut connections = Vec::new();
    for _ in 0..3 {
        connections.push(
            api.connection(ws, "gitlab").await?["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let id = &connections[0];
    for transition in ["activate", "suspend", "resume"] {
        let (s, body) = api
            .post(
                &format!("/workspaces/{ws}/connections/{id}/{transition}"),
                json!({}),
            )
            .await?;
        assert!(s.is_success(), "{transition}: {body}");
    }
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect()
    };
    for (path, all) in [
        ("/workspaces".to_owned(), workspaces.clone()),
        (format!("/workspaces/{ws}/connections"), connections.clone()),
    ] {
        let (s, first) = api.get(&format!("{path}?limit=2")).await?;
        assert_eq!(s, StatusCode::OK, "{first}");
        assert_eq!(ids(&first), all[..2], "{path}");
        let (_, rest) = api.get(&format!("{path}?limit=2&after={}", all[1])).await?;
        assert_eq!(ids(&rest), all[2..], "{path}");
        let (_, whole) = api.get(&format!("{path}?limit=100000")).await?;
        assert_eq!(ids(&whole), all, "{path}");
    }
    // The audit trail, newest first: create and three transitions.
    let audit = format!("/workspaces/{ws}/connections/{id}/audit");
    let (_, whole) = api.get(&audit).await?;
    let trail = ids(&whole);
    assert_eq!(trail.len(), 4, "{whole}");
    let (_, first) = api.get(&format!("{audit}?limit=3")).await?;
    assert_eq!(ids(&first), trail[..3]);
    let (_, rest) = api.get(&format!("{audit}?after={}", trail[2])).await?;
    assert_eq!(ids(&rest), trail[3..]);
    let (s, _) = api.get(&format!("{audit}?after=not-an-id")).await?;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_type_the_vendor_refuses_is_422_and_writes_nothing() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let ws = api.workspace("acme").await?;
    for (kind, vendor) in [("slack", "Slack"), ("outline", "Outline")] {
        let conn = api.connection(&ws, kind).await?;
        let id = conn["id"].as_str().unwrap();
        api.post(
            &format!("/workspaces/{ws}/connections/{id}/activate"),
            json!({}),
        )
        .await?;
        let sync = format!("/workspaces/{ws}/connections/{id}/sync");
        let before = footprint(&env).await?;
        let (s, body) = api.post(&sync, json!({ "type": "BACKFILL" })).await?;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{kind}: {body}");
        assert_eq!(body["error"], "job_type_not_supported");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{vendor} connections do not backfill: ")),
            "{body}"
        );
        assert_eq!(
            footprint(&env).await?,
            before,
            "{kind}: a refused job writes nothing"
        );
        // What the vendor runs is still queued.
        let (s, job) = api.post(&sync, json!({ "type": "RECONCILIATION" })).await?;
        assert_eq!(s, StatusCode::ACCEPTED, "{kind}: {job}");
    }
    // The contract names the error a client meets here.
    let (s, doc) = api
        .call(reqwest::Method::GET, "/openapi.json", None, None)
        .await?;
    assert_eq!(s, StatusCode::OK);
    let described = &doc["paths"]["/workspaces/{workspace_id}/connections/{connection_id}/sync"]["post"]
        ["responses"]["422"]["description"];
    assert!(
        described
            .as_str()
            .is_some_and(|d| d.contains("`job_type_not_supported`")),
        "{described}"
    );
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_workspaces_connection_is_not_found() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let ws_a = api.workspace("a").await?;
    let ws_b = api.workspace("b").await?;
    let conn = api.connection(&ws_a, "slack").await?;
    let id = conn["id"].as_str().unwrap();

    // The right connection id under the wrong workspace.
    let (s, _) = api
        .get(&format!("/workspaces/{ws_b}/connections/{id}"))
        .await?;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let before = footprint(&env).await?;
    let (s, _) = api
        .post(
            &format!("/workspaces/{ws_b}/connections/{id}/activate"),
            json!({}),
        )
        .await?;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(footprint(&env).await?, before);

    // A token scoped to workspace B cannot see A at all.
    let b_token = testkit::token(&api.keys, Role::Admin, Some(ws_b.parse()?))?;
    let get = |path: String| {
        let t = b_token.clone();
        let api = &api;
        async move { api.call(reqwest::Method::GET, &path, Some(&t), None).await }
    };
    assert_eq!(
        get(format!("/workspaces/{ws_a}")).await?.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(format!("/workspaces/{ws_a}/connections/{id}")).await?.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(format!("/workspaces/{ws_a}/connections")).await?.0,
        StatusCode::NOT_FOUND
    );
    let (s, list) = get("/workspaces".into()).await?;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], ws_b);
    assert_eq!(get("/dead-messages".into()).await?.0, StatusCode::FORBIDDEN);
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_json_errors() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let res = api
        .http
        .post(format!("{}/workspaces", api.base))
        .bearer_auth(&api.admin)
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .send()
        .await?;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body: Value = res.json().await?;
    assert_eq!(body["error"], "malformed_json");

    // Declares 200 KiB and sends one byte past the 64 KiB limit (see testkit::http).
    let (s, body) = testkit::http::post_declaring(
        &format!("{}/workspaces", api.base),
        &[
            ("authorization", format!("Bearer {}", api.admin)),
            ("content-type", "application/json".to_owned()),
        ],
        200 * 1024,
        format!("{{\"name\": \"{}", "x".repeat(64 * 1024)).as_bytes(),
    )
    .await?;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let body: Value = serde_json::from_str(&body)?;
    assert_eq!(body["error"], "payload_too_large");
    let (s, body) = api
        .post("/workspaces", json!({ "name": "ok", "extra": 1 }))
        .await?;
    assert_eq!(
        s,
        StatusCode::BAD_REQUEST,
        "unknown fields are refused: {body}"
    );
    let (s, body) = api.get("/no/such/route").await?;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(body["error"], "not_found");
    let (s, body) = api.get("/workspaces/not-a-uuid").await?;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "bad_path");
    let ws = api.workspace("acme").await?;
    let (s, _) = api
        .post(
            &format!("/workspaces/{ws}/connections"),
            json!({ "kind": "bitbucket" }),
        )
        .await?;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        count(&env.db.db, "SELECT count(*) FROM workspace").await?,
        1
    );

    let (s, doc) = api
        .call(reqwest::Method::GET, "/openapi.json", None, None)
        .await?;
    assert_eq!(s, StatusCode::OK);
    assert!(
        doc["paths"]["/workspaces/{workspace_id}/connections/{connection_id}/sync"].is_object()
    );
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_marks_purging_and_announces_it_once() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let ws = api.workspace("acme").await?;
    let (s, body) = api
        .post(&format!("/workspaces/{ws}/purge"), json!({}))
        .await?;
    assert_eq!(s, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "purging");
    let (s, _) = api
        .post(&format!("/workspaces/{ws}/purge"), json!({}))
        .await?;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, _) = api
        .post(
            &format!("/workspaces/{ws}/connections"),
            json!({ "kind": "github" }),
        )
        .await?;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "a purging workspace gains no connections"
    );
    let subject = format!("lifecycle.workspace.{ws}.purged");
    let messages = testkit::read_stream(
        &env.bus,
        Stream::Lifecycle,
        &subject,
        1,
        Duration::from_secs(10),
    )
    .await?;
    assert_eq!(messages.len(), 1);
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_messages_are_listed_and_replayed() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let dead = bus::dead::record(
        &env.db.db,
        bus::dead::DeadMessage {
            stream: "LIFECYCLE".into(),
            consumer: "github-sync".into(),
            subject: "lifecycle.github.c9.activated".into(),
            headers: None,
            payload: b"{\"v\":1}".to_vec(),
            reason: "handler failed: no such repository".into(),
            attempts: 10,
        },
    )
    .await?;
    let (s, list) = api.get("/dead-messages").await?;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list[0]["id"], dead.to_string());
    assert_eq!(list[0]["reason"], "handler failed: no such repository");
    assert_eq!(list[0]["payload_bytes"], 7);

    let (s, body) = api
        .call(
            reqwest::Method::POST,
            &format!("/dead-messages/{dead}/replay"),
            Some(&api.viewer),
            None,
        )
        .await?;
    assert_eq!(s, StatusCode::FORBIDDEN, "{body}");
    let (s, body) = api
        .post(&format!("/dead-messages/{dead}/replay"), json!({}))
        .await?;
    assert_eq!(s, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["replay_count"], 1);
    let messages = testkit::read_stream(
        &env.bus,
        Stream::Lifecycle,
        "lifecycle.github.c9.activated",
        1,
        Duration::from_secs(10),
    )
    .await?;
    assert_eq!(messages.len(), 1, "the replay reached the stream");
    assert_eq!(messages[0].payload, b"{\"v\":1}");
    let missing = uuid::Uuid::now_v7();
    let (s, _) = api
        .post(&format!("/dead-messages/{missing}/replay"), json!({}))
        .await?;
    assert_eq!(s, StatusCode::NOT_FOUND);
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_can_be_canceled_once() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let ws = api.workspace("acme").await?;
    let other = api.workspace("other").await?;
    let conn = api.connection(&ws, "github").await?;
    let id = conn["id"].as_str().unwrap();
    api.post(
        &format!("/workspaces/{ws}/connections/{id}/activate"),
        json!({}),
    )
    .await?;
    let (_, job) = api
        .post(
            &format!("/workspaces/{ws}/connections/{id}/sync"),
            json!({ "type": "BACKFILL" }),
        )
        .await?;
    let job_id = job["id"].as_str().unwrap();
    let cancel = format!("/workspaces/{ws}/connections/{id}/jobs/{job_id}/cancel");

    let (s, _) = api
        .post(
            &format!("/workspaces/{other}/connections/{id}/jobs/{job_id}/cancel"),
            json!({}),
        )
        .await?;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "another workspace cannot cancel it"
    );
    let (s, body) = api.post(&cancel, json!({})).await?;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "canceled");
    let (s, body) = api.post(&cancel, json!({})).await?;
    assert_eq!(s, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "job_finished");
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_secrets_is_scoped_audited_and_clears_refused_credentials() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let ws = api.workspace("acme").await?;
    let conn = api.connection(&ws, "github").await?;
    let id = conn["id"].as_str().unwrap();
    let path = format!("/workspaces/{ws}/connections/{id}/secrets");
    // As the sync engine flags a connection whose token GitHub refused.
    env.db
        .db
        .execute_unprepared(&format!(
            "UPDATE connection SET credentials_refused_at = now(), credentials_refusal = 'bad_credentials: revoked' WHERE id = '{id}'"
        ))
        .await?;
    let (_, view) = api
        .get(&format!("/workspaces/{ws}/connections/{id}"))
        .await?;
    assert_eq!(view["needs_credentials"], true, "{view}");
    assert_eq!(view["credentials_refusal"], "bad_credentials: revoked");
    let sealed = "SELECT encode(ciphertext, 'hex') FROM connection_secret WHERE name = 'token'";
    let stored = |db: DatabaseConnection| async move {
        let row = db
            .query_one_raw(Statement::from_string(DbBackend::Postgres, sealed))
            .await?
            .expect("a secret");
        anyhow::Ok(row.try_get_by_index::<String>(0)?)
    };
    let before = stored(env.db.db.clone()).await?;

    // Another workspace's admin, a viewer, and bad bodies change nothing.
    let ws_b = api.workspace("other").await?;
    let b_token = testkit::token(&api.keys, Role::Admin, Some(ws_b.parse()?))?;
    let body = json!({"secrets": {"token": "ghp_attacker"}});
    let refusals = [
        (Some(b_token.as_str()), body.clone(), StatusCode::NOT_FOUND),
        (
            Some(api.viewer.as_str()),
            body.clone(),
            StatusCode::FORBIDDEN,
        ),
        (
            Some(api.admin.as_str()),
            json!({"secrets": {}}),
            StatusCode::BAD_REQUEST,
        ),
        (
            Some(api.admin.as_str()),
            json!({"secrets": {"token": "x"}, "extra": 1}),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (token, body, expected) in refusals {
        let (s, answer) = api
            .call(reqwest::Method::PUT, &path, token, Some(body))
            .await?;
        assert_eq!(s, expected, "{answer}");
    }
    assert_eq!(stored(env.db.db.clone()).await?, before);
    assert_eq!(
        count(
            &env.db.db,
            "SELECT count(*) FROM connection WHERE credentials_refused_at IS NOT NULL"
        )
        .await?,
        1
    );

    let (s, view) = api
        .call(
            reqwest::Method::PUT,
            &path,
            Some(&api.admin),
            Some(json!({"secrets": {"token": "ghp_replacementvalue"}})),
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{view}");
    assert_eq!(view["needs_credentials"], false, "{view}");
    assert_eq!(view["credentials_refused_at"], Value::Null);
    assert_eq!(view["secret_names"], json!(["token"]));
    assert!(!view.to_string().contains("ghp_replacementvalue"));
    assert_ne!(stored(env.db.db.clone()).await?, before);
    let (_, audit) = api
        .get(&format!("/workspaces/{ws}/connections/{id}/audit"))
        .await?;
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["action"] == "replace_secrets"),
        "{audit}"
    );
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_name_the_kind_does_not_take_is_422_and_stores_nothing() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, running) = Api::start(&env).await?;
    let ws = api.workspace("acme").await?;
    let conn = api.connection(&ws, "gitlab").await?;
    let id = conn["id"].as_str().unwrap();
    let path = format!("/workspaces/{ws}/connections/{id}/secrets");
    let sealed = format!(
        "SELECT coalesce(string_agg(name || ':' || encode(ciphertext, 'hex'), ',' ORDER BY name), '')
           FROM connection_secret WHERE connection_id = '{id}'"
    );
    let stored = || async {
        let row = env
            .db
            .db
            .query_one_raw(Statement::from_string(DbBackend::Postgres, sealed.clone()))
            .await?
            .expect("a row");
        anyhow::Ok(row.try_get_by_index::<String>(0)?)
    };
    let before = stored().await?;
    assert!(before.starts_with("token:"), "{before}");
    let audits = "SELECT count(*) FROM connection_audit";
    let audited = count(&env.db.db, audits).await?;

    // A GitLab connection takes only `token`: another name, even beside `token`, or a name
    // shaped like an endpoint's own secret, is refused whole and names what is allowed.
    let endpoint_like = format!("webhook/{}/{}", uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    for secrets in [
        json!({"webhook_secret": "x"}),
        json!({"token": "glpat-new", "private_key": "-----BEGIN"}),
        json!({ endpoint_like.clone(): "attacker-chosen" }),
        json!({"": "x"}),
    ] {
        let (s, body) = api
            .call(
                reqwest::Method::PUT,
                &path,
                Some(&api.admin),
                Some(json!({ "secrets": secrets })),
            )
            .await?;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{secrets}: {body}");
        assert_eq!(body["error"], "unknown_secret_name", "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("only the secrets `token`"), "{message}");
        assert!(!message.contains("attacker-chosen"), "{message}");
    }
    // Another workspace's admin reaches nothing, whatever the name: 404, never the kind's rule.
    let ws_b = api.workspace("other").await?;
    let b_admin = testkit::token(&api.keys, Role::Admin, Some(ws_b.parse()?))?;
    for p in [
        path.clone(),
        format!("/workspaces/{ws_b}/connections/{id}/secrets"),
    ] {
        for secrets in [json!({"token": "glpat-attacker"}), json!({"nope": "x"})] {
            let (s, body) = api
                .call(
                    reqwest::Method::PUT,
                    &p,
                    Some(&b_admin),
                    Some(json!({ "secrets": secrets })),
                )
                .await?;
            assert_eq!(s, StatusCode::NOT_FOUND, "{p}: {body}");
            assert_eq!(body["error"], "not_found", "{body}");
        }
    }
    assert_eq!(stored().await?, before);
    assert_eq!(count(&env.db.db, audits).await?, audited);

    // Creation holds the same rule: nothing is created.
    let connections = "SELECT count(*) FROM connection";
    let existing = count(&env.db.db, connections).await?;
    let (s, body) = api
        .post(
            &format!("/workspaces/{ws}/connections"),
            json!({"kind": "gitlab", "settings": {"group": "acme"},
                   "secrets": {"token": "glpat-x", "private_key": "k"}}),
        )
        .await?;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"], "unknown_secret_name", "{body}");
    assert_eq!(count(&env.db.db, connections).await?, existing);

    // The names the kind takes are accepted: GitLab's `token`, a GitHub App's `private_key`.
    let (s, view) = api
        .call(
            reqwest::Method::PUT,
            &path,
            Some(&api.admin),
            Some(json!({"secrets": {"token": "glpat-replacement"}})),
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{view}");
    assert_eq!(view["secret_names"], json!(["token"]));
    assert_ne!(stored().await?, before);
    let github = api.connection(&ws, "github").await?;
    let (s, view) = api
        .call(
            reqwest::Method::PUT,
            &format!(
                "/workspaces/{ws}/connections/{}/secrets",
                github["id"].as_str().unwrap()
            ),
            Some(&api.admin),
            Some(json!({"secrets": {"private_key": "-----BEGIN PRIVATE KEY-----"}})),
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{view}");
    assert_eq!(view["secret_names"], json!(["private_key", "token"]));
    running.stop().await
}
