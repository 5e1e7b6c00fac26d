//! Helpers shared by the end-to-end suites: the fixture every GitHub App stack signs in with, one
//! way to call a service's JSON API, one way to wait for what a service does in the background,
//! and the GitLab stack (control-api, ingress, gitlab-sync) the GitLab suites connect through.
#![forbid(unsafe_code)]

use std::future::Future;
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

/// The GitHub App's private key the simulator trusts (github-client's test fixture).
pub const APP_KEY: &[u8] =
    include_bytes!("../crates/github-client/tests/fixtures/test-app-key.pem");

/// Sends `request`; returns the status and the JSON answer (`Null` when it is not JSON).
pub async fn send_json(request: reqwest::RequestBuilder) -> Result<(u16, Value)> {
    let res = request.send().await?;
    Ok((
        res.status().as_u16(),
        res.json().await.unwrap_or(Value::Null),
    ))
}

/// Polls `probe` every 100 ms until it yields a value; fails the test, saying `what` did not
/// happen, after two minutes.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(found) = probe().await? {
            return Ok(found);
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// control-api, ingress and gitlab-sync running against one test environment (gitlab-sync's
/// crons off, registering the group hooks it creates at this ingress), and an operator's admin
/// calls to control-api.
pub struct GitlabStack {
    pub control: testkit::Running,
    pub ingress: testkit::Running,
    pub sync: testkit::Running,
    token: String,
    http: reqwest::Client,
}

impl GitlabStack {
    pub async fn start(env: &testkit::TestEnv) -> Result<GitlabStack> {
        use base64::Engine as _;
        let control = testkit::spawn(testkit::control_api_config(env.common_args())).await?;
        let ingress = testkit::spawn(testkit::ingress_config(env.common_args())).await?;
        let routing_keys = format!(
            "k1={}",
            base64::engine::general_purpose::STANDARD.encode(testkit::ROUTING_KEY)
        );
        let sync_config: gitlab_sync::Config = testkit::config(
            env.common_args(),
            &[
                format!("--secret-key={}", testkit::secret_key()),
                "--reconcile-cron=off".to_owned(),
                "--backfill-cron=off".to_owned(),
                "--filter-refresh-ms=200".to_owned(),
                format!("--public-webhook-url={}", ingress.url()),
                format!("--routing-keys={routing_keys}"),
            ],
        )?;
        let sync = testkit::spawn(sync_config).await?;
        let token = testkit::token(
            &testkit::control_api_keys()?,
            control_api::Role::Admin,
            None,
        )?;
        Ok(GitlabStack {
            control,
            ingress,
            sync,
            token,
            http: reqwest::Client::new(),
        })
    }

    /// `GET path` at control-api as the admin.
    pub async fn get(&self, path: &str) -> Result<(u16, Value)> {
        let url = format!("{}{path}", self.control.url());
        send_json(self.http.get(url).bearer_auth(&self.token)).await
    }

    /// `POST path` with `body` at control-api as the admin.
    pub async fn post(&self, path: &str, body: Value) -> Result<(u16, Value)> {
        let url = format!("{}{path}", self.control.url());
        send_json(self.http.post(url).bearer_auth(&self.token).json(&body)).await
    }

    /// A new workspace `name` with a GitLab connection to group `group` at `server_url` (its
    /// secret `token`), activated: (workspace id, connection id).
    pub async fn connect(
        &self,
        name: &str,
        server_url: &str,
        group: &str,
        token: &str,
    ) -> Result<(String, String)> {
        let id = |what: &str, (status, body): (u16, Value)| {
            anyhow::ensure!(status == 201, "{what}: {status} {body}");
            body["id"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow::anyhow!("{what}: no id in {body}"))
        };
        let ws = id(
            "a workspace",
            self.post("/workspaces", serde_json::json!({ "name": name }))
                .await?,
        )?;
        let conn = id(
            "a connection",
            self.post(
                &format!("/workspaces/{ws}/connections"),
                serde_json::json!({
                    "kind": "gitlab",
                    "server_url": server_url,
                    "settings": { "group": group },
                    "secrets": { "token": token },
                }),
            )
            .await?,
        )?;
        let (status, body) = self
            .post(
                &format!("/workspaces/{ws}/connections/{conn}/activate"),
                serde_json::json!({}),
            )
            .await?;
        anyhow::ensure!(status == 200, "activation: {status} {body}");
        Ok((ws, conn))
    }
}
