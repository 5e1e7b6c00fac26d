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
