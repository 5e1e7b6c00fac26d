//! github-sync end to end: control-api activates a GitHub App connection, github-sync runs the
//! INITIAL job through github-client against the GitHub simulator over HTTP, and reconciles on
//! demand; real Postgres and NATS throughout.

use std::time::Duration;

use anyhow::Result;
use control_api::Role;
use forgesync_e2e::{APP_KEY, eventually, send_json};
use serde_json::{Value, json};
use sqlx::PgPool;
use testkit::TestEnv;
use vendor_sim::github::{
    Calls, Fault, FaultKind, GithubSim, RateLimitBudget, RateLimitResource, Scenario, generate, ops,
};

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
    _sync: testkit::Running,
    repositories: Vec<u64>,
}

impl Stack {
    async fn start(items: usize, page_size: u32) -> Result<Stack> {
        Self::start_with(items, page_size, |_| {}).await
    }

    async fn start_with(
        items: usize,
        page_size: u32,
        configure: impl FnOnce(&mut github_sync::Config),
    ) -> Result<Stack> {
        Self::start_on(false, items, page_size, configure).await
    }

    /// A stack whose simulator serves `enterprise`-only (a GitHub Enterprise Server's `/api`
    /// layout) or both layouts.
    async fn start_on(
        enterprise: bool,
        items: usize,
        page_size: u32,
        configure: impl FnOnce(&mut github_sync::Config),
    ) -> Result<Stack> {
        let env = TestEnv::new().await?;
        let generated = generate(&Scenario {
            items,
            ..Scenario::default()
        });
        let mut model = generated.model;
        model.set_app_id("4242");
        let sim = if enterprise {
            GithubSim::start_enterprise(model).await?
        } else {
            GithubSim::start(model).await?
        };
        let (control, keys) = (
            testkit::spawn(testkit::control_api_config(env.common_args())).await?,
            testkit::control_api_keys()?,
        );
        let mut config = testkit::github_sync_config(env.common_args());
        config.sync.page_size = page_size;
        configure(&mut config);
        let sync = testkit::spawn(config).await?;
        let token = testkit::token(&keys, Role::Admin, None)?;
        let http = reqwest::Client::new();
        let api = control.url();
        let ws: Value = http
            .post(format!("{api}/workspaces"))
            .bearer_auth(&token)
            .json(&json!({"name": "acme"}))
            .send()
            .await?
            .json()
            .await?;
        let ws = ws["id"].as_str().unwrap().to_owned();
        let conn: Value = http
            .post(format!("{api}/workspaces/{ws}/connections"))
            .bearer_auth(&token)
            .json(&json!({
                "kind": "github",
                "server_url": sim.base_url(),
                "settings": { "auth": "app", "app_id": 4242, "installation_id": generated.installation },
                "secrets": { "private_key": String::from_utf8(APP_KEY.to_vec())? },
            }))
            .send()
            .await?
            .json()
            .await?;
        let conn = conn["id"].as_str().expect("connection created").to_owned();
        let pool = env.db.db.get_postgres_connection_pool().clone();
        Ok(Stack {
            env,
            sim,
            http,
            api,
            token,
            ws,
            conn,
            pool,
            _control: control,
            _sync: sync,
            repositories: generated.repositories,
        })
    }

    async fn post(&self, path: &str, body: Value) -> Result<(u16, Value)> {
        let url = format!("{}{path}", self.api);
        send_json(self.http.post(url).bearer_auth(&self.token).json(&body)).await
    }

    /// Waits for the connection's jobs of `job_type` to reach `count` finished ones.
    async fn finished_jobs(
        &self,
        job_type: &str,
        count: i64,
    ) -> Result<Vec<(String, Option<String>, i64)>> {
        let pool = &self.pool;
        eventually(&format!("{job_type} job did not finish"), || async move {
            let rows: Vec<(String, Option<String>, i64)> = sqlx::query_as(
                "SELECT status, error, progress_done FROM sync_job WHERE job_type = $1 AND finished_at IS NOT NULL ORDER BY created_at",
            )
            .bind(job_type)
            .fetch_all(pool)
            .await?;
            Ok((rows.len() as i64 >= count).then_some(rows))
        })
        .await
    }

    async fn count(&self, sql: &'static str) -> Result<i64> {
        let (n,): (i64,) = sqlx::query_as(sql).fetch_one(&self.pool).await?;
        Ok(n)
    }

    async fn reconcile(&self) -> Result<()> {
        let (status, body) = self
            .post(
                &format!("/workspaces/{}/connections/{}/sync", self.ws, self.conn),
                json!({"type": "RECONCILIATION"}),
            )
            .await?;
        assert_eq!(status, 202, "{body}");
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn initial_sync_mirrors_an_installation_of_5_repositories_and_10000_items() -> Result<()> {
    let s = Stack::start(10_000, 100).await?;
    let (status, _) = s
        .post(
            &format!("/workspaces/{}/connections/{}/activate", s.ws, s.conn),
            json!({}),
        )
        .await?;
    assert_eq!(status, 200);
    let jobs = s.finished_jobs("INITIAL", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    assert_eq!(jobs[0].2, 10_000, "progress counts every item");

    let (issues, pulls) = s.sim.model(|m| {
        let issues: usize = m.repositories().map(|r| r.issues().count()).sum();
        let pulls: usize = m.repositories().map(|r| r.pull_requests().count()).sum();
        (issues as i64, pulls as i64)
    });
    assert_eq!(s.count("SELECT count(*) FROM issue").await?, issues);
    assert_eq!(s.count("SELECT count(*) FROM pull_request").await?, pulls);
    assert_eq!(s.count("SELECT count(*) FROM repository").await?, 5);
    assert_eq!(
        s.count("SELECT count(*) FROM repository_to_monitor WHERE native_id IS NOT NULL")
            .await?,
        5
    );
    // Field by field for one issue and one pull request.
    let (repo_id, issue) = s.sim.model(|m| {
        let repo = m.repositories().next().unwrap();
        (repo.database_id, repo.issues().next().unwrap().clone())
    });
    let row: (String, Option<String>, String, i32) = sqlx::query_as(
        "SELECT i.title, i.body, i.state, i.number FROM issue i JOIN repository r ON r.id = i.repository_id WHERE r.native_id = $1 AND i.native_id = $2",
    )
    .bind(repo_id as i64)
    .bind(issue.database_id as i64)
    .fetch_one(&s.pool)
    .await?;
    assert_eq!(row.0, issue.title);
    assert_eq!(row.1.as_deref(), Some(issue.body.as_str()));
    assert_eq!(row.3 as u64, issue.number);
    let _ = &s.repositories;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_fails_closed_on_injected_faults_and_tombstones_exactly_the_vanished()
-> Result<()> {
    // Pages of 20, so every repository's issues span several pages and a lie has room.
    let s = Stack::start(600, 20).await?;
    s.post(
        &format!("/workspaces/{}/connections/{}/activate", s.ws, s.conn),
        json!({}),
    )
    .await?;
    s.finished_jobs("INITIAL", 1).await?;
    let repo = s.repositories[0];
    let gone: Vec<u64> = s.sim.model(|m| {
        let numbers: Vec<u64> = m
            .repository(repo)
            .unwrap()
            .issues()
            .take(3)
            .map(|i| i.number)
            .collect();
        numbers
            .iter()
            .filter_map(|n| m.delete_issue(repo, *n))
            .map(|i| i.database_id)
            .collect()
    });
    assert_eq!(gone.len(), 3);

    let faults = [
        FaultKind::TruncatedPage { keep: 10 },
        FaultKind::HasNextPage(false),
        FaultKind::TotalCountOffBy(1),
        FaultKind::field_error(
            "repository.issues.nodes.0.comments",
            "FORBIDDEN",
            "no access",
        ),
        FaultKind::Status(502),
    ];
    let mut reconciles = 0;
    for kind in faults {
        s.sim.clear_faults();
        s.sim
            .inject(Fault::always(ops::REPOSITORY_ISSUES, kind.clone()));
        s.reconcile().await?;
        reconciles += 1;
        s.finished_jobs("RECONCILIATION", reconciles).await?;
        assert_eq!(
            s.count("SELECT count(*) FROM issue WHERE deleted_at IS NOT NULL")
                .await?,
            0,
            "{kind:?} must tombstone nothing"
        );
    }
    s.sim.clear_faults();
    s.reconcile().await?;
    let jobs = s.finished_jobs("RECONCILIATION", reconciles + 1).await?;
    let activity: Vec<(String, serde_json::Value)> = sqlx::query_as(
        "SELECT activity, detail FROM connection_activity ORDER BY created_at DESC LIMIT 4",
    )
    .fetch_all(&s.pool)
    .await?;
    assert_eq!(jobs.last().unwrap().0, "succeeded", "{jobs:?} {activity:?}");
    let rows: Vec<(i64,)> = sqlx::query_as(
        "SELECT native_id FROM issue WHERE deleted_at IS NOT NULL ORDER BY native_id",
    )
    .fetch_all(&s.pool)
    .await?;
    let mut expected: Vec<i64> = gone.iter().map(|id| *id as i64).collect();
    expected.sort();
    assert_eq!(
        rows.into_iter().map(|(id,)| id).collect::<Vec<_>>(),
        expected
    );
    let _ = &s.env;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn budget_exhaustion_mid_reconcile_ends_the_job_with_its_reason_and_tombstones_nothing()
-> Result<()> {
    let s = Stack::start(600, 20).await?;
    s.post(
        &format!("/workspaces/{}/connections/{}/activate", s.ws, s.conn),
        json!({}),
    )
    .await?;
    s.finished_jobs("INITIAL", 1).await?;
    let repo = s.repositories[0];
    s.sim.model(|m| {
        let n = m.repository(repo).unwrap().issues().next().unwrap().number;
        m.delete_issue(repo, n);
        // One page fits above the job's reserve of 500 points; the next would dig into it.
        m.set_rate_limit(
            RateLimitResource::Graphql,
            RateLimitBudget {
                limit: 5000,
                remaining: 501,
                reset_at: time::OffsetDateTime::now_utc() + time::Duration::hours(1),
            },
        );
    });
    s.reconcile().await?;
    let jobs = s.finished_jobs("RECONCILIATION", 1).await?;
    assert_eq!(jobs[0].0, "failed");
    assert!(
        jobs[0].1.as_deref().unwrap_or_default().contains("budget"),
        "{jobs:?}"
    );
    assert_eq!(
        s.count("SELECT count(*) FROM issue WHERE deleted_at IS NOT NULL")
            .await?,
        0
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_repository_loses_its_mirror_and_monitors() -> Result<()> {
    let s = Stack::start(300, 100).await?;
    s.post(
        &format!("/workspaces/{}/connections/{}/activate", s.ws, s.conn),
        json!({}),
    )
    .await?;
    s.finished_jobs("INITIAL", 1).await?;
    let repo = s.repositories[0];
    let (owner, payload) = s.sim.model(|m| {
        let r = m.repository(repo).unwrap().clone();
        let payload = vendor_sim::github::webhook::repository_payload(m, "deleted", &r, None);
        m.delete_repository(repo);
        (r.owner.clone(), payload)
    });
    let before = s.count("SELECT count(*) FROM issue").await?;
    let in_repo: (i64,) = sqlx::query_as("SELECT count(*) FROM issue i JOIN repository r ON r.id = i.repository_id WHERE r.native_id = $1")
        .bind(repo as i64)
        .fetch_one(&s.pool)
        .await?;
    assert!(in_repo.0 > 0);

    // As ingress publishes it: owner-level subject, the connection in a header.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Forgesync-Connection", s.conn.as_str());
    let subject = lifecycle_core::subject::github_owner(&owner, "repository")?;
    s.env
        .bus
        .publish(
            &subject,
            "delivery-1",
            headers,
            serde_json::to_vec(&payload)?.into(),
        )
        .await?;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while s.count("SELECT count(*) FROM repository").await? != 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the repository was not removed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        s.count("SELECT count(*) FROM repository_to_monitor")
            .await?,
        4
    );
    assert_eq!(
        s.count("SELECT count(*) FROM issue").await?,
        before - in_repo.0
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_share_the_jobs_and_none_runs_twice() -> Result<()> {
    let s = Stack::start(300, 100).await?;
    let second = testkit::spawn(testkit::github_sync_config(s.env.common_args())).await?;
    s.post(
        &format!("/workspaces/{}/connections/{}/activate", s.ws, s.conn),
        json!({}),
    )
    .await?;
    s.finished_jobs("INITIAL", 1).await?;
    let per_job = s.sim.calls(ops::REPOSITORY_ISSUES);
    // Slow reads keep a replica's slots busy, so queued jobs must reach the other one.
    s.sim.inject(Fault::always(
        ops::REPOSITORY_ISSUES,
        FaultKind::Delay(Duration::from_millis(150)),
    ));
    // At most one job per type waits for a connection: each request is made once the one
    // before it was claimed, so eight jobs run, spread over the two replicas' slots.
    for _ in 0..8 {
        s.reconcile().await?;
        let pool = &s.pool;
        eventually("the queued reconcile to be claimed", || async move {
            let (waiting,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM sync_job WHERE job_type = 'RECONCILIATION' AND status = 'queued'",
            )
            .fetch_one(pool)
            .await?;
            Ok((waiting == 0).then_some(()))
        })
        .await?;
    }
    let jobs = s.finished_jobs("RECONCILIATION", 8).await?;
    assert!(jobs.iter().all(|j| j.0 == "succeeded"), "{jobs:?}");
    assert_eq!(
        s.sim.calls(ops::REPOSITORY_ISSUES),
        per_job * 9,
        "every job read its pages exactly once"
    );
    let replicas: Vec<(String,)> = sqlx::query_as(
        "SELECT DISTINCT claimed_by FROM sync_job WHERE job_type = 'RECONCILIATION'",
    )
    .fetch_all(&s.pool)
    .await?;
    assert_eq!(replicas.len(), 2, "both replicas ran jobs: {replicas:?}");
    second.stop().await
}

/// Helpers of the deletion-lifecycle tests below.
impl Stack {
    async fn activate(&self) -> Result<()> {
        let (status, body) = self
            .post(
                &format!("/workspaces/{}/connections/{}/activate", self.ws, self.conn),
                json!({}),
            )
            .await?;
        assert_eq!(status, 200, "{body}");
        Ok(())
    }

    /// Native ids of tombstoned issues, ascending.
    async fn tombstoned_issues(&self) -> Result<Vec<i64>> {
        let rows: Vec<(i64,)> = sqlx::query_as(
            "SELECT native_id FROM issue WHERE deleted_at IS NOT NULL ORDER BY native_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// Deletes the first `n` issues of `repo` upstream; their native ids, ascending.
    fn delete_issues(&self, repo: u64, n: usize) -> Vec<i64> {
        let mut gone: Vec<i64> = self.sim.model(|m| {
            let numbers: Vec<u64> = m
                .repository(repo)
                .unwrap()
                .issues()
                .take(n)
                .map(|i| i.number)
                .collect();
            numbers
                .iter()
                .filter_map(|number| m.delete_issue(repo, *number))
                .map(|i| i.database_id as i64)
                .collect()
        });
        gone.sort();
        assert_eq!(gone.len(), n);
        gone
    }

    /// The repository a pass lists first (monitors are walked by owner, then name).
    fn first_listed_repository(&self) -> u64 {
        self.sim.model(|m| {
            m.repositories()
                .min_by_key(|r| (r.owner.to_lowercase(), r.name.to_lowercase()))
                .unwrap()
                .database_id
        })
    }

    fn upstream_items(&self) -> i64 {
        self.sim.model(|m| {
            m.repositories()
                .map(|r| r.issues().count() + r.pull_requests().count())
                .sum::<usize>() as i64
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_enterprise_server_connection_syncs_through_its_api_prefix() -> Result<()> {
    // The simulator answers only under `/api/v3` and `/api/graphql` of the server URL.
    let s = Stack::start_on(true, 60, 100, |_| {}).await?;
    s.activate().await?;
    let jobs = s.finished_jobs("INITIAL", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    assert_eq!(jobs[0].2, s.upstream_items());
    assert!(s.sim.calls(ops::REPOSITORY_ISSUES) > 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_job_of_a_connection_reuses_its_reader_and_installation_token() -> Result<()> {
    let s = Stack::start(30, 100).await?;
    s.activate().await?;
    s.finished_jobs("INITIAL", 1).await?;
    let minted = s.sim.calls(ops::CREATE_INSTALLATION_ACCESS_TOKEN);
    assert!(minted >= 1);
    s.reconcile().await?;
    let jobs = s.finished_jobs("RECONCILIATION", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    assert_eq!(
        s.sim.calls(ops::CREATE_INSTALLATION_ACCESS_TOKEN),
        minted,
        "the first job's token is still valid"
    );
    // Changed settings build a new reader, with its own token.
    sqlx::query("UPDATE connection SET settings = settings || '{\"min_remaining\": 100}'")
        .execute(&s.pool)
        .await?;
    s.reconcile().await?;
    let jobs = s.finished_jobs("RECONCILIATION", 2).await?;
    assert_eq!(jobs[1].0, "succeeded", "{jobs:?}");
    assert_eq!(
        s.sim.calls(ops::CREATE_INSTALLATION_ACCESS_TOKEN),
        minted + 1
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_initial_job_after_upstream_deletions_tombstones_nothing() -> Result<()> {
    let s = Stack::start(300, 20).await?;
    s.activate().await?;
    s.finished_jobs("INITIAL", 1).await?;
    let gone = s.delete_issues(s.repositories[0], 3);

    // The App is uninstalled (as GitHub reports it) and installed again: a new activation, whose
    // generation names a new INITIAL job.
    sqlx::query("UPDATE connection SET status = 'uninstalled' WHERE id = $1::uuid")
        .bind(&s.conn)
        .execute(&s.pool)
        .await?;
    s.activate().await?;
    let jobs = s.finished_jobs("INITIAL", 2).await?;
    assert_eq!(jobs[1].0, "succeeded", "{jobs:?}");
    assert_eq!(
        jobs[1].2,
        s.upstream_items(),
        "the second INITIAL listed every item upstream, the deletions' absence included"
    );
    assert!(
        s.tombstoned_issues().await?.is_empty(),
        "an INITIAL job never infers a deletion"
    );

    s.reconcile().await?;
    let jobs = s.finished_jobs("RECONCILIATION", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    assert_eq!(s.tombstoned_issues().await?, gone);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_item_created_upstream_during_a_reconcile_survives_it() -> Result<()> {
    // Pages of 20: the first listed repository's issues span several pages.
    let s = Stack::start(600, 20).await?;
    s.activate().await?;
    s.finished_jobs("INITIAL", 1).await?;
    let repo = s.first_listed_repository();
    let gone = s.delete_issues(repo, 2);

    // Someone opens an issue after the pass read the repository's first page of issues.
    let created = std::sync::Arc::new(std::sync::Mutex::new(None));
    let slot = created.clone();
    s.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        2,
        FaultKind::mutate(move |m| {
            let issue = m.add_issue(
                repo,
                vendor_sim::github::NewIssue {
                    title: "opened mid-pass".into(),
                    ..Default::default()
                },
            );
            *slot.lock().unwrap() = issue.map(|i| i.database_id as i64);
        }),
    ));
    s.reconcile().await?;
    let jobs = s.finished_jobs("RECONCILIATION", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    let created = created.lock().unwrap().expect("the mutation ran mid-pass");
    // The total changed under the listing: it stopped there, not provably complete, so the pass
    // tombstones nothing (the new issue included, whether or not it was read).
    assert!(s.tombstoned_issues().await?.is_empty());
    let (reasons,): (Vec<String>,) = sqlx::query_as(
        "SELECT coalesce(array_agg(detail->>'reason'), '{}') FROM connection_activity WHERE activity = 'not_reconciled'",
    )
    .fetch_one(&s.pool)
    .await?;
    assert!(
        reasons.iter().any(|r| r.contains("total count changed")),
        "{reasons:?}"
    );

    s.sim.clear_faults();
    s.reconcile().await?;
    let jobs = s.finished_jobs("RECONCILIATION", 2).await?;
    assert_eq!(jobs[1].0, "succeeded", "{jobs:?}");
    assert_eq!(
        s.tombstoned_issues().await?,
        gone,
        "the clean pass tombstones exactly the deleted items, never the new one"
    );
    let live: Option<(Option<String>,)> =
        sqlx::query_as("SELECT title FROM issue WHERE native_id = $1 AND deleted_at IS NULL")
            .bind(created)
            .fetch_optional(&s.pool)
            .await?;
    assert_eq!(live, Some((Some("opened mid-pass".to_owned()),)));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restored_item_loses_its_tombstone() -> Result<()> {
    let s = Stack::start(300, 20).await?;
    s.activate().await?;
    s.finished_jobs("INITIAL", 1).await?;
    let repo = s.repositories[0];
    let removed = s.sim.model(|m| {
        let n = m.repository(repo).unwrap().issues().next().unwrap().number;
        m.delete_issue(repo, n).unwrap()
    });
    let id = removed.database_id as i64;
    let title = |pool: PgPool| async move {
        let (title,): (Option<String>,) =
            sqlx::query_as("SELECT title FROM issue WHERE native_id = $1")
                .bind(id)
                .fetch_one(&pool)
                .await?;
        anyhow::Ok(title)
    };

    s.reconcile().await?;
    s.finished_jobs("RECONCILIATION", 1).await?;
    assert_eq!(s.tombstoned_issues().await?, vec![id]);
    assert_eq!(
        title(s.pool.clone()).await?,
        None,
        "a tombstone clears content"
    );

    s.sim
        .model(|m| assert!(m.restore_issue(repo, removed.clone())));
    s.reconcile().await?;
    let jobs = s.finished_jobs("RECONCILIATION", 2).await?;
    assert_eq!(jobs[1].0, "succeeded", "{jobs:?}");
    assert!(
        s.tombstoned_issues().await?.is_empty(),
        "the reappeared item is live again"
    );
    assert_eq!(title(s.pool.clone()).await?, Some(removed.title.clone()));
    Ok(())
}

/// The connection's BACKFILL jobs as the API shows them, oldest first.
async fn backfills(s: &Stack) -> Result<Vec<Value>> {
    let jobs: Value = s
        .http
        .get(format!(
            "{}/workspaces/{}/connections/{}/jobs",
            s.api, s.ws, s.conn
        ))
        .bearer_auth(&s.token)
        .send()
        .await?
        .json()
        .await?;
    let mut out: Vec<Value> = jobs
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["type"] == "BACKFILL")
        .cloned()
        .collect();
    out.reverse();
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manual_backfill_passes_again_until_a_pass_is_complete() -> Result<()> {
    let s = Stack::start(300, 20).await?;
    s.activate().await?;
    s.finished_jobs("INITIAL", 1).await?;
    let per_pass = s.sim.calls(ops::REPOSITORY_ISSUES);
    // The first pass's first issues page miscounts; every later page is right.
    s.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        1,
        FaultKind::TotalCountOffBy(1),
    ));
    let (status, body) = s
        .post(
            &format!("/workspaces/{}/connections/{}/sync", s.ws, s.conn),
            json!({"type": "BACKFILL"}),
        )
        .await?;
    assert_eq!(status, 202, "{body}");
    let jobs = s.finished_jobs("BACKFILL", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    let job = &backfills(&s).await?[0];
    assert_eq!(job["passes"], 2, "{job}");
    assert_eq!(
        job["progress_done"],
        s.upstream_items(),
        "the second pass listed every item: {job}"
    );
    assert!(
        s.sim.calls(ops::REPOSITORY_ISSUES) > per_pass * 2,
        "the backfill read the issues again after its first pass"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manual_backfill_keeps_passing_past_thirty_incomplete_passes() -> Result<()> {
    // No pass cap is set (the default); the waits are short and bounded through the flags.
    let s = Stack::start_with(50, 100, |c| c.sync.backfill.backfill_max_backoff_ms = 100).await?;
    s.activate().await?;
    s.finished_jobs("INITIAL", 1).await?;
    // One issues page per repository: a pass reads as many as the INITIAL did.
    let per_pass = s.sim.calls(ops::REPOSITORY_ISSUES);
    assert!(per_pass > 0);
    s.sim.inject(Fault {
        operation: Some(ops::REPOSITORY_ISSUES.to_owned()),
        calls: Calls::First(30 * per_pass),
        kind: FaultKind::TruncatedPage { keep: 1 },
    });
    let (status, body) = s
        .post(
            &format!("/workspaces/{}/connections/{}/sync", s.ws, s.conn),
            json!({"type": "BACKFILL"}),
        )
        .await?;
    assert_eq!(status, 202, "{body}");
    let jobs = s.finished_jobs("BACKFILL", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    let job = &backfills(&s).await?[0];
    assert_eq!(job["passes"], 31, "{job}");
    assert_eq!(job["progress_done"], s.upstream_items(), "{job}");
    assert_eq!(
        s.count(
            "SELECT count(*) FROM connection_activity WHERE activity = 'backfill_pass_incomplete'"
        )
        .await?,
        30
    );
    assert_eq!(
        s.sim.calls(ops::REPOSITORY_ISSUES),
        32 * per_pass,
        "INITIAL, then 31 passes"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_canceled_backfill_stops_between_passes() -> Result<()> {
    // A minute between passes: a cancel must not wait for it.
    let s = Stack::start_with(300, 20, |c| c.sync.backfill.backfill_backoff_ms = 60_000).await?;
    s.activate().await?;
    s.finished_jobs("INITIAL", 1).await?;
    s.sim.inject(Fault::always(
        ops::REPOSITORY_ISSUES,
        FaultKind::TruncatedPage { keep: 5 },
    ));
    let (status, job) = s
        .post(
            &format!("/workspaces/{}/connections/{}/sync", s.ws, s.conn),
            json!({"type": "BACKFILL"}),
        )
        .await?;
    assert_eq!(status, 202, "{job}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while s
        .count(
            "SELECT count(*) FROM connection_activity WHERE activity = 'backfill_pass_incomplete'",
        )
        .await?
        == 0
    {
        assert!(tokio::time::Instant::now() < deadline, "no pass ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = s
        .post(
            &format!(
                "/workspaces/{}/connections/{}/jobs/{}/cancel",
                s.ws,
                s.conn,
                job["id"].as_str().unwrap()
            ),
            json!({}),
        )
        .await?;
    assert_eq!(status, 200, "{body}");
    let canceled_at = tokio::time::Instant::now();
    let jobs = s.finished_jobs("BACKFILL", 1).await?;
    assert!(
        canceled_at.elapsed() < Duration::from_secs(10),
        "the backfill stopped {:?} after the cancel",
        canceled_at.elapsed()
    );
    assert_eq!(jobs[0].0, "canceled", "{jobs:?}");
    assert_eq!(backfills(&s).await?[0]["passes"], 1);
    Ok(())
}

/// Nested lists: what a reconcile restores and removes under the items it lists.
impl Stack {
    /// A repository with at least one issue and one pull request, with the native ids of both.
    fn repository_with_both(&self) -> (u64, u64, u64) {
        self.sim.model(|m| {
            m.repositories()
                .find_map(|r| {
                    let issue = r.issues().find(|i| i.comments > 0)?;
                    let pr = r.pull_requests().next()?;
                    Some((r.database_id, issue.database_id, pr.database_id))
                })
                .expect("a repository with a commented issue and a pull request")
        })
    }

    /// The `nested_corrected` activity of the connection's last finished job of `job_type`,
    /// summed by kind.
    async fn corrections(&self, job_type: &str) -> Result<serde_json::Map<String, Value>> {
        let rows: Vec<(Value,)> = sqlx::query_as(
            "SELECT a.detail FROM connection_activity a
              WHERE a.activity = 'nested_corrected'
                AND a.detail->>'job_id' = (SELECT id::text FROM sync_job WHERE job_type = $1
                                            ORDER BY created_at DESC LIMIT 1)",
        )
        .bind(job_type)
        .fetch_all(&self.pool)
        .await?;
        let mut sum = serde_json::Map::new();
        for (detail,) in rows {
            for (kind, n) in detail["corrections"]
                .as_object()
                .cloned()
                .unwrap_or_default()
            {
                let total = sum.get(&kind).and_then(Value::as_i64).unwrap_or(0);
                sum.insert(kind, json!(total + n.as_i64().unwrap_or(0)));
            }
        }
        Ok(sum)
    }

    /// Whether the conversation comment `native_id` is live in the mirror (`None`: no row).
    async fn comment_live(&self, native_id: u64) -> Result<Option<bool>> {
        let row: Option<(bool,)> = sqlx::query_as(
            "SELECT deleted_at IS NULL AND body IS NOT NULL FROM comment WHERE native_id = $1",
        )
        .bind(native_id as i64)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(live,)| live))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reconcile_restores_comments_reviews_threads_and_requests_whose_webhooks_were_lost_as_corrections()
-> Result<()> {
    let s = Stack::start(60, 100).await?;
    s.activate().await?;
    let jobs = s.finished_jobs("INITIAL", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    let (_, issue, pr) = s.repository_with_both();
    // What GitHub changed while every webhook about it was dropped.
    use vendor_sim::github::{RequestedReviewer, ReviewState};
    let (issue_comment, pr_comment, review, thread) = s.sim.model(|m| {
        let issue_comment = m.add_comment(issue, Some("alice"), "lost comment");
        let pr_comment = m.add_comment(pr, Some("bob"), "lost pr comment");
        let review = m.add_review(pr, Some("carol"), ReviewState::Approved, "lgtm");
        let thread = m.add_review_thread(
            pr,
            "src/lib.rs",
            Some(review.database_id),
            &["nit", "fixed"],
        );
        m.resolve_thread(pr, &thread.node_id, Some("carol"));
        m.set_review_requests(
            pr,
            vec![
                RequestedReviewer::User("dave".into()),
                RequestedReviewer::Team("core".into()),
            ],
        );
        (issue_comment, pr_comment, review, thread)
    });
    assert_eq!(s.comment_live(issue_comment.database_id).await?, None);

    s.reconcile().await?;
    let jobs = s.finished_jobs("RECONCILIATION", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    assert_eq!(s.comment_live(issue_comment.database_id).await?, Some(true));
    assert_eq!(s.comment_live(pr_comment.database_id).await?, Some(true));
    let (state, body): (String, Option<String>) =
        sqlx::query_as("SELECT state, body FROM review WHERE native_id = $1")
            .bind(review.database_id as i64)
            .fetch_one(&s.pool)
            .await?;
    assert_eq!(
        (state.as_str(), body.as_deref()),
        ("APPROVED", Some("lgtm"))
    );
    let (resolved, resolved_by): (Option<bool>, Option<String>) =
        sqlx::query_as("SELECT resolved, resolved_by FROM review_thread WHERE node_id = $1")
            .bind(&thread.node_id)
            .fetch_one(&s.pool)
            .await?;
    assert_eq!(
        (resolved, resolved_by.as_deref()),
        (Some(true), Some("carol"))
    );
    let filed: (i64,) = sqlx::query_as(
        "SELECT count(*) FROM review_comment c JOIN review_thread t ON t.id = c.thread_id
          WHERE t.node_id = $1 AND c.deleted_at IS NULL",
    )
    .bind(&thread.node_id)
    .fetch_one(&s.pool)
    .await?;
    assert_eq!(filed.0, 2, "the thread's comments are filed under it");
    let (requested,): (Option<Value>,) =
        sqlx::query_as("SELECT requested_reviewers FROM pull_request WHERE native_id = $1")
            .bind(pr as i64)
            .fetch_one(&s.pool)
            .await?;
    assert_eq!(requested, Some(json!([{"user": "dave"}, {"team": "core"}])));

    // Each restored row is one correction of the reconcile, and nothing else is.
    let corrections = s.corrections("RECONCILIATION").await?;
    let expected = json!({
        "comments": 2, "reviews": 1, "review_comments": 2, "threads": 1,
        "reviewer_requests": 1, "comments_removed": 0,
    });
    assert_eq!(Value::Object(corrections), expected);

    // A second reconcile finds nothing left to correct.
    s.reconcile().await?;
    s.finished_jobs("RECONCILIATION", 2).await?;
    assert!(s.corrections("RECONCILIATION").await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_comment_deleted_upstream_is_removed_by_a_complete_reconcile_only() -> Result<()> {
    let s = Stack::start(60, 100).await?;
    s.activate().await?;
    s.finished_jobs("INITIAL", 1).await?;
    let (_, whole, long) = s.repository_with_both();
    // `long` gets more comments than one nested page holds: its listing is never whole.
    let (gone, kept) = s.sim.model(|m| {
        let first = m.add_comment(long, Some("alice"), "first");
        for n in 0..60 {
            m.add_comment(long, Some("alice"), &format!("more {n}"));
        }
        let gone = m.conversation(whole).comments[0].database_id;
        (gone, first.database_id)
    });
    s.reconcile().await?;
    s.finished_jobs("RECONCILIATION", 1).await?;
    assert_eq!(s.comment_live(gone).await?, Some(true));
    assert_eq!(
        s.comment_live(kept).await?,
        Some(true),
        "the first page is mirrored"
    );
    s.sim.model(|m| {
        assert!(m.delete_comment(whole, gone));
        assert!(m.delete_comment(long, kept));
    });

    // An INITIAL never infers a deletion (the App uninstalled and installed again).
    sqlx::query("UPDATE connection SET status = 'uninstalled' WHERE id = $1::uuid")
        .bind(&s.conn)
        .execute(&s.pool)
        .await?;
    s.activate().await?;
    let jobs = s.finished_jobs("INITIAL", 2).await?;
    assert_eq!(jobs[1].0, "succeeded", "{jobs:?}");
    assert_eq!(s.comment_live(gone).await?, Some(true), "INITIAL keeps it");

    // A reconcile whose issue listing reports an error at the comments keeps every comment.
    s.sim.inject(Fault::always(
        ops::REPOSITORY_ISSUES,
        FaultKind::field_error("repository.issues.nodes.0.title", "FORBIDDEN", "no access"),
    ));
    s.sim.inject(Fault::always(
        ops::REPOSITORY_PULL_REQUESTS,
        FaultKind::field_error(
            "repository.pullRequests.nodes.0.title",
            "FORBIDDEN",
            "no access",
        ),
    ));
    s.reconcile().await?;
    s.finished_jobs("RECONCILIATION", 2).await?;
    assert_eq!(
        s.comment_live(gone).await?,
        Some(true),
        "an errored page keeps it"
    );
    s.sim.clear_faults();

    // A complete reconcile removes it; the parent listed in part keeps its own.
    s.reconcile().await?;
    let jobs = s.finished_jobs("RECONCILIATION", 3).await?;
    assert_eq!(jobs[2].0, "succeeded", "{jobs:?}");
    assert_eq!(s.comment_live(gone).await?, Some(false), "tombstoned");
    assert_eq!(
        s.comment_live(kept).await?,
        Some(true),
        "a parent whose comments span more than one page removes nothing"
    );
    let corrections = s.corrections("RECONCILIATION").await?;
    assert_eq!(corrections.get("comments_removed"), Some(&json!(1)));
    Ok(())
}

/// DNS rebinding: a connection's server name resolved to a public address when it was named
/// and to loopback now (here: `localhost`, and the address itself). github-sync, on the
/// operator's default egress policy, connects to neither: the job fails as "vendor
/// unreachable" and the server behind the address never sees a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_that_resolves_to_an_internal_address_is_never_contacted_by_a_job() -> Result<()> {
    let s = Stack::start_with(10, 100, |c| {
        c.common.egress = vendor_http::egress::Egress::public_only();
    })
    .await?;
    sqlx::query("UPDATE provider_instance SET server_url = replace(server_url, '127.0.0.1', 'localhost') WHERE kind = 'github'")
        .execute(&s.pool)
        .await?;
    s.activate().await?;
    let jobs = s.finished_jobs("INITIAL", 1).await?;
    assert_eq!(jobs[0].0, "failed", "{jobs:?}");
    let error = jobs[0].1.clone().unwrap_or_default();
    assert!(error.contains("vendor unreachable"), "{error}");
    assert!(
        !error.contains("127.0.0.1"),
        "the job's error names the address: {error}"
    );
    assert_eq!(
        s.sim.call_counts().values().sum::<u64>(),
        0,
        "the internal server was reached"
    );
    Ok(())
}

/// A vendor whose clock runs far ahead (or a server that lies) lists an issue dated 2099: the
/// job writes every other item and not that one, so no row is dated where forward-only writes
/// would refuse every later version, and says so in `sync_future_times_total`. Once the vendor
/// dates it sanely, the next reconcile writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_item_dated_in_the_future_is_not_written_by_a_job() -> Result<()> {
    let s = Stack::start(20, 100).await?;
    let repo = s.repositories[0];
    let (number, native) = s.sim.model(|m| {
        let issue = m
            .repository(repo)
            .expect("repository exists")
            .issues()
            .next()
            .expect("issues");
        (issue.number, issue.database_id)
    });
    let real = s.sim.model(|m| {
        let mut real = None;
        m.update_issue(repo, number, |i| {
            real = Some(i.updated_at);
            i.updated_at = time::macros::datetime!(2099-01-01 00:00 UTC);
        });
        real.expect("the issue exists")
    });
    s.activate().await?;
    let jobs = s.finished_jobs("INITIAL", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    let future_rows = s
        .count("SELECT count(*) FROM issue WHERE upstream_updated_at > now() + interval '1 day'")
        .await?;
    assert_eq!(future_rows, 0, "a row was dated in the future");
    let stored: Option<(i64,)> = sqlx::query_as("SELECT native_id FROM issue WHERE native_id = $1")
        .bind(i64::try_from(native)?)
        .fetch_optional(&s.pool)
        .await?;
    assert!(stored.is_none(), "the future-dated issue was written");
    assert_eq!(
        s.count("SELECT count(*) FROM issue").await?
            + s.count("SELECT count(*) FROM pull_request").await?,
        s.upstream_items() - 1
    );
    let metrics = reqwest::get(format!("{}/metrics", s._sync.url()))
        .await?
        .text()
        .await?;
    assert!(
        metrics.contains(r#"sync_future_times_total{vendor="github"} 1"#),
        "{metrics}"
    );

    // Dated sanely again, it is written by the next reconcile.
    s.sim.model(|m| {
        m.update_issue(repo, number, |i| i.updated_at = real);
    });
    s.reconcile().await?;
    let jobs = s.finished_jobs("RECONCILIATION", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    let stored: Option<(i64,)> = sqlx::query_as("SELECT native_id FROM issue WHERE native_id = $1")
        .bind(i64::try_from(native)?)
        .fetch_optional(&s.pool)
        .await?;
    assert!(
        stored.is_some(),
        "the issue was not written once dated sanely"
    );
    Ok(())
}

/// Jobs take turns across tenants. Mallory's two connections name servers it controls, which
/// answer after 25 s with `503 Retry-After: 120`. Its workspace runs one job at a time: the
/// second reconcile is deferred without holding a slot, and acme's reconcile, queued after both,
/// runs in the other slot and ends while Mallory's first job is still waiting on its server.
/// When that job ends, the deferred one is woken and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_tenant_holds_one_job_slot_and_another_tenants_reconcile_runs_meanwhile()
-> Result<()> {
    // Two job slots in the one replica, as deployed by default.
    let s = Stack::start_with(20, 100, |c| c.sync.job_concurrency = 2).await?;
    s.activate().await?;
    let (status, ws) = s.post("/workspaces", json!({"name": "mallory"})).await?;
    assert_eq!(status, 201, "{ws}");
    let mallory = ws["id"].as_str().unwrap().to_owned();
    let mut slow = Vec::new();
    let mut connections = Vec::new();
    for _ in 0..2 {
        let generated = generate(&Scenario {
            items: 10,
            ..Scenario::default()
        });
        let mut model = generated.model;
        model.set_app_id("4242");
        let sim = GithubSim::start(model).await?;
        let (status, conn) = s
            .post(
                &format!("/workspaces/{mallory}/connections"),
                json!({
                    "kind": "github",
                    "server_url": sim.base_url(),
                    "settings": { "auth": "app", "app_id": 4242, "installation_id": generated.installation },
                    "secrets": { "private_key": String::from_utf8(APP_KEY.to_vec())? },
                }),
            )
            .await?;
        assert_eq!(status, 201, "{conn}");
        let id = conn["id"].as_str().unwrap().to_owned();
        let (status, body) = s
            .post(
                &format!("/workspaces/{mallory}/connections/{id}/activate"),
                json!({}),
            )
            .await?;
        assert_eq!(status, 200, "{body}");
        slow.push(sim);
        connections.push(id);
    }
    let initial = s.finished_jobs("INITIAL", 3).await?;
    assert!(initial.iter().all(|j| j.0 == "succeeded"), "{initial:?}");
    for sim in &slow {
        for kind in [
            FaultKind::Delay(Duration::from_secs(25)),
            FaultKind::Unavailable { retry_after: 120 },
        ] {
            sim.inject(Fault {
                operation: None,
                calls: Calls::Always,
                kind,
            });
        }
    }
    for id in &connections {
        let (status, body) = s
            .post(
                &format!("/workspaces/{mallory}/connections/{id}/sync"),
                json!({"type": "RECONCILIATION"}),
            )
            .await?;
        assert_eq!(status, 202, "{body}");
    }
    let pool = &s.pool;
    let mallory_jobs = || reconciles_of(pool, &mallory);
    eventually(
        "one of mallory's jobs to run and the other to wait",
        || async {
            let rows = mallory_jobs().await?;
            let expected = vec![
                ("queued".to_owned(), true, false),
                ("running".to_owned(), false, false),
            ];
            Ok((rows == expected).then_some(()))
        },
    )
    .await?;
    // Queued after both of Mallory's; it must not wait for Mallory's server.
    s.reconcile().await?;
    let acme = &s.ws;
    let ours = eventually("acme's reconcile to end", || async move {
        let row: Option<(String, Option<String>)> = sqlx::query_as(
            "SELECT status, error FROM sync_job
              WHERE workspace_id = $1::uuid AND job_type = 'RECONCILIATION'
                AND finished_at IS NOT NULL",
        )
        .bind(acme)
        .fetch_optional(pool)
        .await?;
        Ok(row)
    })
    .await?;
    assert_eq!(ours.0, "succeeded", "{ours:?}");
    let rows = mallory_jobs().await?;
    assert!(
        rows.iter().all(|(_, _, finished)| !finished),
        "acme's reconcile waited for a job of Mallory's: {rows:?}"
    );
    // Mallory's server recovers; its first job ends and the deferred one takes its turn.
    for sim in &slow {
        sim.clear_faults();
    }
    let both = eventually("both of mallory's jobs to end", || async {
        let rows = mallory_jobs().await?;
        Ok((rows.len() == 2 && rows.iter().all(|(_, _, finished)| *finished)).then_some(rows))
    })
    .await?;
    assert!(both.iter().all(|(_, deferred, _)| !deferred), "{both:?}");
    let claimed: Vec<(Option<String>,)> = sqlx::query_as(
        "SELECT error FROM sync_job
          WHERE workspace_id = $1::uuid AND job_type = 'RECONCILIATION' ORDER BY started_at",
    )
    .bind(&mallory)
    .fetch_all(pool)
    .await?;
    assert_eq!(claimed.len(), 2, "{claimed:?}");
    assert_eq!(
        claimed[1].0, None,
        "the deferred job ran against the recovered server"
    );
    Ok(())
}

/// `(status, deferred, finished)` of a workspace's RECONCILIATION jobs, by status.
async fn reconciles_of(pool: &PgPool, workspace: &str) -> Result<Vec<(String, bool, bool)>> {
    Ok(sqlx::query_as(
        "SELECT status, deferred_at IS NOT NULL, finished_at IS NOT NULL FROM sync_job
          WHERE workspace_id = $1::uuid AND job_type = 'RECONCILIATION' ORDER BY status",
    )
    .bind(workspace)
    .fetch_all(pool)
    .await?)
}

/// Whoever runs the server a connection names decides what it answers: an issue whose body is
/// larger than any vendor writes (6 MiB, with a title of 64 KiB) is stored cut at the caps, on
/// a character boundary, and the cuts are counted; the rest of the page is written as it came.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_oversize_title_and_body_are_stored_cut_at_their_caps() -> Result<()> {
    let s = Stack::start(20, 100).await?;
    let repo = s.repositories[0];
    let (number, native) = s.sim.model(|m| {
        let issue = m
            .repository(repo)
            .expect("repository exists")
            .issues()
            .next()
            .expect("issues");
        (issue.number, issue.database_id)
    });
    s.sim.model(|m| {
        m.update_issue(repo, number, |i| {
            // Two-byte characters after one of one byte: the cap falls inside one, so the cut
            // steps back to the character before it.
            i.body = format!("a{}", "é".repeat(3 * 1024 * 1024));
            i.title = "t".repeat(64 * 1024);
        });
    });
    s.activate().await?;
    let jobs = s.finished_jobs("INITIAL", 1).await?;
    assert_eq!(jobs[0].0, "succeeded", "{jobs:?}");
    let (title, body): (i32, i32) = sqlx::query_as(
        "SELECT octet_length(title), octet_length(body) FROM issue WHERE native_id = $1",
    )
    .bind(i64::try_from(native)?)
    .fetch_one(&s.pool)
    .await?;
    assert_eq!(title as usize, scm_mirror::upsert::MAX_TITLE_BYTES);
    assert_eq!(body as usize, scm_mirror::upsert::MAX_BODY_BYTES - 1);
    assert_eq!(
        s.count("SELECT count(*) FROM issue").await?
            + s.count("SELECT count(*) FROM pull_request").await?,
        s.upstream_items()
    );
    let metrics = reqwest::get(format!("{}/metrics", s._sync.url()))
        .await?
        .text()
        .await?;
    for column in ["title", "body"] {
        assert!(
            metrics.contains(&format!(
                r#"mirror_fields_capped_total{{table="issue",column="{column}"}}"#
            )),
            "{metrics}"
        );
    }
    Ok(())
}
