//! Webhook endpoints through control-api, checked against a running ingress: rotation window,
//! explicit replay, and disconnect disabling the endpoints.

use std::time::Duration;

use anyhow::Result;
use bus::Stream;
use control_api::Role;
use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::TestEnv;

struct Stack {
    http: reqwest::Client,
    api: String,
    ingress: String,
    admin: String,
    keys: control_api::Keys,
}

impl Stack {
    async fn call(&self, path: &str, token: &str, body: Value) -> Result<(StatusCode, Value)> {
        let res = self
            .http
            .post(format!("{}{path}", self.api))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await?;
        let status = res.status();
        Ok((status, res.json().await.unwrap_or(Value::Null)))
    }

    /// A signed GitHub push to hook `hook`.
    async fn push(&self, hook: &str, delivery: &str, secret: &str) -> Result<(StatusCode, Value)> {
        let body = serde_json::to_vec(&json!({"ref": "refs/heads/main", "after": delivery,
            "repository": {"name": "api", "owner": {"login": "acme"}}}))?;
        let sig = ingress::verify::sign_hex(secret.as_bytes(), &[&body]);
        let res = self
            .http
            .post(format!("{}/webhooks/github", self.ingress))
            .header("X-GitHub-Event", "push")
            .header("X-GitHub-Delivery", delivery)
            .header("X-GitHub-Hook-ID", hook)
            .header("X-Hub-Signature-256", format!("sha256={sig}"))
            .body(body)
            .send()
            .await?;
        let status = res.status();
        Ok((status, res.json().await.unwrap_or(Value::Null)))
    }
}

async fn start(env: &TestEnv) -> Result<(Stack, testkit::Running, testkit::Running)> {
    let (api, keys) = testkit::spawn_control_api(env.common_args()).await?;
    let ingress = testkit::spawn_ingress(env.common_args()).await?;
    let stack = Stack {
        http: reqwest::Client::new(),
        api: api.url(),
        ingress: ingress.url(),
        admin: testkit::token(&keys, Role::Admin, None)?,
        keys,
    };
    Ok((stack, api, ingress))
}

/// A workspace with an active GitHub connection and an endpoint for hook `hook`.
async fn github_endpoint(s: &Stack, hook: &str, secret: &str) -> Result<(String, String, String)> {
    let (st, ws) = s
        .call("/workspaces", &s.admin, json!({"name": "acme"}))
        .await?;
    assert_eq!(st, StatusCode::CREATED, "{ws}");
    let ws = ws["id"].as_str().unwrap().to_owned();
    let (st, conn) = s
        .call(
            &format!("/workspaces/{ws}/connections"),
            &s.admin,
            json!({"kind": "github"}),
        )
        .await?;
    assert_eq!(st, StatusCode::CREATED, "{conn}");
    let conn = conn["id"].as_str().unwrap().to_owned();
    let (st, _) = s
        .call(
            &format!("/workspaces/{ws}/connections/{conn}/activate"),
            &s.admin,
            json!({}),
        )
        .await?;
    assert_eq!(st, StatusCode::OK);
    let (st, ep) = s
        .call(
            &format!("/workspaces/{ws}/connections/{conn}/endpoints"),
            &s.admin,
            json!({"registration": "operator", "provider_ref": hook, "secret": secret}),
        )
        .await?;
    assert_eq!(st, StatusCode::CREATED, "{ep}");
    assert!(ep.get("secret").is_some());
    Ok((ws, conn, ep["id"].as_str().unwrap().to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_secret_keeps_the_old_one_for_its_window_only() -> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (ws, conn, ep) = github_endpoint(&s, "901", "old-secret-0123456789").await?;
    let path = format!("/workspaces/{ws}/connections/{conn}/endpoints/{ep}/rotate-secret");

    // Another workspace's token does not see the endpoint.
    let stranger = testkit::token(&s.keys, Role::Admin, Some(uuid::Uuid::now_v7()))?;
    assert_eq!(
        s.call(&path, &stranger, json!({})).await?.0,
        StatusCode::NOT_FOUND
    );

    let (st, rotated) = s
        .call(
            &path,
            &s.admin,
            json!({"secret": "new-secret-0123456789", "window_secs": 2}),
        )
        .await?;
    assert_eq!(st, StatusCode::OK, "{rotated}");
    assert_eq!(rotated["status"], "rotating");
    assert_eq!(
        s.push("901", "a", "old-secret-0123456789").await?.0,
        StatusCode::OK
    );
    assert_eq!(
        s.push("901", "b", "new-secret-0123456789").await?.0,
        StatusCode::OK
    );

    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        s.push("901", "c", "old-secret-0123456789").await?.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        s.push("901", "d", "new-secret-0123456789").await?.0,
        StatusCode::OK
    );

    // A generated secret is returned once.
    let (st, again) = s.call(&path, &s.admin, json!({})).await?;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(again["secret"].as_str().map(str::len), Some(64));
    ingress.stop().await?;
    api.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_bypasses_dedup_and_records_its_origin() -> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (ws, _conn, _ep) = github_endpoint(&s, "902", "hook-secret-0123456789").await?;
    let (st, first) = s.push("902", "r-1", "hook-secret-0123456789").await?;
    assert_eq!(st, StatusCode::OK);
    let original = first["message_id"].as_str().unwrap().to_owned();

    let path = format!("/workspaces/{ws}/inbound-messages/{original}/replay");
    let stranger = testkit::token(&s.keys, Role::Admin, Some(uuid::Uuid::now_v7()))?;
    assert_eq!(
        s.call(&path, &stranger, json!({})).await?.0,
        StatusCode::NOT_FOUND
    );
    let (st, replay) = s.call(&path, &s.admin, json!({})).await?;
    assert_eq!(st, StatusCode::ACCEPTED, "{replay}");
    assert_eq!(replay["replay_of"], original.as_str());

    // A vendor redelivery is still a duplicate; the replay is a second message on the subject.
    let (_, dup) = s.push("902", "r-1", "hook-secret-0123456789").await?;
    assert_eq!(dup["status"], "duplicate");
    let got = testkit::read_stream(
        &env.bus,
        Stream::WebhooksGithub,
        "github.acme.api.push",
        2,
        Duration::from_secs(5),
    )
    .await?;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].payload, got[1].payload);
    assert_eq!(
        got[1].msg_id.as_deref(),
        Some(format!("replay:{}", replay["message_id"].as_str().unwrap()).as_str())
    );
    ingress.stop().await?;
    api.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_disables_endpoints_and_deliveries_get_410() -> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (ws, conn, _ep) = github_endpoint(&s, "903", "hook-secret-0123456789").await?;
    assert_eq!(
        s.push("903", "x-1", "hook-secret-0123456789").await?.0,
        StatusCode::OK
    );
    let (st, _) = s
        .call(
            &format!("/workspaces/{ws}/connections/{conn}/disconnect"),
            &s.admin,
            json!({}),
        )
        .await?;
    assert_eq!(st, StatusCode::OK);
    let (st, body) = s.push("903", "x-2", "hook-secret-0123456789").await?;
    assert_eq!(st, StatusCode::GONE, "{body}");
    // History stays.
    let (st, _) = s.push("903", "x-1", "hook-secret-0123456789").await?;
    assert_eq!(st, StatusCode::GONE);
    use sea_orm::ConnectionTrait as _;
    let row = env
        .db
        .db
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT count(*) FILTER (WHERE status = 'disabled'), (SELECT count(*) FROM inbound_message) FROM inbound_endpoint",
        ))
        .await?
        .unwrap();
    assert_eq!(
        (
            row.try_get_by_index::<i64>(0)?,
            row.try_get_by_index::<i64>(1)?
        ),
        (1, 1)
    );
    ingress.stop().await?;
    api.stop().await
}
