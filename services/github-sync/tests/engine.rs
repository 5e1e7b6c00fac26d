//! The sync engine against real Postgres, reading from a scripted GitHub: what each job type may
//! write and, above all, what it may never delete.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use github_sync::SourceFactory;
use github_sync::source::{
    GithubSource, IssueNode, ItemFields, Page, PullRequestNode, Reach, RepoHeader, RepoRef,
    SourceError,
};
use github_sync::sync::GithubVendor;
use lifecycle_core::partial::PathSegment;
use sqlx::PgPool;
use store::entity::{ConnectionKind, connection};
use sync_engine::consumers::queue_scheduled;
use sync_engine::{BackfillPolicy, Engine, JobOutcome, Jobs, SyncSettings};
use time::OffsetDateTime;
use uuid::Uuid;

/// A fault the scripted GitHub injects on one issues-page call.
#[derive(Debug, Clone)]
enum Fault {
    Http(u16),
    GraphQlErrorAt(usize),
    RateLimited,
    Budget,
    /// Claims there is no next page although there is.
    LyingNoNextPage,
    /// Reports a total that disagrees with the items.
    WrongTotal,
}

#[derive(Default)]
struct Script {
    issues: Vec<IssueNode>,
    /// (call index, fault) for issue pages.
    faults: Vec<(usize, Fault)>,
    calls: usize,
    /// After serving this call, a webhook mirrors a new issue into this repository row.
    webhook_during: Option<(usize, PgPool, Uuid)>,
}

struct ScriptedGithub {
    repo: RepoHeader,
    script: Mutex<Script>,
}

fn at(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000 + secs).unwrap()
}

fn issue(n: i64, updated: i64) -> IssueNode {
    IssueNode {
        fields: ItemFields {
            native_id: 1000 + n,
            node_id: format!("I_{n}"),
            number: n as i32,
            title: format!("issue {n}"),
            body: format!("body {n}"),
            state: "open".into(),
            author: Some("octocat".into()),
            locked: Some(false),
            lock_reason: None,
            comment_count: Some(n as i32 % 5),
            created_at: at(0),
            updated_at: at(updated),
            closed_at: None,
        },
        state_reason: None,
    }
}

impl ScriptedGithub {
    fn new(n: i64) -> Arc<Self> {
        Arc::new(ScriptedGithub {
            repo: RepoHeader {
                native_id: 42,
                node_id: "R_42".into(),
                owner: "acme".into(),
                name: "widgets".into(),
                archived: Some(false),
            },
            script: Mutex::new(Script {
                issues: (1..=n).map(|i| issue(i, 10)).collect(),
                ..Default::default()
            }),
        })
    }

    /// Serves one issues page from the script (no await while the script is locked).
    #[allow(clippy::type_complexity)]
    fn serve(
        &self,
        first: u32,
        after: Option<&str>,
    ) -> (
        Result<Page<IssueNode>, SourceError>,
        Option<(usize, PgPool, Uuid)>,
    ) {
        let mut s = self.script.lock().unwrap();
        let call = s.calls;
        s.calls += 1;
        let webhook = s.webhook_during.clone().filter(|(c, _, _)| *c == call);
        let fault = s
            .faults
            .iter()
            .find(|(c, _)| *c == call)
            .map(|(_, f)| f.clone());
        let start: usize = after.map_or(0, |c| c.trim_start_matches('c').parse().unwrap());
        let end = (start + first as usize).min(s.issues.len());
        let mut page = Page {
            repository: self.repo.clone(),
            nodes: s.issues[start..end].to_vec(),
            conversations: Vec::new(),
            read_at: OffsetDateTime::now_utc(),
            total_count: Some(s.issues.len() as u64),
            has_next_page: end < s.issues.len(),
            end_cursor: Some(format!("c{end}")),
            error_paths: Vec::new(),
            cost: 1,
        };
        let failed = |e| (Err(e), None);
        match fault {
            Some(Fault::Http(status)) => return failed(SourceError::Http(status)),
            Some(Fault::RateLimited) => return failed(SourceError::RateLimited),
            Some(Fault::Budget) => {
                return failed(SourceError::BudgetExhausted(
                    "remaining 10 < floor 100".into(),
                ));
            }
            Some(Fault::GraphQlErrorAt(i)) => {
                page.nodes[i].fields.comment_count = None;
                page.error_paths.push(vec![
                    PathSegment::Key("repository".into()),
                    PathSegment::Key("issues".into()),
                    PathSegment::Key("nodes".into()),
                    PathSegment::Index(i),
                    PathSegment::Key("comments".into()),
                ]);
            }
            Some(Fault::LyingNoNextPage) => page.has_next_page = false,
            Some(Fault::WrongTotal) => page.total_count = Some(s.issues.len() as u64 + 3),
            None => {}
        }
        (Ok(page), webhook)
    }

    fn with(&self, f: impl FnOnce(&mut Script)) {
        f(&mut self.script.lock().unwrap());
    }
}

#[async_trait::async_trait]
impl GithubSource for ScriptedGithub {
    async fn repositories(&self) -> Result<Reach, SourceError> {
        // Resolved with the connection's credentials: bound to its native id.
        Ok(Reach {
            repositories: vec![RepoRef {
                owner: self.repo.owner.clone(),
                name: self.repo.name.clone(),
                native_id: Some(self.repo.native_id),
            }],
            unresolved: Vec::new(),
            exclusive: true,
        })
    }

    async fn issues_page(
        &self,
        _repo: &RepoRef,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<IssueNode>, SourceError> {
        let (page, webhook) = self.serve(first, after);
        if let Some((_, pool, repository_id)) = webhook {
            sqlx::query("INSERT INTO issue (id, repository_id, native_id, node_id, number, state, upstream_created_at, upstream_updated_at) VALUES ($1, $2, 1099, 'I_99', 99, 'open', now(), now())")
                .bind(Uuid::now_v7())
                .bind(repository_id)
                .execute(&pool)
                .await
                .map_err(|e| SourceError::Other(e.to_string()))?;
        }
        page
    }

    fn own_app_id(&self) -> Option<u64> {
        None
    }

    fn installation_id(&self) -> Option<u64> {
        None
    }

    async fn repository(&self, _native_id: i64) -> Result<Option<RepoRef>, SourceError> {
        Err(SourceError::Other(
            "the scripted GitHub reads no repository by id".into(),
        ))
    }

    async fn commit_check_runs(
        &self,
        _repo: &RepoRef,
        _sha: &str,
    ) -> Result<lifecycle_core::github::checks::CommitChecksRead, SourceError> {
        Err(SourceError::Other(
            "the scripted GitHub has no checks".into(),
        ))
    }

    async fn issue(
        &self,
        _repo: &RepoRef,
        _number: i32,
    ) -> Result<Option<Page<IssueNode>>, SourceError> {
        Err(SourceError::Other(
            "the scripted GitHub reads no single issue".into(),
        ))
    }

    async fn pull_request(
        &self,
        _repo: &RepoRef,
        _number: i32,
    ) -> Result<Option<Page<PullRequestNode>>, SourceError> {
        Err(SourceError::Other(
            "the scripted GitHub reads no single pull request".into(),
        ))
    }

    async fn pull_requests_page(
        &self,
        _repo: &RepoRef,
        _first: u32,
        _after: Option<&str>,
    ) -> Result<Page<PullRequestNode>, SourceError> {
        Ok(Page {
            repository: self.repo.clone(),
            nodes: Vec::new(),
            conversations: Vec::new(),
            read_at: OffsetDateTime::now_utc(),
            total_count: Some(0),
            has_next_page: false,
            end_cursor: None,
            error_paths: Vec::new(),
            cost: 1,
        })
    }
}

/// Each job here is handed its scripted GitHub; no connection builds a reader.
struct NoFactory;

#[async_trait::async_trait]
impl SourceFactory for NoFactory {
    async fn source(&self, _: &connection::Model) -> Result<Arc<dyn GithubSource>> {
        anyhow::bail!("the test hands each job its scripted GitHub")
    }
}

struct Fixture {
    _db: testkit::TestDb,
    /// github-sync's config as its flags parse it.
    config: github_sync::Config,
    pool: PgPool,
    connection_id: Uuid,
    workspace_id: Uuid,
    provider_instance_id: Uuid,
}

async fn fixture() -> Result<Fixture> {
    let db = testkit::TestDb::new().await?;
    let pool = db.db.get_postgres_connection_pool().clone();
    let (workspace_id, provider_instance_id, connection_id) =
        (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'acme')")
        .bind(workspace_id)
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'github')")
        .bind(provider_instance_id)
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id) VALUES ($1, $2, 'github', 'active', $3)")
        .bind(connection_id).bind(workspace_id).bind(provider_instance_id).execute(&pool).await?;
    Ok(Fixture {
        config: testkit::github_sync_config(db.common_args()?),
        _db: db,
        pool,
        connection_id,
        workspace_id,
        provider_instance_id,
    })
}

impl Fixture {
    fn engine(&self, replica: &str) -> Engine<GithubVendor> {
        Engine {
            pool: self.pool.clone(),
            jobs: Jobs::new(
                ConnectionKind::Github,
                self.pool.clone(),
                replica,
                Duration::from_secs(30),
            ),
            vendor: Arc::new(GithubVendor {
                pool: self.pool.clone(),
                factory: Arc::new(NoFactory),
            }),
            settings: SyncSettings {
                page_size: 10,
                backfill: BackfillPolicy {
                    max_passes: std::num::NonZeroU32::new(3),
                    first_backoff: Duration::from_millis(10),
                    max_backoff: Duration::from_millis(40),
                },
                // The rest as github-sync's flags default them.
                ..self.config.sync.sync_settings()
            },
        }
    }

    async fn queue(&self, job_type: &str) -> Result<Uuid> {
        self.queue_with(job_type, "manual").await
    }

    async fn queue_with(&self, job_type: &str, trigger: &str) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO sync_job (id, connection_id, workspace_id, kind, job_type, trigger) VALUES ($1, $2, $3, 'github', $4, $5)")
            .bind(id).bind(self.connection_id).bind(self.workspace_id).bind(job_type).bind(trigger).execute(&self.pool).await?;
        Ok(id)
    }

    async fn run(&self, job_type: &str, source: Arc<ScriptedGithub>) -> Result<JobOutcome> {
        self.run_with(job_type, "manual", source).await
    }

    async fn run_with(
        &self,
        job_type: &str,
        trigger: &str,
        source: Arc<ScriptedGithub>,
    ) -> Result<JobOutcome> {
        let id = self.queue_with(job_type, trigger).await?;
        let engine = self.engine("replica-a");
        let job = engine.jobs.claim(id).await?.job().expect("claimable");
        Ok(engine.run(&job, self.provider_instance_id, source).await?)
    }

    async fn live(&self) -> Result<i64> {
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM issue WHERE deleted_at IS NULL")
            .fetch_one(&self.pool)
            .await?;
        Ok(n)
    }

    async fn tombstoned(&self) -> Result<Vec<i64>> {
        let rows: Vec<(i64,)> = sqlx::query_as(
            "SELECT native_id FROM issue WHERE deleted_at IS NOT NULL ORDER BY native_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(n,)| n).collect())
    }
}

#[tokio::test]
async fn initial_mirrors_every_item_with_progress_and_never_tombstones() -> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(35);
    assert_eq!(f.run("INITIAL", gh.clone()).await?, JobOutcome::Succeeded);
    assert_eq!(f.live().await?, 35);
    let (done, status): (i64, String) =
        sqlx::query_as("SELECT progress_done, status FROM sync_job")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!((done, status.as_str()), (35, "succeeded"));
    let (title, comments): (String, Option<i32>) =
        sqlx::query_as("SELECT title, comment_count FROM issue WHERE number = 7")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!((title.as_str(), comments), ("issue 7", Some(2)));

    // Upstream deletions are not inferred by INITIAL.
    gh.with(|s| s.issues.truncate(20));
    assert_eq!(f.run("INITIAL", gh).await?, JobOutcome::Succeeded);
    assert!(f.tombstoned().await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_clean_reconcile_tombstones_exactly_the_vanished_and_a_reappearance_restores()
-> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(30);
    f.run("INITIAL", gh.clone()).await?;
    gh.with(|s| {
        s.issues
            .retain(|i| i.fields.number != 4 && i.fields.number != 17)
    });
    assert_eq!(
        f.run("RECONCILIATION", gh.clone()).await?,
        JobOutcome::Succeeded
    );
    assert_eq!(f.tombstoned().await?, vec![1004, 1017]);
    let (title,): (Option<String>,) =
        sqlx::query_as("SELECT title FROM issue WHERE native_id = 1004")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(title, None, "a tombstone clears content");

    gh.with(|s| s.issues.push(issue(4, 10)));
    f.run("RECONCILIATION", gh).await?;
    assert_eq!(
        f.tombstoned().await?,
        vec![1017],
        "the reappeared item is restored"
    );
    Ok(())
}

#[tokio::test]
async fn fails_closed_for_every_injected_fault() -> Result<()> {
    let faults = [
        Fault::Http(502),
        Fault::GraphQlErrorAt(3),
        Fault::RateLimited,
        Fault::LyingNoNextPage,
        Fault::WrongTotal,
    ];
    for fault in faults {
        let f = fixture().await?;
        let gh = ScriptedGithub::new(30);
        f.run("INITIAL", gh.clone()).await?;
        gh.with(|s| {
            s.issues.retain(|i| i.fields.number != 9);
            s.faults = vec![(s.calls + 1, fault.clone())];
        });
        f.run("RECONCILIATION", gh).await?;
        assert!(
            f.tombstoned().await?.is_empty(),
            "{fault:?} must tombstone nothing"
        );
        let (n,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM connection_activity WHERE activity = 'not_reconciled'",
        )
        .fetch_one(&f.pool)
        .await?;
        assert_eq!(n, 1, "{fault:?}: the skipped sweep is recorded");
    }
    Ok(())
}

#[tokio::test]
async fn an_unknown_count_keeps_the_stored_one() -> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(10);
    f.run("INITIAL", gh.clone()).await?;
    gh.with(|s| {
        s.issues[3].fields.updated_at = at(20);
        s.issues[3].fields.title = "renamed".into();
        s.faults = vec![(s.calls, Fault::GraphQlErrorAt(3))];
    });
    f.run("INITIAL", gh).await?;
    let (title, comments): (String, Option<i32>) =
        sqlx::query_as("SELECT title, comment_count FROM issue WHERE number = 4")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(title, "renamed");
    assert_eq!(
        comments,
        Some(4),
        "unknown is not zero and keeps the stored count"
    );
    Ok(())
}

#[tokio::test]
async fn an_older_payload_changes_nothing() -> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(5);
    gh.with(|s| s.issues[0].fields.updated_at = at(50));
    f.run("INITIAL", gh.clone()).await?;
    gh.with(|s| {
        s.issues[0].fields.updated_at = at(40);
        s.issues[0].fields.title = "stale".into();
    });
    f.run("INITIAL", gh).await?;
    let (title,): (String,) = sqlx::query_as("SELECT title FROM issue WHERE number = 1")
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(title, "issue 1");
    Ok(())
}

#[tokio::test]
async fn budget_exhaustion_ends_the_job_with_its_reason_and_tombstones_nothing() -> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(30);
    f.run("INITIAL", gh.clone()).await?;
    gh.with(|s| {
        s.issues.truncate(25);
        s.faults = vec![(s.calls + 1, Fault::Budget)];
    });
    let outcome = f.run("RECONCILIATION", gh).await?;
    assert!(
        matches!(&outcome, JobOutcome::Failed(r) if r.contains("budget")),
        "{outcome:?}"
    );
    assert!(f.tombstoned().await?.is_empty());
    let (status, error): (String, Option<String>) =
        sqlx::query_as("SELECT status, error FROM sync_job WHERE job_type = 'RECONCILIATION'")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(status, "failed");
    assert!(error.unwrap().contains("budget"));
    Ok(())
}

#[tokio::test]
async fn a_row_created_during_the_pass_survives_the_sweep() -> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(30);
    f.run("INITIAL", gh.clone()).await?;
    let (repo_id,): (Uuid,) = sqlx::query_as("SELECT id FROM repository")
        .fetch_one(&f.pool)
        .await?;
    // A webhook mirrors issue 99 while the reconcile reads page 2; the listing never shows it,
    // because upstream created it after those pages were read.
    let pool = f.pool.clone();
    gh.with(move |s| s.webhook_during = Some((s.calls + 1, pool, repo_id)));
    f.run("RECONCILIATION", gh).await?;
    assert!(
        f.tombstoned().await?.is_empty(),
        "the row written during the pass was no candidate"
    );
    assert_eq!(f.live().await?, 31);
    Ok(())
}

#[tokio::test]
async fn a_job_runs_on_one_replica_only_and_a_canceled_job_stops() -> Result<()> {
    let f = fixture().await?;
    let id = f.queue("BACKFILL").await?;
    let a = f.engine("replica-a");
    let b = f.engine("replica-b");
    let job = a.jobs.claim(id).await?.job().expect("a claims");
    assert!(
        b.jobs.claim(id).await?.job().is_none(),
        "b cannot claim a live claim"
    );
    sqlx::query("UPDATE sync_job SET status = 'canceled' WHERE id = $1")
        .bind(id)
        .execute(&f.pool)
        .await?;
    let outcome = a
        .run(&job, f.provider_instance_id, ScriptedGithub::new(30))
        .await?;
    assert_eq!(outcome, JobOutcome::Canceled);
    assert_eq!(f.live().await?, 0, "canceled before its first page");

    // A claim whose lease lapsed (its replica died) is taken over.
    let id = f.queue("BACKFILL").await?;
    let short = Engine {
        jobs: Jobs::new(
            ConnectionKind::Github,
            f.pool.clone(),
            "replica-dead",
            Duration::from_millis(200),
        ),
        ..f.engine("x")
    };
    short.jobs.claim(id).await?.job().expect("claimed");
    assert!(b.jobs.claim(id).await?.job().is_none());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        b.jobs.claim(id).await?.job().is_some(),
        "taken over after the lease"
    );
    Ok(())
}

#[tokio::test]
async fn the_scheduled_reconcile_skips_a_repository_reconciled_within_the_cooldown() -> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(20);
    f.run("INITIAL", gh.clone()).await?;
    let (stamp,): (Option<OffsetDateTime>,) =
        sqlx::query_as("SELECT reconciled_at FROM repository")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(stamp, None, "INITIAL is no reconcile");
    f.run("RECONCILIATION", gh.clone()).await?;
    let (stamp,): (Option<OffsetDateTime>,) =
        sqlx::query_as("SELECT reconciled_at FROM repository")
            .fetch_one(&f.pool)
            .await?;
    assert!(stamp.is_some(), "a complete reconcile is stamped");

    gh.with(|s| s.issues.retain(|i| i.fields.number != 5));
    let calls = gh.script.lock().unwrap().calls;
    f.run_with("RECONCILIATION", "scheduled", gh.clone())
        .await?;
    assert_eq!(
        gh.script.lock().unwrap().calls,
        calls,
        "the scheduled pass read nothing"
    );
    assert!(f.tombstoned().await?.is_empty());

    // An operator's reconcile is not held back by the cooldown.
    f.run_with("RECONCILIATION", "manual", gh.clone()).await?;
    assert_eq!(f.tombstoned().await?, vec![1005]);

    // An incomplete reconcile does not stamp: after the cooldown lapses, it is the old stamp.
    sqlx::query("UPDATE repository SET reconciled_at = now() - interval '13 hours'")
        .execute(&f.pool)
        .await?;
    gh.with(|s| s.faults = vec![(s.calls, Fault::Http(502))]);
    f.run_with("RECONCILIATION", "scheduled", gh).await?;
    let (old,): (bool,) =
        sqlx::query_as("SELECT reconciled_at < now() - interval '12 hours' FROM repository")
            .fetch_one(&f.pool)
            .await?;
    assert!(old, "a failed pass leaves the stamp where it was");
    Ok(())
}

#[tokio::test]
async fn a_schedule_queues_one_job_per_active_connection_per_due_instant() -> Result<()> {
    let f = fixture().await?;
    let db = f._db.db.clone();
    let due = OffsetDateTime::from_unix_timestamp(1_800_000_000)?;
    let queued = queue_scheduled(
        &db,
        ConnectionKind::Github,
        store::entity::JobType::Backfill,
        due,
    )
    .await?;
    assert_eq!(queued, 1);
    // Another replica, or a retried run, of the same instant queues nothing more.
    let again = queue_scheduled(
        &db,
        ConnectionKind::Github,
        store::entity::JobType::Backfill,
        due,
    )
    .await?;
    assert_eq!(again, 0);
    let later = due + time::Duration::days(1);
    // While that job still waits, a later instant adds nothing: one job per type waits.
    assert_eq!(
        queue_scheduled(
            &db,
            ConnectionKind::Github,
            store::entity::JobType::Backfill,
            later
        )
        .await?,
        0
    );
    // Once it ran, the later instant queues its own.
    sqlx::query("UPDATE sync_job SET status = 'succeeded', finished_at = now()")
        .execute(&f.pool)
        .await?;
    let later = later + time::Duration::days(1);
    assert_eq!(
        queue_scheduled(
            &db,
            ConnectionKind::Github,
            store::entity::JobType::Backfill,
            later
        )
        .await?,
        1
    );
    let (jobs, outbox): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM sync_job WHERE job_type = 'BACKFILL' AND trigger = 'scheduled'),
                (SELECT count(*) FROM outbox WHERE subject LIKE 'jobs.github.%.backfill')",
    )
    .fetch_one(&f.pool)
    .await?;
    assert_eq!((jobs, outbox), (2, 2), "each job commits with its message");

    // A paused connection gets none.
    sqlx::query("UPDATE connection SET status = 'paused'")
        .execute(&f.pool)
        .await?;
    let paused = queue_scheduled(
        &db,
        ConnectionKind::Github,
        store::entity::JobType::Backfill,
        later + time::Duration::days(1),
    )
    .await?;
    assert_eq!(paused, 0);
    Ok(())
}

/// Passes the job recorded, and its incomplete passes' reasons from the activity log.
async fn passes(f: &Fixture) -> Result<(i32, Vec<String>)> {
    let (passes,): (i32,) =
        sqlx::query_as("SELECT passes FROM sync_job WHERE job_type = 'BACKFILL'")
            .fetch_one(&f.pool)
            .await?;
    let reasons: Vec<(String,)> = sqlx::query_as(
        "SELECT detail->>'reason' FROM connection_activity WHERE activity = 'backfill_pass_incomplete' ORDER BY created_at",
    )
    .fetch_all(&f.pool)
    .await?;
    Ok((passes, reasons.into_iter().map(|(r,)| r).collect()))
}

#[tokio::test]
async fn a_manual_backfill_passes_again_until_a_pass_is_complete() -> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(30);
    // The first pass's second page disagrees on the total; the second pass is clean.
    gh.with(|s| s.faults = vec![(1, Fault::WrongTotal)]);
    assert_eq!(f.run("BACKFILL", gh.clone()).await?, JobOutcome::Succeeded);
    let (n, reasons) = passes(&f).await?;
    assert_eq!(n, 2, "{reasons:?}");
    assert_eq!(reasons.len(), 1);
    assert_eq!(f.live().await?, 30);
    let (done,): (i64,) = sqlx::query_as("SELECT progress_done FROM sync_job")
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(done, 30, "progress counts the last pass");
    Ok(())
}

#[tokio::test]
async fn a_manual_backfill_passes_again_after_github_fails() -> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(30);
    gh.with(|s| s.faults = vec![(0, Fault::Http(502))]);
    assert_eq!(f.run("BACKFILL", gh).await?, JobOutcome::Succeeded);
    let (n, reasons) = passes(&f).await?;
    assert_eq!(n, 2);
    assert!(reasons[0].contains("HTTP 502"), "{reasons:?}");
    Ok(())
}

#[tokio::test]
async fn a_manual_backfill_stops_at_once_when_the_budget_is_spent() -> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(30);
    gh.with(|s| s.faults = vec![(1, Fault::Budget)]);
    let outcome = f.run("BACKFILL", gh).await?;
    assert!(
        matches!(&outcome, JobOutcome::Failed(r) if r.contains("budget")),
        "{outcome:?}"
    );
    assert_eq!(passes(&f).await?.0, 1, "no pass spends what is left");
    Ok(())
}

#[tokio::test]
async fn a_manual_backfill_that_stays_incomplete_fails_after_its_passes() -> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(30);
    gh.with(|s| s.faults = (0..100).map(|c| (c, Fault::LyingNoNextPage)).collect());
    let outcome = f.run("BACKFILL", gh).await?;
    assert!(
        matches!(&outcome, JobOutcome::Failed(r) if r.contains("after 3 passes")),
        "{outcome:?}"
    );
    assert_eq!(passes(&f).await?.0, 3);
    Ok(())
}

#[tokio::test]
async fn a_scheduled_backfill_takes_one_pass() -> Result<()> {
    let f = fixture().await?;
    let gh = ScriptedGithub::new(30);
    gh.with(|s| s.faults = vec![(1, Fault::WrongTotal)]);
    assert_eq!(
        f.run_with("BACKFILL", "scheduled", gh).await?,
        JobOutcome::Succeeded
    );
    assert_eq!(passes(&f).await?.0, 1, "the next cycle picks up the rest");
    Ok(())
}
