//! One simulated Slack team with three channels the bot is in, one workspace's Slack connection
//! to it, ingress receiving the team's Events API deliveries, and slack-ingest running: real
//! Postgres and JetStream, the simulator over HTTP.

#![allow(dead_code)]

use std::time::Duration;

use anyhow::{Context as _, Result};
use lifecycle_core::slack::{ChannelCommand, ChannelStatus};
use slack_mirror::channel::Channel;
use slack_mirror::command::ChannelCommandMessage;
use sqlx::PgPool;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::NewEndpoint;
use store::outbox::OutboxMessage;
use store::secrets::Keyring;
use uuid::Uuid;
use vendor_sim::slack::{Model, RetrySchedule, SlackSim};

/// The Slack app's signing secret (the operator's): its deliveries are facts.
pub const SECRET: &str = "slack-app-signing-secret";
pub const TOKEN: &str = "xoxb-acme";

/// A workspace's Slack connection.
#[derive(Debug, Clone, Copy)]
pub struct Tenant {
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
}

pub struct World {
    pub env: testkit::TestEnv,
    pub pool: PgPool,
    pub sim: SlackSim,
    pub ingress: testkit::Running,
    pub service: Option<testkit::Running>,
    pub config: slack_ingest::Config,
    pub provider_instance_id: Uuid,
    pub team: String,
    /// `general`, `random`, `ops`: the bot is in each.
    pub channels: [String; 3],
    pub user: String,
    pub a: Tenant,
}

/// slack-ingest's config for the test: no schedules, the simulator's API.
pub fn config(
    env: &testkit::TestEnv,
    sim: &SlackSim,
    extra: &[&str],
) -> Result<slack_ingest::Config> {
    let mut flags = vec![
        format!("--secret-key={}", testkit::secret_key()),
        format!("--slack-api-url={}", sim.api_url()),
        "--reconcile-cron=off".to_owned(),
        "--slack-request-timeout-ms=5000".to_owned(),
    ];
    flags.extend(extra.iter().map(|s| (*s).to_owned()));
    testkit::config(env.common_args(), &flags)
}

impl World {
    pub async fn start() -> Result<World> {
        Self::start_with(&[]).await
    }

    pub async fn start_with(extra: &[&str]) -> Result<World> {
        let env = testkit::TestEnv::new().await?;
        let pool = env.db.db.get_postgres_connection_pool().clone();
        let mut model = Model::default();
        let team = model.add_team("acme");
        model.add_token(TOKEN, &team);
        let mut channels = Vec::new();
        for name in ["general", "random", "ops"] {
            let id = model
                .add_channel(&team, name, false)
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            model.join_bot(&id).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            channels.push(id);
        }
        let user = model.add_user(&team);
        let sim = SlackSim::start(model).await?;
        let provider_instance_id = Uuid::now_v7();
        sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'slack')")
            .bind(provider_instance_id)
            .execute(&pool)
            .await?;
        let a = tenant(&env, provider_instance_id, &team, TOKEN).await?;
        app_endpoint(&env, a, &team).await?;
        let ingress = testkit::spawn(testkit::ingress_config(env.common_args())).await?;
        sim.subscribe_events(&format!("{}/webhooks/slack", ingress.url()), SECRET);
        // Slack's timeout, its retries compressed.
        sim.set_retry_schedule(RetrySchedule {
            timeout: Duration::from_secs(3),
            delays: vec![
                Duration::ZERO,
                Duration::from_millis(100),
                Duration::from_millis(500),
            ],
        });
        let config = config(&env, &sim, extra)?;
        let service = testkit::spawn(config.clone()).await?;
        let world = World {
            env,
            pool,
            sim,
            ingress,
            service: Some(service),
            config,
            provider_instance_id,
            team,
            channels: channels
                .try_into()
                .map_err(|_| anyhow::anyhow!("three channels"))?,
            user,
            a,
        };
        world.activate(a).await?;
        Ok(world)
    }

    /// Sends the team's events nowhere (each recorded once, never retried) until [`Self::listen`].
    pub fn deafen(&self) {
        self.sim
            .subscribe_events("http://127.0.0.1:9/nowhere", SECRET);
        self.sim.set_retry_schedule(RetrySchedule {
            timeout: Duration::from_millis(200),
            delays: Vec::new(),
        });
    }

    /// Sends the team's events to ingress again.
    pub fn listen(&self) {
        self.sim
            .subscribe_events(&format!("{}/webhooks/slack", self.ingress.url()), SECRET);
        self.sim.set_retry_schedule(RetrySchedule {
            timeout: Duration::from_secs(3),
            delays: vec![
                Duration::ZERO,
                Duration::from_millis(100),
                Duration::from_millis(500),
            ],
        });
    }

    /// Publishes the connection's activation as control-api would, and waits for the directory.
    pub async fn activate(&self, t: Tenant) -> Result<()> {
        let transition = bus::contracts::LifecycleTransition {
            connection_id: t.connection_id,
            workspace_id: t.workspace_id,
            kind: "slack".into(),
            transition: "activated".into(),
            before_status: "pending".into(),
            status: "active".into(),
            version: 1,
            lifecycle_generation: 1,
            provider_instance_id: self.provider_instance_id,
            actor: "test".into(),
            at: store::events::rfc3339(time::OffsetDateTime::now_utc()),
        };
        self.env
            .bus
            .publish_outbox(Uuid::now_v7(), OutboxMessage::contract(&transition)?)
            .await?;
        Ok(())
    }

    /// Waits until the directory lists `n` channels of `t`.
    pub async fn directory(&self, t: Tenant, n: i64) -> Result<()> {
        eventually("the directory was not recorded", || async {
            let count: i64 =
                sqlx::query_scalar("SELECT count(*) FROM slack_channel WHERE connection_id = $1")
                    .bind(t.connection_id)
                    .fetch_one(&self.pool)
                    .await?;
            Ok((count >= n).then_some(()))
        })
        .await
    }

    /// The stored channel `slack_id` of `t`.
    pub async fn channel(&self, t: Tenant, slack_id: &str) -> Result<Option<Channel>> {
        let mut conn = self.pool.acquire().await?;
        let mut txn = sqlx::Connection::begin(&mut *conn).await?;
        let row = slack_mirror::channel::lock(&mut txn, t.connection_id, slack_id).await?;
        txn.rollback().await?;
        Ok(row)
    }

    /// Publishes an operator's command on a channel, as control-api commits it.
    pub async fn command(&self, t: Tenant, slack_id: &str, command: ChannelCommand) -> Result<()> {
        let channel = self
            .channel(t, slack_id)
            .await?
            .with_context(|| format!("no channel {slack_id}"))?;
        let msg = ChannelCommandMessage {
            id: Uuid::now_v7(),
            connection_id: t.connection_id,
            workspace_id: t.workspace_id,
            channel_id: channel.id,
            command,
            actor: "operator@test".into(),
            at: store::events::rfc3339(time::OffsetDateTime::now_utc()),
        };
        self.env
            .bus
            .publish_outbox(Uuid::now_v7(), OutboxMessage::contract(&msg)?)
            .await?;
        Ok(())
    }

    /// Waits until channel `slack_id` of `t` is in `status`; returns it.
    pub async fn until_status(
        &self,
        t: Tenant,
        slack_id: &str,
        status: ChannelStatus,
    ) -> Result<Channel> {
        eventually(
            &format!("{slack_id} never became {}", status.as_str()),
            || async {
                Ok(self
                    .channel(t, slack_id)
                    .await?
                    .filter(|c| c.status == status && c.reason.as_deref() != Some("announcing")))
            },
        )
        .await
    }

    /// Consents to channel `slack_id` of `t` and waits until it is ACTIVE.
    pub async fn consent(&self, t: Tenant, slack_id: &str) -> Result<Channel> {
        self.command(t, slack_id, ChannelCommand::Consent).await?;
        self.until_status(t, slack_id, ChannelStatus::Active).await
    }

    /// Waits until slack-ingest has settled every delivery of the stream (the events consumer
    /// has nothing pending or in flight).
    pub async fn drained(&self) -> Result<()> {
        self.sim.settle().await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let ns = self.env.bus.namespace();
        // Quiet three times in a row: no outbox row unpublished, nothing pending or in flight.
        let mut quiet = 0;
        while quiet < 3 {
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "did not settle");
            tokio::time::sleep(Duration::from_millis(100)).await;
            let unpublished: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
                .fetch_one(&self.pool)
                .await?;
            let mut busy = unpublished > 0;
            for (stream, durable) in [
                (bus::Stream::WebhooksSlack, "slack-ingest-events"),
                (bus::Stream::Lifecycle, "slack-ingest-channels"),
                (bus::Stream::Jobs, "slack-ingest-jobs"),
            ] {
                let stream = self
                    .env
                    .bus
                    .jetstream()
                    .get_stream(ns.name(stream.name()))
                    .await?;
                if let Ok(info) = stream.consumer_info(ns.name(durable)).await {
                    busy |= info.num_pending > 0 || info.num_ack_pending > 0;
                }
            }
            quiet = if busy { 0 } else { quiet + 1 };
        }
        Ok(())
    }

    /// `(ts, text, edited_ts, deleted)` of channel `channel_id`'s rows, oldest first.
    pub async fn messages(
        &self,
        channel_id: Uuid,
    ) -> Result<Vec<(String, Option<String>, Option<String>, bool)>> {
        Ok(sqlx::query_as(
            "SELECT ts::text, text, edited_ts::text, deleted_at IS NOT NULL FROM slack_message
              WHERE channel_id = $1 ORDER BY ts",
        )
        .bind(channel_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Generic events of `t`'s channels by type.
    pub async fn events(&self, t: Tenant, event_type: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM integration_event WHERE connection_id = $1 AND type = $2",
        )
        .bind(t.connection_id)
        .bind(event_type)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Raw deliveries of `t` routed to channel `slack_id` still holding their body.
    pub async fn stored_bodies(&self, t: Tenant, slack_id: &str) -> Result<i64> {
        let prefix = lifecycle_core::subject::slack(&self.team, Some(slack_id), "x")?;
        let prefix = prefix.trim_end_matches('x').to_owned();
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM inbound_message m JOIN inbound_message_body b ON b.message_id = m.id
              WHERE m.connection_id = $1 AND left(m.subject, length($2)) = $2",
        )
        .bind(t.connection_id)
        .bind(prefix)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Runs a RECONCILIATION of `t` now, as Sync now queues it, and waits for its end.
    pub async fn reconcile(&self, t: Tenant) -> Result<(String, Option<String>)> {
        let conn = store::entity::connection::Entity::find_by_id(t.connection_id)
            .one(&self.env.db.db)
            .await?
            .context("connection")?;
        let key = format!("test:{}", Uuid::now_v7());
        let txn = sea_orm::TransactionTrait::begin(&self.env.db.db).await?;
        let queued = store::jobs::queue(
            &txn,
            &conn,
            store::entity::JobType::Reconciliation,
            store::entity::JobTrigger::Manual,
            Some(key),
        )
        .await?
        .context("queued")?;
        txn.commit().await?;
        // slack-ingest's own relay publishes the job's message (its identity sends `jobs.slack.>`).
        let job_id = queued.id;
        eventually("the reconcile did not end", || async {
            Ok(sqlx::query_as::<_, (String, Option<String>)>(
                "SELECT status, error FROM sync_job WHERE id = $1 AND finished_at IS NOT NULL",
            )
            .bind(job_id)
            .fetch_optional(&self.pool)
            .await?)
        })
        .await
    }
}

use sea_orm::EntityTrait as _;

/// A workspace with a Slack connection to `team`, holding `token`.
pub async fn tenant(
    env: &testkit::TestEnv,
    provider_instance_id: Uuid,
    team: &str,
    token: &str,
) -> Result<Tenant> {
    let (workspace_id, connection_id) = testkit::active_connection(
        &env.db.db,
        "slack",
        provider_instance_id,
        serde_json::json!({ "team_id": team }),
        Some(token),
    )
    .await?;
    Ok(Tenant {
        workspace_id,
        connection_id,
    })
}

/// The Slack app's endpoint for `team`, on the app-level route, keyed by the operator's
/// signing secret.
pub async fn app_endpoint(env: &testkit::TestEnv, t: Tenant, team: &str) -> Result<()> {
    let keyring = Keyring::parse(&testkit::secret_key())?;
    store::inbound::create_endpoint(
        &env.db.db,
        &keyring,
        NewEndpoint {
            workspace_id: t.workspace_id,
            connection_id: t.connection_id,
            kind: ConnectionKind::Slack,
            registration: Registration::App,
            provider_ref: Some(team.to_owned()),
            address_token: None,
            tenant_keyed: false,
        },
        SECRET.as_bytes(),
    )
    .await?;
    Ok(())
}

/// Polls `probe` every 50 ms for up to 30 s until it yields a value.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut last_error = None;
    loop {
        match probe().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if tokio::time::Instant::now() > deadline {
            return Err(match last_error {
                Some(e) => e.context(what.to_owned()),
                None => anyhow::anyhow!("{what} within 30 s"),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A receiver in front of ingress that answers late: every `every`-th first attempt reaches
/// ingress (which stores it) but its answer is held for `hold`, past Slack's timeout, so the
/// simulator retries it as Slack would (`X-Slack-Retry-Reason: http_timeout`).
pub struct LateAcks {
    pub url: String,
    held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl LateAcks {
    pub async fn start(target: String, every: usize, hold: Duration) -> Result<LateAcks> {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let seen = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(AtomicUsize::new(0));
        let http = reqwest::Client::new();
        let (seen2, held2) = (seen.clone(), held.clone());
        let app = axum::Router::new().fallback(
            move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let (http, target, seen, held) =
                    (http.clone(), target.clone(), seen2.clone(), held2.clone());
                async move {
                    let mut forward = http.post(format!("{target}{uri}")).body(body);
                    for (name, value) in &headers {
                        if name != axum::http::header::HOST
                            && name != axum::http::header::CONTENT_LENGTH
                        {
                            forward = forward.header(name, value);
                        }
                    }
                    let answer = forward.send().await;
                    let first = !headers.contains_key("x-slack-retry-num");
                    if first && (seen.fetch_add(1, Ordering::SeqCst) + 1) % every == 0 {
                        held.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(hold).await;
                    }
                    match answer {
                        Ok(a) => axum::http::StatusCode::from_u16(a.status().as_u16())
                            .unwrap_or(axum::http::StatusCode::BAD_GATEWAY),
                        Err(_) => axum::http::StatusCode::BAD_GATEWAY,
                    }
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(LateAcks { url, held, task })
    }

    /// How many answers were held past the timeout.
    pub fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for LateAcks {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A token-addressed endpoint of `t` whose signing secret a tenant chose (what it delivers is a
/// claim); its address token.
pub async fn token_endpoint(env: &testkit::TestEnv, t: Tenant, secret: &str) -> Result<String> {
    let address = Uuid::now_v7().simple().to_string();
    store::inbound::create_endpoint(
        &env.db.db,
        &Keyring::parse(&testkit::secret_key())?,
        NewEndpoint {
            workspace_id: t.workspace_id,
            connection_id: t.connection_id,
            kind: ConnectionKind::Slack,
            registration: Registration::Operator,
            provider_ref: None,
            address_token: Some(address.clone()),
            tenant_keyed: true,
        },
        secret.as_bytes(),
    )
    .await?;
    Ok(address)
}

/// POSTs `body` to ingress's token route `address`, signed with `secret` at `now` as a Slack
/// app signs; the status.
pub async fn send_to_token_route(
    w: &World,
    address: &str,
    secret: &str,
    now: i64,
    body: &serde_json::Value,
) -> Result<reqwest::StatusCode> {
    let body = serde_json::to_vec(body)?;
    let mut headers = vendor_sim::slack::signed_headers(secret.as_bytes(), now, &body);
    headers.remove("user-agent");
    Ok(reqwest::Client::new()
        .post(format!("{}/hooks/{address}", w.ingress.url()))
        .headers(headers)
        .body(body)
        .send()
        .await?
        .status())
}
