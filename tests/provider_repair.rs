//! Provider repair end to end: control-api, ingress, gitlab-sync and provider-repair against the
//! GitLab simulator over HTTP, real Postgres and JetStream. An operator's disconnect removes the
//! group hook gitlab-sync registered, deletes the connection's secrets and resolves the fence;
//! a wake that never reached provider-repair is made up by its schedule; and a wake replayed
//! after an admin released the fence changes nothing.

use std::time::Duration;

use anyhow::{Context as _, Result};
use forgesync_e2e::{GitlabStack, eventually};
use serde_json::{Value, json};
use sqlx::PgPool;
use testkit::TestEnv;
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::gitlab::GitlabSim;

const TOKEN: &str = "glpat-provider-repair-e2e";

/// The GitLab simulator (group `acme`, a few items) and the stack of services on `env`.
struct Setup {
    env: TestEnv,
    sim: GitlabSim,
    group: u64,
    stack: GitlabStack,
    http: reqwest::Client,
}

impl Setup {
    async fn start() -> Result<Setup> {
        let env = TestEnv::new().await?;
        let generated = vendor_sim::gitlab::generate(&vendor_sim::gitlab::Scenario {
            group: "acme".into(),
            token: TOKEN.into(),
            items: 6,
            first_update: OffsetDateTime::now_utc() - time::Duration::days(3),
        });
        let group = generated.model.group_by_path("acme").context("the group")?;
        let sim = GitlabSim::start(generated.model).await?;
        let stack = GitlabStack::start(&env).await?;
        Ok(Setup {
            env,
            sim,
            group,
            stack,
            http: reqwest::Client::new(),
        })
    }

    fn pool(&self) -> &PgPool {
        self.env.db.db.get_postgres_connection_pool()
    }

    /// provider-repair on this environment, its schedule on `cron` (`off`: only wakes).
    async fn repair(&self, cron: &str) -> Result<testkit::Running> {
        let config: provider_repair::Config = testkit::config(
            self.env.common_args(),
            &[
                format!("--secret-key={}", testkit::secret_key()),
                format!("--provider-repair-cron={cron}"),
                "--provider-repair-request-timeout=2".to_owned(),
            ],
        )?;
        testkit::spawn(config).await
    }

    /// A workspace connected to group `acme` and activated, once gitlab-sync adopted the
    /// group hook it registered: (workspace, connection, hook id).
    async fn connected(&self, name: &str) -> Result<(String, String, u64)> {
        let (ws, conn) = self
            .stack
            .connect(name, self.sim.base_url(), "acme", TOKEN)
            .await?;
        let id = Uuid::parse_str(&conn)?;
        let hook: String = eventually("gitlab-sync never adopted a group hook", || async move {
            Ok(sqlx::query_scalar(
                "SELECT vendor_id FROM provider_registration
                  WHERE connection_id = $1 AND state = 'adopted'",
            )
            .bind(id)
            .fetch_optional(self.pool())
            .await?)
        })
        .await?;
        let hook = hook.parse()?;
        assert!(self.listed_hooks().await?.contains(&hook));
        Ok((ws, conn, hook))
    }

    /// The hook ids `GET /api/v4/groups/{id}/hooks` lists, asked over HTTP.
    async fn listed_hooks(&self) -> Result<Vec<u64>> {
        let url = format!(
            "{}/api/v4/groups/{}/hooks?per_page=100",
            self.sim.base_url(),
            self.group
        );
        let res = self
            .http
            .get(url)
            .header("PRIVATE-TOKEN", TOKEN)
            .send()
            .await?;
        anyhow::ensure!(res.status() == 200, "listing hooks: {}", res.status());
        let hooks: Vec<Value> = res.json().await?;
        Ok(hooks.iter().filter_map(|h| h["id"].as_u64()).collect())
    }

    async fn disconnect(&self, ws: &str, conn: &str) -> Result<()> {
        let (status, body) = self
            .stack
            .post(
                &format!("/workspaces/{ws}/connections/{conn}/disconnect"),
                json!({}),
            )
            .await?;
        anyhow::ensure!(status == 200, "disconnect: {status} {body}");
        Ok(())
    }

    /// The connection's fences as the operators' API lists them.
    async fn repairs(&self, conn: &str) -> Result<Vec<Value>> {
        let (status, body) = self
            .stack
            .get(&format!("/provider-repairs?connection_id={conn}"))
            .await?;
        anyhow::ensure!(status == 200, "listing repairs: {status} {body}");
        Ok(body.as_array().cloned().unwrap_or_default())
    }

    /// The connection's one fence once its status is `status`.
    async fn repair_when(&self, conn: &str, status: &str) -> Result<Value> {
        eventually(&format!("the fence never read {status}"), || async move {
            Ok(match self.repairs(conn).await?.as_slice() {
                [one] if one["status"] == status => Some(one.clone()),
                _ => None,
            })
        })
        .await
    }

    /// The lifecycle message of the connection's disconnection, once control-api's relay
    /// published it to the stream: (logical subject, payload).
    async fn published_disconnection(&self, conn: &str) -> Result<(String, Vec<u8>)> {
        let bus = &self.env.bus;
        let stream = bus
            .jetstream()
            .get_stream(bus.namespace().name(bus::Stream::Lifecycle.name()))
            .await?;
        let subject = format!("lifecycle.gitlab.{conn}.disconnected");
        let full = bus.namespace().subject(&subject);
        let payload = eventually("the disconnection was never published", || {
            let (stream, full) = (&stream, &full);
            async move {
                Ok(stream
                    .get_last_raw_message_by_subject(full)
                    .await
                    .ok()
                    .map(|m| m.payload.to_vec()))
            }
        })
        .await?;
        Ok((subject, payload))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_disconnect_removes_its_group_hook_and_secrets_and_resolves_the_fence() -> Result<()> {
    let s = Setup::start().await?;
    // No schedule: the disconnection's own lifecycle message wakes it.
    let repair = s.repair("off").await?;
    let (ws, conn, hook) = s.connected("acme").await?;

    s.disconnect(&ws, &conn).await?;
    let fence = s.repair_when(&conn, "resolved").await?;
    assert_eq!(fence["provider"], "gitlab");
    assert_eq!(fence["kind"], "gitlab_group_hook");
    assert_eq!(fence["vendor_id"], hook.to_string());
    assert_eq!(fence["attempts"], 1, "{fence}");
    assert!(
        !s.listed_hooks().await?.contains(&hook),
        "the simulator still lists hook {hook}"
    );
    let secrets: i64 =
        sqlx::query_scalar("SELECT count(*) FROM connection_secret WHERE connection_id = $1")
            .bind(Uuid::parse_str(&conn)?)
            .fetch_one(s.pool())
            .await?;
    assert_eq!(secrets, 0, "no connection_secret row is left");
    repair.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_wake_is_repaired_by_the_schedule() -> Result<()> {
    let s = Setup::start().await?;
    let (ws, conn, hook) = s.connected("acme").await?;

    // provider-repair is not running when the disconnection is published, and the message is
    // gone before it starts: nothing will wake it.
    s.disconnect(&ws, &conn).await?;
    s.published_disconnection(&conn).await?;
    let bus = &s.env.bus;
    bus.jetstream()
        .get_stream(bus.namespace().name(bus::Stream::Lifecycle.name()))
        .await?
        .purge()
        .await?;
    let fence = s.repair_when(&conn, "pending").await?;
    assert_eq!(fence["attempts"], 0);
    assert!(s.listed_hooks().await?.contains(&hook));

    // Its schedule finds the due fence.
    let repair = s.repair("* * * * * *").await?;
    s.repair_when(&conn, "resolved").await?;
    assert!(!s.listed_hooks().await?.contains(&hook));
    repair.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wake_replayed_after_release_changes_nothing() -> Result<()> {
    let s = Setup::start().await?;
    let repair = s.repair("* * * * * *").await?;
    let (ws, conn, hook) = s.connected("acme").await?;

    // GitLab refuses the token by the time the connection is disconnected: the fence waits for
    // a credential, and an admin gives it up.
    s.sim.model(|m| m.tokens.remove(TOKEN));
    s.disconnect(&ws, &conn).await?;
    let fence = s.repair_when(&conn, "needs_authorization").await?;
    let id = fence["id"].as_str().context("fence id")?.to_owned();
    let (status, body) = s
        .stack
        .post(
            &format!("/provider-repairs/{id}/release"),
            json!({"reason": "the group was handed over to its owner"}),
        )
        .await?;
    assert_eq!(status, 200, "{body}");
    s.repair_when(&conn, "released").await?;

    // GitLab accepts the token again, and the disconnection's wake arrives once more (a new
    // message id: a replay, not a duplicate).
    s.sim.model(|m| m.tokens.insert(TOKEN.to_owned()));
    let (subject, payload) = s.published_disconnection(&conn).await?;
    let bus = &s.env.bus;
    let replayed = bus
        .publish(
            &subject,
            &format!("replay-{}", Uuid::now_v7()),
            async_nats::HeaderMap::new(),
            payload.into(),
        )
        .await?;
    assert!(!replayed.duplicate);
    // Consumed, and a few schedule passes gone by.
    let stream = bus
        .jetstream()
        .get_stream(bus.namespace().name(bus::Stream::Lifecycle.name()))
        .await?;
    let durable = bus.namespace().name("provider-repair-wakes");
    eventually("the replayed wake was never consumed", || {
        let stream = &stream;
        let durable = &durable;
        async move {
            let info = stream.consumer_info(durable).await?;
            Ok(
                (info.delivered.stream_sequence >= replayed.sequence && info.num_ack_pending == 0)
                    .then_some(()),
            )
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let after = s.repairs(&conn).await?;
    assert_eq!(after.len(), 1, "no new fence: {after:?}");
    assert_eq!(after[0]["status"], "released");
    assert_eq!(after[0]["attempts"], 0, "nothing was dispatched");
    assert!(
        s.listed_hooks().await?.contains(&hook),
        "a released fence removes nothing"
    );
    repair.stop().await
}
