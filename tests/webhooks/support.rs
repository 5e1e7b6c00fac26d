//! The live-webhook stack: the GitHub simulator, control-api, ingress and github-sync against
//! real Postgres and NATS. A workspace's GitHub App connection is activated and its INITIAL job
//! has mirrored the simulated installation; webhooks travel signed through ingress.

use std::time::Duration;

use anyhow::Result;
use control_api::Role;
use forgesync_e2e::{APP_KEY, eventually, send_json};
use serde_json::{Value, json};
use sqlx::PgPool;
use testkit::{Running, TestEnv};
use vendor_sim::github::webhook::Delivery;
use vendor_sim::github::{GithubSim, Scenario, generate};

/// The GitHub hook id the simulator's deliveries carry, and the endpoint's provider reference.
pub const HOOK_ID: u64 = 1;
/// The hook's signing secret.
pub const SECRET: &str = "live-webhook-secret-0123";

/// A second tenant: its own workspace, App connection (on an installation of its own) and
/// endpoints, each with the secret it chose.
pub struct Tenant {
    pub ws: String,
    pub conn: String,
    /// The simulator's installation the connection is for.
    pub installation: u64,
    /// The repository that installation reaches.
    pub repository: u64,
}

pub struct LiveStack {
    pub env: TestEnv,
    pub sim: GithubSim,
    pub http: reqwest::Client,
    pub api: String,
    pub ingress: String,
    pub token: String,
    pub ws: String,
    pub conn: String,
    pub pool: PgPool,
    pub repositories: Vec<u64>,
    _control: Running,
    _ingress: Running,
    _sync: Running,
}

impl LiveStack {
    /// A stack over a generated installation (`scenario`), after its INITIAL job finished.
    pub async fn start(scenario: Scenario) -> Result<LiveStack> {
        Self::start_with(scenario, |_| {}).await
    }

    /// Like [`LiveStack::start`], with github-sync's configuration adjusted.
    pub async fn start_with(
        scenario: Scenario,
        tweak: impl FnOnce(&mut github_sync::Config),
    ) -> Result<LiveStack> {
        let env = TestEnv::new().await?;
        let generated = generate(&scenario);
        let mut model = generated.model;
        model.set_app_id("4242");
        let sim = GithubSim::start(model).await?;
        let (control, keys) = (
            testkit::spawn(testkit::control_api_config(env.common_args())).await?,
            testkit::control_api_keys()?,
        );
        let ingress = testkit::spawn(testkit::ingress_config(env.common_args())).await?;
        let mut config = testkit::github_sync_config(env.common_args());
        tweak(&mut config);
        let sync = testkit::spawn(config).await?;
        let token = testkit::token(&keys, Role::Admin, None)?;
        let http = reqwest::Client::new();
        let api = control.url();
        let mut stack = LiveStack {
            pool: env.db.db.get_postgres_connection_pool().clone(),
            env,
            sim,
            http,
            ingress: ingress.url(),
            api,
            token,
            ws: String::new(),
            conn: String::new(),
            repositories: generated.repositories,
            _control: control,
            _ingress: ingress,
            _sync: sync,
        };
        let (_, ws) = stack.post("/workspaces", json!({"name": "acme"})).await?;
        stack.ws = ws["id"].as_str().expect("workspace created").to_owned();
        let (_, conn) = stack
            .post(
                &format!("/workspaces/{}/connections", stack.ws),
                json!({
                    "kind": "github",
                    "server_url": stack.sim.base_url(),
                    "settings": { "auth": "app", "app_id": 4242, "installation_id": generated.installation },
                    "secrets": { "private_key": String::from_utf8(APP_KEY.to_vec())? },
                }),
            )
            .await?;
        stack.conn = conn["id"].as_str().expect("connection created").to_owned();
        let (status, body) = stack
            .post(
                &format!("/workspaces/{}/connections/{}/endpoints", stack.ws, stack.conn),
                json!({"registration": "app", "provider_ref": HOOK_ID.to_string(), "secret": SECRET}),
            )
            .await?;
        assert_eq!(status, 201, "endpoint: {body}");
        stack
            .post(
                &format!(
                    "/workspaces/{}/connections/{}/activate",
                    stack.ws, stack.conn
                ),
                json!({}),
            )
            .await?;
        stack.finished_jobs("INITIAL", 1).await?;
        Ok(stack)
    }

    /// A second workspace `globex` whose App connection covers one repository of its own
    /// installation, activated and mirrored (its INITIAL job finished).
    pub async fn second_tenant(&self) -> Result<Tenant> {
        let (installation, repository) = self.sim.model(|m| {
            let installation = m.add_installation("globex");
            let repository = m.add_repository(Some(installation), "globex", "own");
            (installation, repository)
        });
        let (_, ws) = self.post("/workspaces", json!({"name": "globex"})).await?;
        let ws = ws["id"].as_str().expect("workspace created").to_owned();
        let (_, conn) = self
            .post(
                &format!("/workspaces/{ws}/connections"),
                json!({
                    "kind": "github",
                    "server_url": self.sim.base_url(),
                    "settings": { "auth": "app", "app_id": 4242, "installation_id": installation },
                    "secrets": { "private_key": String::from_utf8(APP_KEY.to_vec())? },
                }),
            )
            .await?;
        let conn = conn["id"].as_str().expect("connection created").to_owned();
        let initial = self
            .count("SELECT count(*) FROM sync_job WHERE job_type = 'INITIAL'")
            .await?;
        self.post(
            &format!("/workspaces/{ws}/connections/{conn}/activate"),
            json!({}),
        )
        .await?;
        self.finished_jobs("INITIAL", usize::try_from(initial)? + 1)
            .await?;
        Ok(Tenant {
            ws,
            conn,
            installation,
            repository,
        })
    }

    /// Adds an endpoint to `tenant`'s connection for GitHub hook `hook_id`, signed with `secret`.
    pub async fn endpoint(
        &self,
        tenant: &Tenant,
        registration: &str,
        hook_id: u64,
        secret: &str,
    ) -> Result<()> {
        let (status, body) = self
            .post(
                &format!("/workspaces/{}/connections/{}/endpoints", tenant.ws, tenant.conn),
                json!({"registration": registration, "provider_ref": hook_id.to_string(), "secret": secret}),
            )
            .await?;
        assert_eq!(status, 201, "endpoint: {body}");
        Ok(())
    }

    /// Sends `payload` for `event` as GitHub hook `hook_id` signed with `secret`; asserts ingress
    /// accepted it.
    pub async fn deliver_as(
        &self,
        hook_id: u64,
        secret: &str,
        event: &str,
        payload: &Value,
    ) -> Result<Delivery> {
        let mut delivery = Delivery::new(event, payload);
        delivery.hook_id = hook_id;
        let url = format!("{}/webhooks/github", self.ingress);
        let status = delivery
            .send(&self.http, &url, secret.as_bytes())
            .await?
            .as_u16();
        assert_eq!(status, 200, "ingress refused a {event} delivery");
        Ok(delivery)
    }

    /// How many GitHub deliveries github-sync counted out of scope (`/metrics`).
    pub async fn out_of_scope(&self) -> Result<u64> {
        self.rejected("out_of_scope").await
    }

    /// How many GitHub deliveries github-sync refused for `reason` (`/metrics`).
    pub async fn rejected(&self, reason: &str) -> Result<u64> {
        self.sync_metric("webhooks_rejected_total", "reason", reason)
            .await
    }

    /// The sum of github-sync's `name{vendor="github", label="value"}` series (`/metrics`).
    pub async fn sync_metric(&self, name: &str, label: &str, value: &str) -> Result<u64> {
        let text = self
            .http
            .get(format!("{}/metrics", self._sync.url()))
            .send()
            .await?
            .text()
            .await?;
        Ok(text
            .lines()
            .filter(|l| {
                l.starts_with(&format!("{name}{{"))
                    && l.contains("vendor=\"github\"")
                    && l.contains(&format!("{label}=\"{value}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum())
    }

    /// Each running service's name and base URL (its `/metrics` is there).
    pub fn service_urls(&self) -> Vec<(&'static str, String)> {
        vec![
            ("control-api", self._control.url()),
            ("ingress", self._ingress.url()),
            ("github-sync", self._sync.url()),
        ]
    }

    /// POSTs to control-api as an admin.
    pub async fn post(&self, path: &str, body: Value) -> Result<(u16, Value)> {
        let url = format!("{}{path}", self.api);
        send_json(self.http.post(url).bearer_auth(&self.token).json(&body)).await
    }

    /// Sends one delivery through ingress as GitHub does; returns the HTTP status.
    pub async fn send(&self, delivery: &Delivery) -> Result<u16> {
        let url = format!("{}/webhooks/github", self.ingress);
        Ok(delivery
            .send(&self.http, &url, SECRET.as_bytes())
            .await?
            .as_u16())
    }

    /// A new delivery of `payload` for `event`, sent through ingress; asserts it was accepted.
    pub async fn deliver(&self, event: &str, payload: &Value) -> Result<Delivery> {
        let mut delivery = Delivery::new(event, payload);
        delivery.hook_id = HOOK_ID;
        let status = self.send(&delivery).await?;
        assert_eq!(status, 200, "ingress refused a {event} delivery");
        Ok(delivery)
    }

    /// Queues a RECONCILIATION through control-api.
    pub async fn reconcile(&self) -> Result<()> {
        let (status, body) = self
            .post(
                &format!("/workspaces/{}/connections/{}/sync", self.ws, self.conn),
                json!({"type": "RECONCILIATION"}),
            )
            .await?;
        assert_eq!(status, 202, "{body}");
        Ok(())
    }

    /// Waits until `count` jobs of `job_type` finished; returns (status, error) of each.
    pub async fn finished_jobs(
        &self,
        job_type: &str,
        count: usize,
    ) -> Result<Vec<(String, Option<String>)>> {
        let pool = &self.pool;
        eventually(&format!("{job_type} jobs did not finish"), || async move {
            let rows: Vec<(String, Option<String>)> = sqlx::query_as(
                "SELECT status, error FROM sync_job WHERE job_type = $1 AND finished_at IS NOT NULL ORDER BY created_at",
            )
            .bind(job_type)
            .fetch_all(pool)
            .await?;
            Ok((rows.len() >= count).then_some(rows))
        })
        .await
    }

    /// The messages on `events.>` once at least `min` are there (or 5 s passed).
    pub async fn events(&self, min: usize) -> Result<Vec<testkit::StoredMessage>> {
        testkit::read_stream(
            &self.env.bus,
            bus::Stream::Events,
            "events.>",
            min,
            Duration::from_secs(5),
        )
        .await
    }

    /// Waits until every accepted delivery is published and github-sync has handled everything
    /// on the webhook stream (nothing pending or unacknowledged, twice in a row).
    pub async fn settle(&self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let mut quiet = 0;
        while quiet < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "github-sync did not settle"
            );
            tokio::time::sleep(Duration::from_millis(150)).await;
            let (unpublished,): (i64,) = sqlx::query_as("SELECT count(*) FROM outbox")
                .fetch_one(&self.pool)
                .await?;
            let mut busy = unpublished > 0;
            let ns = self.env.bus.namespace();
            let mut stream = self
                .env
                .bus
                .jetstream()
                .get_stream(ns.name(bus::Stream::WebhooksGithub.name()))
                .await?;
            let stored = stream.info().await?.state.messages;
            for durable in ["github-sync-owner-events", "github-sync-repository-events"] {
                match stream.consumer_info(ns.name(durable)).await {
                    Ok(info) => busy |= info.num_pending > 0 || info.num_ack_pending > 0,
                    // Not declared yet: busy while there is anything it should take.
                    Err(_) => busy |= stored > 0 && durable.ends_with("repository-events"),
                }
            }
            quiet = if busy { 0 } else { quiet + 1 };
        }
        Ok(())
    }

    /// One number from `sql`.
    pub async fn count(&self, sql: &str) -> Result<i64> {
        let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(&self.pool)
            .await?;
        Ok(n)
    }
}
