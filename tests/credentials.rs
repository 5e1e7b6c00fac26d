//! Vendor errors end to end: control-api -> jobs -> github-sync against the GitHub simulator over
//! HTTP. Credentials GitHub refuses fail the job loudly (`bad_credentials`, `forbidden`), flag the
//! connection in control-api, stop its schedules and tombstone nothing, until new secrets are
//! put through control-api; and every error class names itself in the job's and the activity's
//! reasons.

use std::time::Duration;

use anyhow::Result;
use control_api::Role;
use forgesync_e2e::{APP_KEY, eventually, send_json};
use serde_json::{Value, json};
use sqlx::PgPool;
use store::entity::{ConnectionKind, JobType};
use testkit::TestEnv;
use vendor_sim::github::{Fault, FaultKind, GithubSim, Scenario, generate, ops};

struct Stack {
    env: TestEnv,
    sim: GithubSim,
    http: reqwest::Client,
    api: String,
    token: String,
    ws: String,
    conn: String,
    pool: PgPool,
    _control: testkit::Running,
    sync: testkit::Running,
}

/// How the connection signs in.
enum Credentials {
    /// A PAT for these repositories (`owner/name`).
    Pat(&'static str, Vec<String>),
    /// The simulator's GitHub App installation.
    App,
}

impl Stack {
    async fn start(credentials: impl FnOnce(&[String]) -> Credentials) -> Result<Stack> {
        let env = TestEnv::new().await?;
        let generated = generate(&Scenario {
            items: 200,
            ..Scenario::default()
        });
        let mut model = generated.model;
        model.set_app_id("4242");
        let names: Vec<String> = generated
            .repositories
            .iter()
            .map(|id| model.repository(*id).unwrap().name_with_owner())
            .collect();
        let credentials = credentials(&names);
        if let Credentials::Pat(token, _) = &credentials {
            model.add_personal_access_token(*token);
        }
        let sim = GithubSim::start(model).await?;
        let (control, keys) = (
            testkit::spawn(testkit::control_api_config(env.common_args())).await?,
            testkit::control_api_keys()?,
        );
        let mut config = testkit::github_sync_config(env.common_args());
        config.sync.page_size = 50;
        // A held answer fails as a timeout quickly.
        config.sync.request_timeout_ms = 300;
        let sync = testkit::spawn(config).await?;
        let token = testkit::token(&keys, Role::Admin, None)?;
        let http = reqwest::Client::new();
        let api = control.url();
        let (_, ws) = send_json(
            http.post(format!("{api}/workspaces"))
                .bearer_auth(&token)
                .json(&json!({"name": "acme"})),
        )
        .await?;
        let ws = ws["id"].as_str().unwrap().to_owned();
        let body = match credentials {
            Credentials::Pat(pat, repositories) => json!({
                "kind": "github",
                "server_url": sim.base_url(),
                "settings": { "auth": "pat", "repositories": repositories },
                "secrets": { "token": pat },
            }),
            Credentials::App => json!({
                "kind": "github",
                "server_url": sim.base_url(),
                "settings": { "auth": "app", "app_id": 4242, "installation_id": generated.installation },
                "secrets": { "private_key": String::from_utf8(APP_KEY.to_vec())? },
            }),
        };
        let (status, conn) = send_json(
            http.post(format!("{api}/workspaces/{ws}/connections"))
                .bearer_auth(&token)
                .json(&body),
        )
        .await?;
        assert_eq!(status, 201, "{conn}");
        let conn = conn["id"].as_str().unwrap().to_owned();
        let pool = env.db.db.get_postgres_connection_pool().clone();
        let s = Stack {
            env,
            sim,
            http,
            api,
            token,
            ws,
            conn,
            pool,
            _control: control,
            sync,
        };
        let (status, body) = s.post("activate", json!({})).await?;
        assert_eq!(status, 200, "{body}");
        let jobs = s.finished_jobs("INITIAL", 1).await?;
        assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
        Ok(s)
    }

    /// POSTs to the connection's `suffix`.
    async fn post(&self, suffix: &str, body: Value) -> Result<(u16, Value)> {
        let url = format!(
            "{}/workspaces/{}/connections/{}/{suffix}",
            self.api, self.ws, self.conn
        );
        send_json(self.http.post(url).bearer_auth(&self.token).json(&body)).await
    }

    async fn connection(&self) -> Result<Value> {
        let url = format!(
            "{}/workspaces/{}/connections/{}",
            self.api, self.ws, self.conn
        );
        let (status, body) = send_json(self.http.get(url).bearer_auth(&self.token)).await?;
        assert_eq!(status, 200, "{body}");
        Ok(body)
    }

    async fn replace_secrets(&self, secrets: Value) -> Result<(u16, Value)> {
        let url = format!(
            "{}/workspaces/{}/connections/{}/secrets",
            self.api, self.ws, self.conn
        );
        send_json(
            self.http
                .put(url)
                .bearer_auth(&self.token)
                .json(&json!({ "secrets": secrets })),
        )
        .await
    }

    /// Waits for `count` finished jobs of `job_type`: (status, error), oldest first.
    async fn finished_jobs(
        &self,
        job_type: &str,
        count: usize,
    ) -> Result<Vec<(String, Option<String>)>> {
        let pool = &self.pool;
        eventually(&format!("{job_type} job did not finish"), || async move {
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

    /// Runs one RECONCILIATION on demand; its (status, error).
    async fn reconcile(&self) -> Result<(String, Option<String>)> {
        let before = self.finished_jobs("RECONCILIATION", 0).await?.len();
        let (status, body) = self.post("sync", json!({"type": "RECONCILIATION"})).await?;
        assert_eq!(status, 202, "{body}");
        Ok(self
            .finished_jobs("RECONCILIATION", before + 1)
            .await?
            .pop()
            .unwrap())
    }

    /// The reasons of the `not_reconciled` activity, newest first.
    async fn not_reconciled(&self) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT detail->>'reason' FROM connection_activity WHERE activity = 'not_reconciled' ORDER BY created_at DESC, id DESC",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn tombstoned(&self) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT count(*) FROM issue WHERE deleted_at IS NOT NULL")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// What the schedule queues now (the function every scheduled run calls).
    async fn scheduled_now(&self) -> Result<usize> {
        sync_engine::consumers::queue_scheduled(
            &self.env.db.db,
            ConnectionKind::Github,
            JobType::Reconciliation,
            time::OffsetDateTime::now_utc(),
        )
        .await
    }

    /// Deletes the first issue of the first repository upstream; its native id.
    fn delete_an_issue(&self) -> i64 {
        self.sim.model(|m| {
            let repo = m.repositories().next().unwrap().database_id;
            let n = m.repository(repo).unwrap().issues().next().unwrap().number;
            m.delete_issue(repo, n).unwrap().database_id as i64
        })
    }

    async fn metrics(&self) -> Result<String> {
        Ok(self
            .http
            .get(format!("{}/metrics", self.sync.url()))
            .send()
            .await?
            .text()
            .await?)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_token_fails_loudly_flags_the_connection_and_a_new_one_resumes() -> Result<()> {
    let s = Stack::start(|names| Credentials::Pat("ghp_first", names.to_vec())).await?;
    assert_eq!(s.connection().await?["needs_credentials"], false);
    let gone = s.delete_an_issue();
    // The token is revoked upstream: every read now answers 401.
    s.sim.model(|m| m.revoke_tokens());

    let (status, error) = s.reconcile().await?;
    assert_eq!(status, "failed");
    let error = error.unwrap();
    assert!(error.starts_with("bad_credentials: "), "{error}");
    assert_eq!(s.tombstoned().await?, 0, "a refused read deletes nothing");
    let view = s.connection().await?;
    assert_eq!(view["needs_credentials"], true, "{view}");
    assert!(view["credentials_refused_at"].is_string(), "{view}");
    assert!(
        view["credentials_refusal"]
            .as_str()
            .unwrap()
            .starts_with("bad_credentials: "),
        "{view}"
    );
    let metrics = s.metrics().await?;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sync_credentials_refused_total")
                && l.contains("class=\"bad_credentials\"")
                && l.contains("vendor=\"github\"")),
        "{metrics}"
    );
    assert_eq!(
        s.scheduled_now().await?,
        0,
        "the schedule skips the connection"
    );

    // A token GitHub refuses is not taken, and changes nothing.
    let (status, body) = s.replace_secrets(json!({"token": "ghp_wrong"})).await?;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"], "credentials_refused", "{body}");
    assert_eq!(s.connection().await?["needs_credentials"], true);

    s.sim.model(|m| m.add_personal_access_token("ghp_second"));
    let (status, view) = s.replace_secrets(json!({"token": "ghp_second"})).await?;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["needs_credentials"], false, "{view}");
    assert_eq!(view["credentials_refusal"], Value::Null, "{view}");
    let (audited,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM connection_audit WHERE action = 'replace_secrets' AND actor IS NOT NULL",
    )
    .fetch_one(&s.pool)
    .await?;
    assert_eq!(audited, 1);
    assert_eq!(s.scheduled_now().await?, 1, "the schedule takes it again");
    let jobs = s.finished_jobs("RECONCILIATION", 2).await?;
    assert_eq!(jobs[1].0, "succeeded", "{jobs:?}");
    let tombstoned: Vec<i64> =
        sqlx::query_scalar("SELECT native_id FROM issue WHERE deleted_at IS NOT NULL")
            .fetch_all(&s.pool)
            .await?;
    assert_eq!(
        tombstoned,
        vec![gone],
        "the scheduled reconcile with the new token deletes what vanished"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_permission_fails_as_forbidden_naming_it() -> Result<()> {
    let s = Stack::start(|_| Credentials::App).await?;
    s.sim.inject(Fault::always(
        ops::REPOSITORY_ISSUES,
        FaultKind::Forbidden {
            permission: Some("issues=read".into()),
        },
    ));
    let (status, error) = s.reconcile().await?;
    assert_eq!(status, "failed");
    let error = error.unwrap();
    assert!(error.starts_with("forbidden: issues=read: "), "{error}");
    let view = s.connection().await?;
    assert_eq!(view["needs_credentials"], true, "{view}");
    assert_eq!(s.scheduled_now().await?, 0);
    assert_eq!(s.tombstoned().await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_vendor_error_class_is_named_in_the_reasons() -> Result<()> {
    let s = Stack::start(|_| Credentials::App).await?;
    // (fault on every issues page, the class every reason names, whether the job fails). The
    // spent primary limit goes last: the connection's kept reader remembers it until its reset,
    // as GitHub does, so every later job would stop on our own budget.
    let classes = [
        (
            FaultKind::SecondaryRateLimit { retry_after: 1 },
            "secondary_rate_limit",
            true,
        ),
        (FaultKind::Status(502), "server_error", true),
        (FaultKind::Delay(Duration::from_secs(2)), "timeout", true),
        (
            FaultKind::field_error("repository", "SERVICE_UNAVAILABLE", "try again later"),
            "graphql_error: SERVICE_UNAVAILABLE",
            false,
        ),
        (FaultKind::BadCredentials, "bad_credentials", true),
        (FaultKind::ExhaustRateLimit, "rate_limited", true),
    ];
    for (kind, class, fails) in classes {
        s.sim.clear_faults();
        s.sim
            .inject(Fault::always(ops::REPOSITORY_ISSUES, kind.clone()));
        let (status, error) = s.reconcile().await?;
        s.sim.clear_faults();
        if fails {
            assert_eq!(status, "failed", "{kind:?}: {error:?}");
            let error = error.unwrap();
            assert!(
                error.starts_with(&format!("{class}: ")),
                "{kind:?}: {error}"
            );
        } else {
            assert_eq!(status, "succeeded", "{kind:?}: {error:?}");
        }
        let reasons = s.not_reconciled().await?;
        assert!(
            reasons[0].contains(&format!("listing stopped by {class}")),
            "{kind:?}: {reasons:?}"
        );
    }
    let generic: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM connection_activity WHERE detail::text ILIKE '%exception%'",
    )
    .fetch_one(&s.pool)
    .await?;
    assert_eq!(generic, 0, "no reason is a generic word");
    assert_eq!(s.tombstoned().await?, 0);
    Ok(())
}
