//! A connection's server URL: https only unless the operator allows http, never with user info.
//! A refused URL answers 422 and stores nothing.

use anyhow::Result;
use control_api::Role;
use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde_json::{Value, json};
use testkit::TestEnv;

async fn count(env: &TestEnv, table: &str) -> Result<i64> {
    let row = env
        .db
        .db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT count(*) FROM {table}"),
        ))
        .await?
        .expect("a count row");
    Ok(row.try_get_by_index(0)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_or_credentialed_server_urls_are_refused_and_store_nothing() -> Result<()> {
    let env = TestEnv::new().await?;
    // The operator's default: FORGESYNC_ALLOW_INSECURE_SERVER_URLS unset.
    let mut config = testkit::control_api_config(env.common_args());
    config.allow_insecure_server_urls = false;
    let api = testkit::spawn(config).await?;
    let keys = testkit::control_api_keys()?;
    let admin = testkit::token(&keys, Role::Admin, None)?;
    let http = reqwest::Client::new();
    let post = |path: String, body: Value| {
        let req = http
            .post(format!("{}{path}", api.url()))
            .bearer_auth(&admin)
            .json(&body);
        async move {
            let res = req.send().await?;
            let status = res.status();
            anyhow::Ok((status, res.json::<Value>().await?))
        }
    };
    let (status, ws) = post("/workspaces".into(), json!({ "name": "acme" })).await?;
    assert_eq!(status, StatusCode::CREATED, "{ws}");
    let ws = ws["id"].as_str().unwrap().to_owned();
    let path = format!("/workspaces/{ws}/connections");

    let before = [
        count(&env, "connection").await?,
        count(&env, "provider_instance").await?,
        count(&env, "connection_secret").await?,
    ];
    for url in [
        "http://gitlab.example.com",
        "https://user:hunter2@gitlab.example.com",
        "http://user:hunter2@gitlab.example.com",
        "https://glpat-abc@gitlab.example.com/group",
        "ftp://gitlab.example.com",
        "gitlab.example.com",
    ] {
        let (status, body) = post(
            path.clone(),
            json!({ "kind": "gitlab", "server_url": url, "secrets": { "token": "glpat-x" } }),
        )
        .await?;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {body}");
        assert_eq!(body["error"], "invalid_server_url", "{url}: {body}");
        assert!(
            !body.to_string().contains("hunter2"),
            "the refusal echoes a password: {body}"
        );
    }
    assert_eq!(
        [
            count(&env, "connection").await?,
            count(&env, "provider_instance").await?,
            count(&env, "connection_secret").await?,
        ],
        before
    );

    // https without user info is accepted.
    let (status, body) = post(
        path.clone(),
        json!({ "kind": "gitlab", "server_url": "https://gitlab.example.com" }),
    )
    .await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    api.stop().await
}

/// A server on 127.0.0.1 that answers every request with `status` and `body`, counting them.
async fn counting_server(
    status: u16,
    body: &'static str,
) -> Result<(String, std::sync::Arc<std::sync::atomic::AtomicUsize>)> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            (axum::http::StatusCode::from_u16(status).unwrap(), body)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((port.to_string(), hits))
}

/// A running control-api with `tweak` applied, an admin token for everything and a workspace.
async fn api_with(
    env: &TestEnv,
    tweak: impl FnOnce(&mut control_api::Config),
) -> Result<(testkit::Running, String, String)> {
    let mut config = testkit::control_api_config(env.common_args());
    tweak(&mut config);
    let api = testkit::spawn(config).await?;
    let keys = testkit::control_api_keys()?;
    let admin = testkit::token(&keys, Role::Admin, None)?;
    let res = reqwest::Client::new()
        .post(format!("{}/workspaces", api.url()))
        .bearer_auth(&admin)
        .json(&json!({ "name": "acme" }))
        .send()
        .await?;
    let ws: Value = res.json().await?;
    let ws = ws["id"].as_str().expect("a workspace id").to_owned();
    Ok((api, admin, ws))
}

async fn create(
    api: &testkit::Running,
    token: &str,
    workspace: &str,
    body: Value,
) -> Result<(StatusCode, Value)> {
    let res = reqwest::Client::new()
        .post(format!("{}/workspaces/{workspace}/connections", api.url()))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await?;
    Ok((res.status(), res.json().await?))
}

fn pat_connection(server_url: &str) -> Value {
    json!({ "kind": "github", "server_url": server_url, "secrets": { "token": "ghp-x" },
        "settings": { "auth": "pat", "repositories": ["acme/api"] } })
}

/// The tenant names our own network as its vendor: loopback by address and by name, cloud
/// metadata, private, CGNAT and unique-local ranges. Each is refused as "vendor unreachable"
/// without a request reaching it or an address in the answer, and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_urls_on_internal_addresses_are_refused_and_never_contacted() -> Result<()> {
    let env = TestEnv::new().await?;
    // The operator's default: no range allowed (the tests' loopback allowance removed).
    let (api, admin, ws) = api_with(&env, |c| {
        c.common.egress = vendor_http::egress::Egress::public_only();
    })
    .await?;
    let (port, hits) = counting_server(200, "{}").await?;
    let before = count(&env, "connection").await?;
    for url in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
        format!("http://[::ffff:127.0.0.1]:{port}"),
        "http://169.254.169.254".to_owned(),
        "http://10.0.0.1:8080".to_owned(),
        "http://100.64.1.1".to_owned(),
        "http://[fd00::1]".to_owned(),
    ] {
        for body in [
            pat_connection(&url),
            json!({ "kind": "gitlab", "server_url": url, "secrets": { "token": "glpat-x" } }),
        ] {
            let (status, answer) = create(&api, &admin, &ws, body).await?;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {answer}");
            assert_eq!(answer["error"], "vendor_unreachable", "{url}: {answer}");
            let text = answer.to_string();
            assert!(
                !text.contains(&port) && !text.contains("127.0.0.1") && !text.contains("169.254"),
                "the refusal names the address: {text}"
            );
        }
    }
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(count(&env, "connection").await?, before);
    api.stop().await
}

/// An admin of workspace A names a server in a request for workspace B: refused before any
/// vendor call, so a tenant cannot make control-api connect anywhere for a workspace it does not
/// hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_vendor_call_is_made_for_a_workspace_the_caller_does_not_hold() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, admin, ws_b) = api_with(&env, |_| {}).await?;
    let res = reqwest::Client::new()
        .post(format!("{}/workspaces", api.url()))
        .bearer_auth(&admin)
        .json(&json!({ "name": "a-corp" }))
        .send()
        .await?;
    let ws_a: Value = res.json().await?;
    let ws_a: uuid::Uuid = ws_a["id"].as_str().expect("an id").parse()?;
    let a_admin = testkit::token(&testkit::control_api_keys()?, Role::Admin, Some(ws_a))?;
    let (port, hits) = counting_server(200, "{}").await?;
    let (status, answer) = create(
        &api,
        &a_admin,
        &ws_b,
        pat_connection(&format!("http://127.0.0.1:{port}")),
    )
    .await?;
    assert!(
        status == StatusCode::NOT_FOUND || status == StatusCode::FORBIDDEN,
        "{status}: {answer}"
    );
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "control-api called the vendor for a workspace the caller does not hold"
    );
    api.stop().await
}

/// A server the operator allows answers with a page of its own: the tenant learns the kind of
/// failure, never the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_answer_never_reaches_the_tenant_in_an_error() -> Result<()> {
    let env = TestEnv::new().await?;
    let (api, admin, ws) = api_with(&env, |_| {}).await?;
    let (port, hits) = counting_server(400, "internal-admin-console token=s3cr3t").await?;
    let (status, answer) = create(
        &api,
        &admin,
        &ws,
        pat_connection(&format!("http://127.0.0.1:{port}")),
    )
    .await?;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{answer}");
    assert!(hits.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let text = answer.to_string();
    assert!(
        !text.contains("s3cr3t") && !text.contains("internal-admin-console"),
        "the server's answer reached the tenant: {text}"
    );
    api.stop().await
}
