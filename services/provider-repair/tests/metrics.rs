//! What an SRE reads on provider-repair's `/metrics`: unresolved fences by provider and status
//! and the age of the oldest (from the table), and removal calls by outcome. Against the GitLab
//! simulator over HTTP, with real Postgres and JetStream. One test in its own binary: the
//! gauges are process-wide.

use std::time::Duration;

use anyhow::{Context as _, Result};
use gitlab_client::{ClientConfig, GitlabClient, NewGroupHook};
use lifecycle_core::connection::Transition;
use sea_orm::{EntityTrait, QuerySelect, TransactionTrait};
use serde_json::json;
use store::entity::connection;
use uuid::Uuid;
use vendor_sim::gitlab::{GitlabSim, Model};

const TOKEN: &str = "glpat-provider-repair-metrics";

/// The value of the sample of `name` carrying every label of `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix('{')?;
        let (set, value) = rest.split_once("} ")?;
        labels
            .iter()
            .all(|(k, v)| set.split(',').any(|l| l == format!("{k}=\"{v}\"")))
            .then(|| value.trim().parse().ok())?
    })
}

async fn scrape(http: &reqwest::Client, url: &str) -> Result<String> {
    let res = http.get(url).send().await?;
    anyhow::ensure!(res.status() == 200, "/metrics answered {}", res.status());
    Ok(res.text().await?)
}

struct Gitlab {
    env: testkit::TestEnv,
    sim: GitlabSim,
    group: u64,
    instance: Uuid,
}

impl Gitlab {
    fn pool(&self) -> &sqlx::PgPool {
        self.env.db.db.get_postgres_connection_pool()
    }

    /// An active GitLab connection whose secret is `token`, holding a group hook it created
    /// and adopted.
    async fn hooked_connection(&self, token: &str) -> Result<Uuid> {
        let (_, conn) = testkit::active_connection(
            &self.env.db.db,
            "gitlab",
            self.instance,
            json!({"group": "acme"}),
            Some(token),
        )
        .await?;
        let marker = Uuid::now_v7().to_string();
        let url = format!("https://hooks.example/webhooks/gitlab/connections/{conn}/k1/{marker}");
        let client = GitlabClient::new(
            &ClientConfig::new(self.sim.base_url()).with_egress(self.env.common_args().egress),
            TOKEN,
        )?;
        let hook = client
            .create_group_hook(
                self.group,
                &NewGroupHook {
                    url: url.clone(),
                    token: "route-credential".into(),
                    issues_events: true,
                    merge_requests_events: true,
                    note_events: true,
                    pipeline_events: true,
                    project_events: true,
                    subgroup_events: true,
                    member_events: true,
                    push_events: true,
                    enable_ssl_verification: true,
                },
            )
            .await?;
        sqlx::query(
            "INSERT INTO provider_registration (id, connection_id, provider_instance_id,
                 resource_kind, target, marker, url_hash, connection_version,
                 lifecycle_generation, state, vendor_id)
             SELECT $1, c.id, $3, 'gitlab_group_hook', $4, $5, $6, c.version,
                    c.lifecycle_generation, 'adopted', $7
               FROM connection c WHERE c.id = $2",
        )
        .bind(Uuid::now_v7())
        .bind(conn)
        .bind(self.instance)
        .bind(self.group.to_string())
        .bind(&marker)
        .bind(store::inbound::sha256_hex(url.as_bytes()))
        .bind(hook.id.to_string())
        .execute(self.pool())
        .await?;
        Ok(conn)
    }

    async fn transition(&self, conn: Uuid, transition: Transition) -> Result<()> {
        let txn = self.env.db.db.begin().await?;
        store::repair::lock_identities(&txn, &[conn]).await?;
        let row = connection::Entity::find_by_id(conn)
            .lock_exclusive()
            .one(&txn)
            .await?
            .context("the connection exists")?;
        store::lifecycle::apply(&txn, row, transition, "test", "transition").await??;
        txn.commit().await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_report_unresolved_fences_their_age_and_attempt_outcomes() -> Result<()> {
    let mut model = Model::default();
    model.add_token(TOKEN);
    let group = model.add_group(None, "acme");
    let sim = GitlabSim::start(model).await?;
    let env = testkit::TestEnv::new().await?;
    let instance = Uuid::now_v7();
    sqlx::query("INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)")
        .bind(instance)
        .bind(sim.base_url())
        .execute(env.db.db.get_postgres_connection_pool())
        .await?;
    let g = Gitlab {
        env,
        sim,
        group,
        instance,
    };
    let config: provider_repair::Config = testkit::config(
        g.env.common_args(),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            "--provider-repair-cron=* * * * * *".to_owned(),
            "--provider-repair-request-timeout=1".to_owned(),
        ],
    )?;
    let service = testkit::spawn(config).await?;
    let http = reqwest::Client::new();
    let url = format!("{}/metrics", service.url());
    let scrape = || scrape(&http, &url);

    // Before any fence: every series is there, at zero.
    let text = scrape().await?;
    for (name, labels) in [
        (
            "provider_repair_attempts_total",
            [("provider", "slack"), ("outcome", "uncertain")],
        ),
        (
            "provider_repair_unresolved",
            [("provider", "outline"), ("status", "awaiting_admin")],
        ),
    ] {
        assert_eq!(sample(&text, name, &labels), Some(0.0), "{name}:\n{text}");
    }

    // One fence waits for a credential (GitLab refuses the token), one is removed.
    let refused = g.hooked_connection("glpat-revoked").await?;
    let removed = g.hooked_connection(TOKEN).await?;
    g.transition(refused, Transition::Suspend).await?;
    g.transition(removed, Transition::Disconnect).await?;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = scrape().await?;
        let waiting = sample(
            &text,
            "provider_repair_unresolved",
            &[("provider", "gitlab"), ("status", "needs_authorization")],
        );
        let receipts = sample(
            &text,
            "provider_repair_attempts_total",
            &[("provider", "gitlab"), ("outcome", "terminal_receipt")],
        );
        if waiting == Some(1.0) && receipts == Some(1.0) {
            break text;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the metrics never showed one fence waiting and one removal:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // The removed one is no longer unresolved; the refused one never dispatched.
    for status in ["pending", "awaiting_admin"] {
        assert_eq!(
            sample(
                &text,
                "provider_repair_unresolved",
                &[("provider", "gitlab"), ("status", status)]
            ),
            Some(0.0),
            "{status}:\n{text}"
        );
    }
    for outcome in ["unauthorized", "uncertain", "refused"] {
        assert_eq!(
            sample(
                &text,
                "provider_repair_attempts_total",
                &[("provider", "gitlab"), ("outcome", outcome)]
            ),
            Some(0.0),
            "{outcome}:\n{text}"
        );
    }
    let oldest = sample(
        &text,
        "provider_repair_oldest_unresolved_seconds",
        &[("provider", "gitlab")],
    )
    .context("the oldest unresolved age is exported")?;
    assert!(oldest > 0.0, "{oldest}");
    assert_eq!(
        sample(
            &text,
            "provider_repair_oldest_unresolved_seconds",
            &[("provider", "github")]
        ),
        Some(0.0)
    );
    service.stop().await
}
