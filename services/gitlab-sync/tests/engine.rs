//! gitlab-sync's jobs against real Postgres, reading the simulated GitLab over HTTP through the
//! real gitlab-client: what each job type writes and, above all, what it may never delete.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use gitlab_client::RetryPolicy;
use gitlab_sync::source::ClientFactory;
use gitlab_sync::sync::GitlabVendor;
use sea_orm::EntityTrait;
use sqlx::PgPool;
use store::entity::connection;
use sync_engine::consumers::JobHandler;
use sync_engine::{Engine, JobOutcome, Vendor};
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::gitlab::{
    Fault, GitlabFault, GitlabSim, Model, NewIssue, NewMergeRequest, NoteOn, ops,
};

const TOKEN: &str = "glpat-acme";

fn at(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000 + secs).unwrap()
}

struct Fixture {
    db: testkit::TestDb,
    config: gitlab_sync::Config,
    pool: PgPool,
    sim: GitlabSim,
    /// The simulated project `top/app`.
    project: u64,
    connection_id: Uuid,
    workspace_id: Uuid,
    provider_instance_id: Uuid,
}

/// A GitLab connection of workspace `acme` monitoring `top/app` (by native id), with `issues`
/// issues and `merge_requests` merge requests upstream, updated in creation order.
async fn fixture(issues: i64, merge_requests: i64) -> Result<Fixture> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut model = Model::default();
    model.add_token(TOKEN);
    let top = model.add_group(None, "top");
    let project = model.add_project(top, "app");
    for n in 1..=issues {
        model.add_issue(
            project,
            NewIssue {
                title: format!("issue {n}"),
                updated_at: at(n),
            },
        );
    }
    for n in 1..=merge_requests {
        model.add_merge_request(
            project,
            NewMergeRequest {
                title: format!("mr {n}"),
                updated_at: at(n),
            },
        );
    }
    let sim = GitlabSim::start(model).await?;
    let db = testkit::TestDb::new().await?;
    let pool = db.db.get_postgres_connection_pool().clone();
    let config: gitlab_sync::Config = testkit::config(
        db.common_args()?,
        &[
            format!("--secret-key={}", testkit::secret_key()),
            "--reconcile-cron=off".to_owned(),
            "--backfill-cron=off".to_owned(),
            "--gitlab-backfill-batch-pages=1".to_owned(),
        ],
    )?;
    let (workspace_id, provider_instance_id) = (Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'acme')")
        .bind(workspace_id)
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)")
        .bind(provider_instance_id)
        .bind(sim.base_url())
        .execute(&pool)
        .await?;
    let mut f = Fixture {
        db,
        config,
        pool,
        sim,
        project,
        connection_id: Uuid::nil(),
        workspace_id,
        provider_instance_id,
    };
    f.connection_id = f
        .connection(workspace_id, "active", TOKEN, &[("top", "app", project)])
        .await?;
    Ok(f)
}

impl Fixture {
    /// A GitLab connection of `workspace` with `token`, monitoring `projects`.
    async fn connection(
        &self,
        workspace: Uuid,
        status: &str,
        token: &str,
        projects: &[(&str, &str, u64)],
    ) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id, settings) VALUES ($1, $2, 'gitlab', $3, $4, $5)")
            .bind(id)
            .bind(workspace)
            .bind(status)
            .bind(self.provider_instance_id)
            .bind(serde_json::json!({ "group": "top" }))
            .execute(&self.pool)
            .await?;
        let ring = store::secrets::Keyring::parse(&self.config.secret_key)?;
        store::secrets::put(&self.db.db, &ring, id, "token", token.as_bytes()).await?;
        for (owner, name, native_id) in projects {
            sqlx::query("INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id) VALUES ($1, $2, $3, $4, $5, $6)")
                .bind(Uuid::now_v7())
                .bind(workspace)
                .bind(id)
                .bind(owner)
                .bind(name)
                .bind(*native_id as i64)
                .execute(&self.pool)
                .await?;
        }
        Ok(id)
    }

    fn vendor(&self) -> GitlabVendor {
        GitlabVendor {
            pool: self.pool.clone(),
            factory: ClientFactory {
                db: self.db.db.clone(),
                secret_key: store::secrets::Keyring::parse(&self.config.secret_key).unwrap(),
                request_timeout: self.config.sync.request_timeout(),
                egress: self.config.common.egress.clone(),
                // Persistent faults stay faults; a retry waits milliseconds, not seconds.
                retry: RetryPolicy {
                    max_retries: 1,
                    min_delay: Duration::from_millis(5),
                    max_delay: Duration::from_millis(10),
                    max_retry_after: Duration::from_secs(1),
                    deadline: vendor_http::DEFAULT_CALL_DEADLINE,
                },
            },
            backfill: self.config.backfill_batches(),
            activator: None,
        }
    }

    fn engine(&self, replica: &str) -> Engine<GitlabVendor> {
        let mut settings = self.config.sync.sync_settings();
        // Several pages per listing with few items.
        settings.page_size = 10;
        Engine::new(
            Arc::new(self.vendor()),
            self.pool.clone(),
            replica,
            Duration::from_secs(30),
            settings,
        )
    }

    async fn queue(&self, connection_id: Uuid, job_type: &str, trigger: &str) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO sync_job (id, connection_id, workspace_id, kind, job_type, trigger) VALUES ($1, $2, $3, 'gitlab', $4, $5)")
            .bind(id)
            .bind(connection_id)
            .bind(self.workspace_id)
            .bind(job_type)
            .bind(trigger)
            .execute(&self.pool)
            .await?;
        Ok(id)
    }

    async fn run(&self, job_type: &str) -> Result<JobOutcome> {
        self.run_on(self.connection_id, job_type, "manual").await
    }

    async fn run_on(
        &self,
        connection_id: Uuid,
        job_type: &str,
        trigger: &str,
    ) -> Result<JobOutcome> {
        let id = self.queue(connection_id, job_type, trigger).await?;
        let engine = self.engine("replica-a");
        let job = engine.jobs.claim(id).await?.job().expect("claimable");
        let conn = connection::Entity::find_by_id(connection_id)
            .one(&self.db.db)
            .await?
            .expect("connection");
        let source = engine.vendor.source(&conn).await?;
        Ok(engine.run(&job, self.provider_instance_id, source).await?)
    }

    async fn numbers(&self, table: &str, tombstoned: bool) -> Result<Vec<i32>> {
        let sql = format!(
            "SELECT number FROM {table} WHERE (deleted_at IS NOT NULL) = $1 ORDER BY number"
        );
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(tombstoned)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Deletes issue `iid` upstream.
    fn delete_issue(&self, iid: u64) {
        let project = self.project;
        self.sim.model(|m| m.issues.remove(&(project, iid)));
    }
}

#[tokio::test]
async fn initial_mirrors_every_item_and_never_tombstones() -> Result<()> {
    let f = fixture(25, 12).await?;
    f.sim.model(|m| {
        m.add_note(
            NoteOn::MergeRequest(f.project, 27),
            "looks good",
            false,
            None,
        );
        m.add_note(NoteOn::MergeRequest(f.project, 27), "merged", true, None);
    });
    assert_eq!(f.run("INITIAL").await?, JobOutcome::Succeeded);
    assert_eq!(
        f.numbers("issue", false).await?,
        (1..=25).collect::<Vec<_>>()
    );
    assert_eq!(f.numbers("pull_request", false).await?.len(), 12);
    let (title, state, notes, head): (String, String, Option<i32>, Option<String>) =
        sqlx::query_as(
            "SELECT title, state, comment_count, head_sha FROM pull_request WHERE number = 27",
        )
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(
        (title.as_str(), state.as_str(), notes, head),
        ("mr 2", "open", Some(1), Some(format!("{:040x}", 27)))
    );
    let (owner, name, native_id): (String, String, i64) =
        sqlx::query_as("SELECT owner, name, native_id FROM repository")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(
        (owner.as_str(), name.as_str(), native_id),
        ("top", "app", f.project as i64)
    );

    // INITIAL infers no deletion.
    f.delete_issue(4);
    assert_eq!(f.run("INITIAL").await?, JobOutcome::Succeeded);
    assert!(f.numbers("issue", true).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_clean_reconcile_tombstones_exactly_the_vanished_and_a_reappearance_restores()
-> Result<()> {
    let f = fixture(30, 3).await?;
    f.run("INITIAL").await?;
    let project = f.project;
    let four = f
        .sim
        .model(|m| m.issues.remove(&(project, 4)))
        .expect("issue 4");
    f.delete_issue(17);
    assert_eq!(f.run("RECONCILIATION").await?, JobOutcome::Succeeded);
    assert_eq!(f.numbers("issue", true).await?, vec![4, 17]);
    let title: Option<String> = sqlx::query_scalar("SELECT title FROM issue WHERE number = 4")
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(title, None, "a tombstone clears content");

    // Issue 4 shows up again upstream, edited: the next sync restores it.
    f.sim.model(|m| {
        let mut again = four.clone();
        again.title = "issue 4 again".into();
        again.updated_at = at(100);
        m.issues.insert((project, 4), again);
    });
    f.run("RECONCILIATION").await?;
    assert_eq!(
        f.numbers("issue", true).await?,
        vec![17],
        "the reappeared item is restored"
    );
    let title: Option<String> = sqlx::query_scalar("SELECT title FROM issue WHERE number = 4")
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(title.as_deref(), Some("issue 4 again"));
    Ok(())
}

/// A fault on the reconcile's issue listing, armed after INITIAL.
fn faults(project: u64) -> Vec<(&'static str, Fault<GitlabFault>)> {
    let issues = ops::PROJECT_ISSUES;
    vec![
        (
            "short page",
            Fault::nth(issues, 2, GitlabFault::ShortPage { keep: 4 }),
        ),
        (
            "lying hasNextPage",
            Fault::nth(issues, 2, GitlabFault::HasNextPage(false)),
        ),
        (
            "wrong count",
            Fault::nth(issues, 2, GitlabFault::TotalOffBy(1)),
        ),
        (
            "null node with a field error",
            Fault::nth(
                issues,
                2,
                GitlabFault::FieldError {
                    path: "project.issues.nodes.3".into(),
                    message: "Internal server error".into(),
                },
            ),
        ),
        (
            "429",
            Fault {
                calls: vendor_sim::gitlab::Calls::From(2),
                ..Fault::nth(issues, 2, GitlabFault::TooManyRequests { retry_after: 0 })
            },
        ),
        (
            "5xx",
            Fault {
                calls: vendor_sim::gitlab::Calls::From(2),
                ..Fault::nth(issues, 2, GitlabFault::Status(502))
            },
        ),
        (
            "count changing mid-listing",
            Fault::nth(
                issues,
                2,
                GitlabFault::mutate(move |m| {
                    m.add_issue(
                        project,
                        NewIssue {
                            title: "late".into(),
                            updated_at: at(1000),
                        },
                    );
                }),
            ),
        ),
        (
            "ids repeated by shifted offsets",
            Fault::nth(
                issues,
                2,
                GitlabFault::mutate(move |m| {
                    // Sorts first: every later offset shifts by one, repeating an id.
                    let iid = m.add_issue(
                        project,
                        NewIssue {
                            title: "early".into(),
                            updated_at: at(0),
                        },
                    );
                    // Keep the count unchanged, so only the repetition can tell.
                    m.issues.remove(&(project, 30));
                    let _ = iid;
                }),
            ),
        ),
        (
            "rows deleted mid-listing",
            Fault::nth(
                issues,
                2,
                GitlabFault::mutate(move |m| {
                    m.issues.remove(&(project, 1));
                    m.issues.remove(&(project, 2));
                }),
            ),
        ),
    ]
}

#[tokio::test]
async fn every_fault_tombstones_nothing_and_the_clean_pass_after_it_does() -> Result<()> {
    let project_probe = fixture(0, 0).await?.project;
    for (name, fault) in faults(project_probe) {
        let f = fixture(30, 2).await?;
        assert_eq!(f.project, project_probe, "fixtures number projects alike");
        f.run("INITIAL").await?;
        f.delete_issue(9);
        f.sim.inject(fault);
        f.run("RECONCILIATION").await?;
        assert!(
            f.numbers("issue", true).await?.is_empty(),
            "{name}: a listing in doubt tombstones nothing"
        );
        let (not_reconciled,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM connection_activity WHERE activity = 'not_reconciled'",
        )
        .fetch_one(&f.pool)
        .await?;
        assert!(not_reconciled >= 1, "{name}: the skipped sweep is recorded");
        // The same reconcile without the fault removes exactly what vanished.
        f.sim.clear_faults();
        f.run("RECONCILIATION").await?;
        let gone: Vec<i32> = f.sim.model(|m| {
            (1..=31)
                .filter(|iid| !m.issues.contains_key(&(project_probe, *iid as u64)))
                .collect()
        });
        let tombstoned = f.numbers("issue", true).await?;
        assert!(tombstoned.contains(&9), "{name}: {tombstoned:?}");
        assert!(
            tombstoned.iter().all(|n| gone.contains(n)),
            "{name}: only vanished items: {tombstoned:?} of {gone:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn rows_mirrored_during_a_reconcile_survive_it() -> Result<()> {
    let f = fixture(30, 0).await?;
    f.run("INITIAL").await?;
    f.delete_issue(9);
    let (repository_id,): (Uuid,) = sqlx::query_as("SELECT id FROM repository")
        .fetch_one(&f.pool)
        .await?;
    // A hook mirrors issue 99 while the listing is on its second page; it is not upstream yet
    // as far as this listing can tell.
    let pool = f.pool.clone();
    f.sim.inject(Fault::nth(
        ops::PROJECT_ISSUES,
        2,
        GitlabFault::mutate(move |_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                sqlx::query("INSERT INTO issue (id, repository_id, native_id, node_id, number, state, upstream_created_at, upstream_updated_at) VALUES ($1, $2, 990099, 'gid://gitlab/Issue/990099', 99, 'open', now(), now())")
                    .bind(Uuid::now_v7())
                    .bind(repository_id)
                    .execute(&pool)
                    .await
                    .expect("the hook's row is written");
            });
        }),
    ));
    f.sim.inject(Fault::nth(
        ops::PROJECT_ISSUES,
        3,
        GitlabFault::Delay(Duration::from_millis(500)),
    ));
    assert_eq!(f.run("RECONCILIATION").await?, JobOutcome::Succeeded);
    assert_eq!(f.numbers("issue", true).await?, vec![9]);
    assert!(f.numbers("issue", false).await?.contains(&99));
    Ok(())
}

#[tokio::test]
async fn an_error_at_one_notes_count_keeps_its_stored_count_and_the_siblings_take_theirs()
-> Result<()> {
    let f = fixture(0, 4).await?;
    f.run("INITIAL").await?;
    let counts = |f: &Fixture| {
        let pool = f.pool.clone();
        async move {
            let rows: Vec<(i32, Option<i32>)> =
                sqlx::query_as("SELECT number, comment_count FROM pull_request ORDER BY number")
                    .fetch_all(&pool)
                    .await?;
            anyhow::Ok(rows)
        }
    };
    assert!(counts(&f).await?.iter().all(|(_, c)| *c == Some(0)));
    // Every merge request gains two notes and a newer version, in the same order.
    let project = f.project;
    f.sim.model(|m| {
        for iid in 1..=4 {
            m.add_note(NoteOn::MergeRequest(project, iid), "a", false, None);
            m.add_note(NoteOn::MergeRequest(project, iid), "b", false, None);
            m.merge_requests
                .get_mut(&(project, iid))
                .unwrap()
                .updated_at = at(100 + iid as i64);
        }
    });
    f.sim.inject(Fault::nth(
        ops::PROJECT_MERGE_REQUESTS,
        1,
        GitlabFault::FieldError {
            path: "project.mergeRequests.nodes.1.userNotesCount".into(),
            message: "Internal server error".into(),
        },
    ));
    f.run("RECONCILIATION").await?;
    assert_eq!(
        counts(&f).await?,
        vec![(1, Some(2)), (2, Some(0)), (3, Some(2)), (4, Some(2))],
        "the errored count keeps its stored value; its siblings take theirs"
    );
    let (title,): (String,) = sqlx::query_as("SELECT title FROM pull_request WHERE number = 2")
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(title, "mr 2", "the rest of the errored node is written");
    Ok(())
}

async fn backfill_state(pool: &PgPool) -> Result<Vec<(String, bool, Option<String>)>> {
    Ok(sqlx::query_as(
        "SELECT r.name, s.backfill_pending, s.backfill_cursor FROM listing_state s
           JOIN repository r ON s.scope_kind = 'repository' AND r.id = s.scope_id
          WHERE s.class = 'issue' ORDER BY r.name",
    )
    .fetch_all(pool)
    .await?)
}

#[tokio::test]
async fn a_backfill_request_takes_one_batch_per_pending_project_and_the_cycle_drains_the_rest()
-> Result<()> {
    let f = fixture(35, 0).await?;
    // A second monitored project.
    let top = f.sim.model(|m| m.group_by_path("top").unwrap());
    let lib = f.sim.model(|m| {
        let lib = m.add_project(top, "lib");
        for n in 1..=15 {
            m.add_issue(
                lib,
                NewIssue {
                    title: format!("lib {n}"),
                    updated_at: at(n),
                },
            );
        }
        lib
    });
    sqlx::query("INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id) VALUES ($1, $2, $3, 'top', 'lib', $4)")
        .bind(Uuid::now_v7())
        .bind(f.workspace_id)
        .bind(f.connection_id)
        .bind(lib as i64)
        .execute(&f.pool)
        .await?;
    let mirrored = |f: &Fixture| {
        let pool = f.pool.clone();
        async move {
            let rows: Vec<(String, i64)> = sqlx::query_as(
                "SELECT r.name, count(i.id) FROM repository r LEFT JOIN issue i ON i.repository_id = r.id
                  GROUP BY r.name ORDER BY r.name",
            )
            .fetch_all(&pool)
            .await?;
            anyhow::Ok(rows)
        }
    };

    // Batches of one page of 10.
    assert_eq!(f.run("BACKFILL").await?, JobOutcome::Succeeded);
    assert_eq!(
        mirrored(&f).await?,
        vec![("app".into(), 10), ("lib".into(), 10)]
    );
    assert_eq!(
        backfill_state(&f.pool).await?,
        vec![
            ("app".into(), true, Some("10".into())),
            ("lib".into(), true, Some("10".into()))
        ]
    );
    assert_eq!(f.run("BACKFILL").await?, JobOutcome::Succeeded);
    assert_eq!(
        mirrored(&f).await?,
        vec![("app".into(), 20), ("lib".into(), 15)]
    );
    assert_eq!(
        backfill_state(&f.pool).await?,
        vec![
            ("app".into(), true, Some("20".into())),
            ("lib".into(), false, None)
        ]
    );

    // The scheduled cycle leaves a project whose batch is within the cooldown alone...
    let calls = f.sim.calls(ops::PROJECT_ISSUES);
    assert_eq!(
        f.run_on(f.connection_id, "BACKFILL", "scheduled").await?,
        JobOutcome::Succeeded
    );
    assert_eq!(
        f.sim.calls(ops::PROJECT_ISSUES),
        calls,
        "nothing is read while cooling"
    );
    // ...and drains the rest once it has cooled.
    sqlx::query("UPDATE listing_state SET backfill_batch_at = now() - interval '6 minutes'")
        .execute(&f.pool)
        .await?;
    assert_eq!(
        f.run_on(f.connection_id, "BACKFILL", "scheduled").await?,
        JobOutcome::Succeeded
    );
    assert_eq!(
        mirrored(&f).await?,
        vec![("app".into(), 35), ("lib".into(), 15)]
    );
    assert_eq!(
        backfill_state(&f.pool).await?,
        vec![("app".into(), false, None), ("lib".into(), false, None)]
    );
    // Nothing is pending: the cycle reads nothing.
    let calls = f.sim.calls(ops::PROJECT_ISSUES);
    sqlx::query("UPDATE listing_state SET backfill_batch_at = now() - interval '6 minutes'")
        .execute(&f.pool)
        .await?;
    f.run_on(f.connection_id, "BACKFILL", "scheduled").await?;
    assert_eq!(f.sim.calls(ops::PROJECT_ISSUES), calls);
    Ok(())
}

async fn watermark(pool: &PgPool) -> Result<Option<OffsetDateTime>> {
    Ok(
        sqlx::query_scalar("SELECT watermark FROM listing_state WHERE class = 'issue'")
            .fetch_optional(pool)
            .await?
            .flatten(),
    )
}

#[tokio::test]
async fn a_cooling_scheduled_reconcile_reads_from_the_watermark_and_sweeps_nothing() -> Result<()> {
    let f = fixture(30, 0).await?;
    assert_eq!(f.run("RECONCILIATION").await?, JobOutcome::Succeeded);
    assert_eq!(watermark(&f.pool).await?, Some(at(30)));

    // A missed hook: issue 5 changed upstream; issue 6 vanished.
    let project = f.project;
    f.sim.model(|m| {
        let issue = m.issues.get_mut(&(project, 5)).unwrap();
        issue.title = "renamed".into();
        issue.updated_at = at(40);
    });
    f.delete_issue(6);
    let calls = f.sim.calls(ops::PROJECT_ISSUES);
    assert_eq!(
        f.run_on(f.connection_id, "RECONCILIATION", "scheduled")
            .await?,
        JobOutcome::Succeeded
    );
    assert_eq!(
        f.sim.calls(ops::PROJECT_ISSUES) - calls,
        1,
        "one page: only what changed since the watermark"
    );
    let (title,): (String,) = sqlx::query_as("SELECT title FROM issue WHERE number = 5")
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(title, "renamed");
    assert!(
        f.numbers("issue", true).await?.is_empty(),
        "a filtered listing never sweeps"
    );
    assert_eq!(watermark(&f.pool).await?, Some(at(40)));

    // A filtered pass that fails on its second page leaves the watermark where it was, though
    // its first page was written.
    f.sim.model(|m| {
        for iid in 11..=30 {
            m.issues.get_mut(&(project, iid)).unwrap().updated_at = at(50 + iid as i64);
        }
    });
    f.sim.inject(Fault {
        calls: vendor_sim::gitlab::Calls::From(2),
        ..Fault::nth(ops::PROJECT_ISSUES, 2, GitlabFault::Status(500))
    });
    f.run_on(f.connection_id, "RECONCILIATION", "scheduled")
        .await?;
    let newest: OffsetDateTime = sqlx::query_scalar("SELECT max(upstream_updated_at) FROM issue")
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(
        newest,
        at(69),
        "the first page (issue 5, then 11 to 19) was written"
    );
    assert_eq!(watermark(&f.pool).await?, Some(at(40)));
    f.sim.clear_faults();

    // An item updated within the watermark's second is still read (one second of overlap).
    f.sim.model(|m| {
        let issue = m.issues.get_mut(&(project, 8)).unwrap();
        issue.title = "same second".into();
        issue.updated_at = at(40);
    });
    f.run_on(f.connection_id, "RECONCILIATION", "scheduled")
        .await?;
    let (title,): (String,) = sqlx::query_as("SELECT title FROM issue WHERE number = 8")
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(title, "same second");
    assert_eq!(watermark(&f.pool).await?, Some(at(80)));

    // Sync now (a manual reconcile) lists whole and sweeps.
    f.run("RECONCILIATION").await?;
    assert_eq!(f.numbers("issue", true).await?, vec![6]);
    Ok(())
}

#[tokio::test]
async fn pending_or_disconnected_connections_read_nothing() -> Result<()> {
    let f = fixture(5, 0).await?;
    for status in ["pending", "disconnected"] {
        let conn_id = f
            .connection(f.workspace_id, status, TOKEN, &[("top", "app", f.project)])
            .await?;
        let conn = connection::Entity::find_by_id(conn_id)
            .one(&f.db.db)
            .await?
            .expect("connection");
        assert!(
            f.vendor().source(&conn).await.is_err(),
            "{status}: no reader"
        );
        let job_id = f.queue(conn_id, "RECONCILIATION", "manual").await?;
        let handler = JobHandler {
            db: f.db.db.clone(),
            engine: f.engine("replica-a"),
        };
        handler
            .run_job(job_id)
            .await
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let (state, error): (String, Option<String>) =
            sqlx::query_as("SELECT status, error FROM sync_job WHERE id = $1")
                .bind(job_id)
                .fetch_one(&f.pool)
                .await?;
        assert_eq!(state, "failed", "{status}");
        assert!(
            error
                .unwrap_or_default()
                .contains("only an active connection syncs")
        );
    }
    assert_eq!(f.sim.calls(ops::PROJECT_ISSUES), 0);
    assert_eq!(f.numbers("issue", false).await?.len(), 0);
    Ok(())
}

#[tokio::test]
async fn two_replicas_never_run_one_job_twice() -> Result<()> {
    let f = fixture(25, 0).await?;
    let job_id = f.queue(f.connection_id, "INITIAL", "lifecycle").await?;
    let a = JobHandler {
        db: f.db.db.clone(),
        engine: f.engine("replica-a"),
    };
    let b = JobHandler {
        db: f.db.db.clone(),
        engine: f.engine("replica-b"),
    };
    let (ra, rb) = tokio::join!(a.run_job(job_id), b.run_job(job_id));
    assert!(ra.is_ok() || rb.is_ok(), "one replica runs the job");
    // Three pages of issues and one of merge requests, read once.
    assert_eq!(f.sim.calls(ops::PROJECT_ISSUES), 3);
    assert_eq!(f.sim.calls(ops::PROJECT_MERGE_REQUESTS), 1);
    // A replica that asks again afterwards finds nothing to claim.
    a.run_job(job_id)
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    assert_eq!(f.sim.calls(ops::PROJECT_ISSUES), 3);
    let (status,): (String,) = sqlx::query_as("SELECT status FROM sync_job WHERE id = $1")
        .bind(job_id)
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(status, "succeeded");
    Ok(())
}

#[tokio::test]
async fn another_workspace_cannot_reach_or_remove_this_ones_items() -> Result<()> {
    let f = fixture(12, 0).await?;
    f.run("INITIAL").await?;
    // Workspace B: a connection on the same instance with its own (unknown) token, and one with
    // a valid token but no monitor of `top/app`.
    let b = Uuid::now_v7();
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'other')")
        .bind(b)
        .execute(&f.pool)
        .await?;
    let foreign = f
        .connection(b, "active", "glpat-stolen", &[("top", "app", f.project)])
        .await?;
    let unmonitored = f.connection(b, "active", TOKEN, &[]).await?;
    f.delete_issue(3);
    let outcome = f.run_on(foreign, "RECONCILIATION", "manual").await?;
    assert!(
        matches!(outcome, JobOutcome::Failed(ref r) if r.contains("bad_credentials") || r.contains("BadCredentials") || r.to_lowercase().contains("credentials")),
        "{outcome:?}"
    );
    assert_eq!(
        f.run_on(unmonitored, "RECONCILIATION", "manual").await?,
        JobOutcome::Succeeded
    );
    assert!(
        f.numbers("issue", true).await?.is_empty(),
        "B removed nothing of A's"
    );
    let (titles,): (i64,) = sqlx::query_as("SELECT count(*) FROM issue WHERE title IS NOT NULL")
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(titles, 12, "A's items unchanged");
    Ok(())
}
