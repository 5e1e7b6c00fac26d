//! `gitlab-sync`: an INITIAL sync of 12 simulated GitLab projects in subgroups (10,000 issues
//! and merge requests) run by gitlab-sync's engine through gitlab-client over HTTP, beside the
//! raw Postgres upsert ceiling for the very rows it wrote, measured in the same run on the same
//! database. The projects are monitored as discovery records them (by native id); the job is
//! claimed and run as a replica runs it. The same run times the notes pass (30,000 notes: each
//! issue's REST listing, each merge request's discussions) beside the raw upserts of those notes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use sea_orm::EntityTrait;
use sqlx::PgPool;
use sync_engine::{Engine, JobOutcome, Vendor as _};
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::gitlab::{GitlabSim, ops};

use crate::github_sync::{BATCH, Write, ceiling, load_rows};
use crate::table::{Table, rate, ratio, thousands};

const TOKEN: &str = "glpat-bench";
const ITEMS: u64 = 10_000;

pub async fn run() -> Result<()> {
    let generated = vendor_sim::gitlab::generate(&vendor_sim::gitlab::Scenario {
        group: "bench".into(),
        token: TOKEN.into(),
        items: ITEMS,
        first_update: OffsetDateTime::from_unix_timestamp(1_700_000_000)?,
    });
    let model = generated.model;
    let notes_in_model = model.notes.values().filter(|n| !n.system).count() as u64;
    let projects: Vec<(u64, u64, String)> = generated
        .projects
        .iter()
        .map(|id| {
            let p = &model.projects[id];
            (p.group, p.id, p.path.clone())
        })
        .collect();
    let sim = GitlabSim::start(model).await?;
    let env = testkit::TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();
    let config: gitlab_sync::Config = testkit::config(
        env.common_args(),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            "--reconcile-cron=off".to_owned(),
            "--backfill-cron=off".to_owned(),
        ],
    )?;
    let page_size = config.sync.page_size;

    let (workspace, instance, connection) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'bench')")
        .bind(workspace)
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)")
        .bind(instance)
        .bind(sim.base_url())
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id, settings) VALUES ($1, $2, 'gitlab', 'active', $3, $4)")
        .bind(connection)
        .bind(workspace)
        .bind(instance)
        .bind(serde_json::json!({ "group": "bench" }))
        .execute(&pool)
        .await?;
    let ring = store::secrets::Keyring::parse(&config.secret_key)?;
    store::secrets::put(&env.db.db, &ring, connection, "token", TOKEN.as_bytes()).await?;
    for (group, project, path) in &projects {
        let owner = sim.model(|m| m.group_path(*group)).context("group path")?;
        sqlx::query("INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(Uuid::now_v7())
            .bind(workspace)
            .bind(connection)
            .bind(owner)
            .bind(path)
            .bind(*project as i64)
            .execute(&pool)
            .await?;
    }

    let engine = Engine::new(
        Arc::new(gitlab_sync::sync::GitlabVendor {
            pool: pool.clone(),
            factory: gitlab_sync::source::ClientFactory {
                db: env.db.db.clone(),
                secret_key: ring,
                request_timeout: config.sync.request_timeout(),
                egress: config.common.egress.clone(),
                retry: gitlab_client::RetryPolicy::default(),
            },
            backfill: config.backfill_batches(),
            activator: None,
        }),
        pool.clone(),
        "bench",
        config.sync.job_lease(),
        config.sync.sync_settings(),
    );
    let job_id = Uuid::now_v7();
    sqlx::query("INSERT INTO sync_job (id, connection_id, workspace_id, kind, job_type, trigger) VALUES ($1, $2, $3, 'gitlab', 'INITIAL', 'lifecycle')")
        .bind(job_id)
        .bind(connection)
        .bind(workspace)
        .execute(&pool)
        .await?;
    let conn = store::entity::connection::Entity::find_by_id(connection)
        .one(&env.db.db)
        .await?
        .context("connection")?;
    let notes_timer = PhaseTimer::install(gitlab_sync::notes::NOTES_PASS_SPAN)?;
    let started = Instant::now();
    let job = engine
        .jobs
        .claim(job_id)
        .await?
        .job()
        .context("claimable")?;
    let source = engine.vendor.source(&conn).await?;
    let outcome = engine.run(&job, instance, source).await?;
    let wall = started.elapsed();
    ensure!(
        outcome == JobOutcome::Succeeded,
        "the INITIAL job ended {outcome:?}; no figures"
    );
    let notes_time = notes_timer.total();
    ensure!(
        !notes_time.is_zero() && notes_time < wall,
        "no `{}` span was timed: the notes pass is not where this benchmark looks",
        gitlab_sync::notes::NOTES_PASS_SPAN
    );
    let items_time = wall - notes_time;
    let (issues, pulls) = load_rows(&pool).await?;
    let items = (issues.len() + pulls.len()) as u64;
    ensure!(items == ITEMS, "mirrored {items} rows, expected {ITEMS}");
    let notes = NoteRows::load(&pool).await?;
    ensure!(
        notes.len() == notes_in_model,
        "mirrored {} notes, the simulator holds {notes_in_model} user notes",
        notes.len()
    );
    let graphql = sim.calls(ops::PROJECT_ISSUES)
        + sim.calls(ops::PROJECT_MERGE_REQUESTS)
        + sim.calls(ops::MERGE_REQUEST_DISCUSSIONS);
    let rest = sim.calls(ops::LIST_NOTES);

    // The webhook half: gitlab-sync's consumer applies Merge Request Hooks, each with its
    // readiness read, beside the row-locked single-row ceiling at the consumer's concurrency.
    let service_config: gitlab_sync::Config = testkit::config(
        env.common_args(),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            "--reconcile-cron=off".to_owned(),
            "--backfill-cron=off".to_owned(),
            "--filter-refresh-ms=200".to_owned(),
        ],
    )?;
    let webhook_concurrency = service_config.sync.webhook_concurrency;
    let service = testkit::spawn(service_config).await?;
    let hooks = crate::gitlab_webhooks::apply(&env, &pool, &sim, connection).await?;
    service.stop().await?;
    sim.shutdown().await;
    let hooks_ceiling =
        crate::github_webhooks::ceiling(&env.db.url, hooks.hooks, webhook_concurrency).await?;

    let batched = ceiling(&pool, &issues, &pulls, 1, Write::Batched).await?;
    let per_row = ceiling(&pool, &issues, &pulls, 2, Write::RowByRow).await?;
    let notes_batched = notes.ceiling(&pool, 1, Write::Batched).await?;
    let notes_per_row = notes.ceiling(&pool, 2, Write::RowByRow).await?;
    let pg_version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&pool)
        .await?;
    let durability: (String, String) =
        sqlx::query_as("SELECT current_setting('fsync'), current_setting('synchronous_commit')")
            .fetch_one(&pool)
            .await?;

    println!();
    println!(
        "gitlab-sync: INITIAL sync of 12 projects in subgroups, {} items ({} issues, {} merge \
         requests) and {} notes, pages of {page_size}; {} GraphQL and {} REST note requests",
        thousands(items),
        thousands(issues.len() as u64),
        thousands(pulls.len() as u64),
        thousands(notes.len()),
        thousands(graphql),
        thousands(rest),
    );
    println!(
        "machine: {}; PostgreSQL {pg_version} (fsync {}, synchronous_commit {})",
        crate::machine(),
        durability.0,
        durability.1
    );
    println!();
    let mut t = Table::new(&["path", "rows", "seconds", "rows/s", "engine ÷ this"]);
    let mut phase = |what: &str, n: u64, engine: Duration, ceilings: [(String, Duration); 2]| {
        let engine_rate = n as f64 / engine.as_secs_f64();
        t.row(vec![
            format!("engine: {what}"),
            thousands(n),
            format!("{:.2}", engine.as_secs_f64()),
            rate(engine_rate),
            "1.00×".into(),
        ]);
        for (label, took) in ceilings {
            let r = n as f64 / took.as_secs_f64();
            t.row(vec![
                format!("  ceiling: {label}"),
                thousands(n),
                format!("{:.2}", took.as_secs_f64()),
                rate(r),
                ratio(engine_rate, r),
            ]);
        }
    };
    phase(
        "items (issue and merge request listings)",
        items,
        items_time,
        [
            (
                format!("INSERT … ON CONFLICT DO UPDATE, {BATCH} rows/statement+txn"),
                batched,
            ),
            (
                format!("per row SELECT … FOR UPDATE + upsert, {BATCH} rows/txn"),
                per_row,
            ),
        ],
    );
    phase(
        "notes (discussions and REST notes of every item)",
        notes.len(),
        notes_time,
        [
            (
                format!("INSERT … ON CONFLICT DO UPDATE, {BATCH} rows/statement+txn"),
                notes_batched,
            ),
            (
                format!("per row SELECT … FOR UPDATE + upsert, {BATCH} rows/txn"),
                notes_per_row,
            ),
        ],
    );
    let all = items + notes.len();
    t.row(vec![
        "engine: the whole job (claim → finished)".into(),
        thousands(all),
        format!("{:.2}", wall.as_secs_f64()),
        rate(all as f64 / wall.as_secs_f64()),
        String::new(),
    ]);
    t.print();
    println!();
    let mut w = Table::new(&["path", "hooks", "seconds", "hooks/s", "consumer ÷ this"]);
    let applied_rate = hooks.hooks as f64 / hooks.seconds;
    let ceiling_rate = hooks.hooks as f64 / hooks_ceiling.as_secs_f64();
    w.row(vec![
        format!(
            "consumer: Merge Request Hooks from JetStream, {webhook_concurrency} at once, each \
             with its readiness read ({} reads)",
            thousands(hooks.readiness_reads)
        ),
        thousands(hooks.hooks as u64),
        format!("{:.2}", hooks.seconds),
        rate(applied_rate),
        "1.00×".into(),
    ]);
    w.row(vec![
        format!(
            "  ceiling: 1-row txn, SELECT … FOR UPDATE + UPDATE, {webhook_concurrency} connections"
        ),
        thousands(hooks.hooks as u64),
        format!("{:.2}", hooks_ceiling.as_secs_f64()),
        rate(ceiling_rate),
        ratio(applied_rate, ceiling_rate),
    ]);
    w.print();
    println!();
    println!(
        "the job lists each project's items, then reads its items' notes (one REST listing per \
         issue, the discussions of each merge request); notes time is the sum of the `{}` spans, \
         items time the rest of the job. The ceilings write the same rows afterwards, from one \
         connection, sequentially, like the engine.",
        gitlab_sync::notes::NOTES_PASS_SPAN
    );
    env.db.drop().await;
    Ok(())
}

/// Sums the wall time of every span of one name (they never overlap: the engine walks the
/// projects one after another).
#[derive(Clone)]
struct PhaseTimer {
    name: &'static str,
    total: Arc<Mutex<Duration>>,
}

/// When a timed span opened.
struct Opened(Instant);

impl PhaseTimer {
    fn install(name: &'static str) -> Result<PhaseTimer> {
        use tracing_subscriber::layer::SubscriberExt as _;
        let timer = PhaseTimer {
            name,
            total: Arc::default(),
        };
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(timer.clone()))
            .context("a tracing subscriber is already installed")?;
        Ok(timer)
    }

    fn total(&self) -> Duration {
        *self.total.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<S> tracing_subscriber::Layer<S> for PhaseTimer
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() == self.name
            && let Some(span) = ctx.span(id)
        {
            span.extensions_mut().insert(Opened(Instant::now()));
        }
    }

    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(Opened(at)) = span.extensions().get::<Opened>()
        {
            *self.total.lock().unwrap_or_else(|e| e.into_inner()) += at.elapsed();
        }
    }
}

/// The mirrored notes: conversation comments and diff (review) comments.
struct NoteRows {
    comments: Vec<CommentRow>,
    review_comments: Vec<ReviewCommentRow>,
}

#[derive(sqlx::FromRow)]
struct CommentRow {
    repository_id: Uuid,
    issue_id: Option<Uuid>,
    pull_request_id: Option<Uuid>,
    native_id: i64,
    node_id: Option<String>,
    author: Option<String>,
    body: Option<String>,
    upstream_created_at: OffsetDateTime,
    upstream_updated_at: OffsetDateTime,
}

#[derive(sqlx::FromRow)]
struct ReviewCommentRow {
    pull_request_id: Uuid,
    thread_id: Option<Uuid>,
    native_id: i64,
    node_id: Option<String>,
    in_reply_to: Option<i64>,
    path: Option<String>,
    line: Option<i32>,
    commit_sha: Option<String>,
    author: Option<String>,
    body: Option<String>,
    upstream_created_at: OffsetDateTime,
    upstream_updated_at: OffsetDateTime,
}

impl NoteRows {
    async fn load(pool: &PgPool) -> Result<NoteRows> {
        Ok(NoteRows {
            comments: sqlx::query_as(
                "SELECT repository_id, issue_id, pull_request_id, native_id, node_id, author,
                        body, upstream_created_at, upstream_updated_at
                   FROM comment ORDER BY repository_id, native_id",
            )
            .fetch_all(pool)
            .await?,
            review_comments: sqlx::query_as(
                "SELECT pull_request_id, thread_id, native_id, node_id, in_reply_to, path, line,
                        commit_sha, author, body, upstream_created_at, upstream_updated_at
                   FROM review_comment ORDER BY pull_request_id, native_id",
            )
            .fetch_all(pool)
            .await?,
        })
    }

    fn len(&self) -> u64 {
        (self.comments.len() + self.review_comments.len()) as u64
    }

    /// Writes every note again under new native ids (`generation` keeps the copies apart) into
    /// the same parents, and returns how long the writes took.
    async fn ceiling(&self, pool: &PgPool, generation: i64, how: Write) -> Result<Duration> {
        let offset = generation * 1_000_000_000_000;
        let mut conn = pool.acquire().await?;
        let started = Instant::now();
        for batch in self.comments.chunks(BATCH) {
            let mut txn = sqlx::Connection::begin(&mut *conn).await?;
            match how {
                Write::Batched => {
                    sqlx::query(sqlx::AssertSqlSafe(format!("{COMMENT_INSERT} SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::int8[], $6::text[], $7::text[], $8::text[], $9::timestamptz[], $10::timestamptz[]) {COMMENT_CONFLICT}")))
                        .bind(batch.iter().map(|_| Uuid::now_v7()).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.repository_id).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.issue_id).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.pull_request_id).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.native_id + offset).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.node_id.clone()).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.author.clone()).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.body.clone()).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.upstream_created_at).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.upstream_updated_at).collect::<Vec<_>>())
                        .execute(&mut *txn)
                        .await?;
                }
                Write::RowByRow => {
                    for c in batch {
                        let _locked: Option<(OffsetDateTime,)> = sqlx::query_as(
                            "SELECT upstream_updated_at FROM comment
                              WHERE repository_id = $1 AND native_id = $2 FOR UPDATE",
                        )
                        .bind(c.repository_id)
                        .bind(c.native_id + offset)
                        .fetch_optional(&mut *txn)
                        .await?;
                        sqlx::query(sqlx::AssertSqlSafe(format!("{COMMENT_INSERT} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) {COMMENT_CONFLICT}")))
                            .bind(Uuid::now_v7())
                            .bind(c.repository_id)
                            .bind(c.issue_id)
                            .bind(c.pull_request_id)
                            .bind(c.native_id + offset)
                            .bind(&c.node_id)
                            .bind(&c.author)
                            .bind(&c.body)
                            .bind(c.upstream_created_at)
                            .bind(c.upstream_updated_at)
                            .execute(&mut *txn)
                            .await?;
                    }
                }
            }
            txn.commit().await?;
        }
        for batch in self.review_comments.chunks(BATCH) {
            let mut txn = sqlx::Connection::begin(&mut *conn).await?;
            match how {
                Write::Batched => {
                    sqlx::query(sqlx::AssertSqlSafe(format!("{REVIEW_INSERT} SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::int8[], $5::text[], $6::int8[], $7::text[], $8::int4[], $9::text[], $10::text[], $11::text[], $12::timestamptz[], $13::timestamptz[]) {REVIEW_CONFLICT}")))
                        .bind(batch.iter().map(|_| Uuid::now_v7()).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.pull_request_id).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.thread_id).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.native_id + offset).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.node_id.clone()).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.in_reply_to.map(|r| r + offset)).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.path.clone()).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.line).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.commit_sha.clone()).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.author.clone()).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.body.clone()).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.upstream_created_at).collect::<Vec<_>>())
                        .bind(batch.iter().map(|c| c.upstream_updated_at).collect::<Vec<_>>())
                        .execute(&mut *txn)
                        .await?;
                }
                Write::RowByRow => {
                    for c in batch {
                        let _locked: Option<(OffsetDateTime,)> = sqlx::query_as(
                            "SELECT upstream_updated_at FROM review_comment
                              WHERE pull_request_id = $1 AND native_id = $2 FOR UPDATE",
                        )
                        .bind(c.pull_request_id)
                        .bind(c.native_id + offset)
                        .fetch_optional(&mut *txn)
                        .await?;
                        sqlx::query(sqlx::AssertSqlSafe(format!("{REVIEW_INSERT} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) {REVIEW_CONFLICT}")))
                            .bind(Uuid::now_v7())
                            .bind(c.pull_request_id)
                            .bind(c.thread_id)
                            .bind(c.native_id + offset)
                            .bind(&c.node_id)
                            .bind(c.in_reply_to.map(|r| r + offset))
                            .bind(&c.path)
                            .bind(c.line)
                            .bind(&c.commit_sha)
                            .bind(&c.author)
                            .bind(&c.body)
                            .bind(c.upstream_created_at)
                            .bind(c.upstream_updated_at)
                            .execute(&mut *txn)
                            .await?;
                    }
                }
            }
            txn.commit().await?;
        }
        Ok(started.elapsed())
    }
}

const COMMENT_INSERT: &str = "INSERT INTO comment (id, repository_id, issue_id, pull_request_id, \
     native_id, node_id, author, body, upstream_created_at, upstream_updated_at)";
const COMMENT_CONFLICT: &str = "ON CONFLICT (repository_id, native_id) DO UPDATE SET \
     node_id = EXCLUDED.node_id, author = EXCLUDED.author, body = EXCLUDED.body, \
     upstream_created_at = EXCLUDED.upstream_created_at, \
     upstream_updated_at = EXCLUDED.upstream_updated_at, deleted_at = NULL, mirrored_at = now()";
const REVIEW_INSERT: &str = "INSERT INTO review_comment (id, pull_request_id, thread_id, \
     native_id, node_id, in_reply_to, path, line, commit_sha, author, body, upstream_created_at, \
     upstream_updated_at)";
const REVIEW_CONFLICT: &str = "ON CONFLICT (pull_request_id, native_id) DO UPDATE SET \
     thread_id = EXCLUDED.thread_id, node_id = EXCLUDED.node_id, \
     in_reply_to = EXCLUDED.in_reply_to, path = EXCLUDED.path, line = EXCLUDED.line, \
     commit_sha = EXCLUDED.commit_sha, author = EXCLUDED.author, body = EXCLUDED.body, \
     upstream_created_at = EXCLUDED.upstream_created_at, \
     upstream_updated_at = EXCLUDED.upstream_updated_at, deleted_at = NULL, mirrored_at = now()";
