//! `github-sync`: an INITIAL sync of the simulator's default installation (5 repositories,
//! 10,000 items) run by the real services (control-api activates, github-sync runs the job
//! through github-client over HTTP), beside the raw Postgres upsert ceiling for the very rows it
//! wrote, measured in the same run on the same database.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use control_api::Role;
use serde_json::{Value, json};
use sqlx::{PgPool, Row as _};
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::github::{GithubSim, RateLimitResource, Scenario, generate, graphql_cost, ops};

use crate::table::{Table, rate, ratio, thousands};

const APP_KEY: &[u8] = include_bytes!("../../../../github-client/tests/fixtures/test-app-key.pem");
/// Rows per transaction in the ceilings: the engine's page size.
pub(crate) const BATCH: usize = 100;
/// The job must finish within this, or the benchmark fails.
const JOB_TIMEOUT: Duration = Duration::from_secs(600);

pub async fn run() -> Result<()> {
    let scenario = Scenario::default();
    let env = testkit::TestEnv::new().await?;
    let generated = generate(&scenario);
    let mut model = generated.model;
    model.set_app_id("4242");
    let sim = GithubSim::start(model).await?;
    let (control, keys) = (
        testkit::spawn(testkit::control_api_config(env.common_args())).await?,
        testkit::control_api_keys()?,
    );
    let config = testkit::github_sync_config(env.common_args());
    let page_size = config.sync.page_size;
    let webhook_concurrency = config.sync.webhook_concurrency;
    let sync = testkit::spawn(config).await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();

    let token = testkit::token(&keys, Role::Admin, None)?;
    let http = reqwest::Client::new();
    let api = control.url();
    let post = |path: String, body: Value| {
        let http = http.clone();
        let token = token.clone();
        let url = format!("{api}{path}");
        async move {
            let res = http.post(url).bearer_auth(token).json(&body).send().await?;
            let status = res.status();
            let body: Value = res.json().await.unwrap_or(Value::Null);
            ensure!(status.is_success(), "{path}: {status} {body}");
            anyhow::Ok(body)
        }
    };
    let ws = post("/workspaces".into(), json!({"name": "bench"})).await?;
    let ws = ws["id"].as_str().context("workspace id")?.to_owned();
    let conn = post(
        format!("/workspaces/{ws}/connections"),
        json!({
            "kind": "github",
            "server_url": sim.base_url(),
            "settings": { "auth": "app", "app_id": 4242, "installation_id": generated.installation },
            "secrets": { "private_key": String::from_utf8(APP_KEY.to_vec())? },
        }),
    )
    .await?;
    let conn = conn["id"].as_str().context("connection id")?.to_owned();

    let budget_before = sim.model(|m| m.rate_limit(RateLimitResource::Graphql).remaining);
    let started = Instant::now();
    post(
        format!("/workspaces/{ws}/connections/{conn}/activate"),
        json!({}),
    )
    .await?;
    let job = wait_for_initial(&pool).await?;
    let wall = started.elapsed();
    ensure!(
        job.status == "succeeded",
        "the INITIAL job ended {} ({:?}); no figures",
        job.status,
        job.error
    );
    let budget_after = sim.model(|m| m.rate_limit(RateLimitResource::Graphql).remaining);
    let graphql_calls: u64 = sim.call_counts().values().sum();
    let (issues, pulls) = load_rows(&pool).await?;
    let items = (issues.len() + pulls.len()) as u64;
    ensure!(
        items == scenario.items as u64 && job.done == scenario.items as i64,
        "mirrored {items} rows, job progress {}, expected {}",
        job.done,
        scenario.items
    );
    let graphql_points = u64::from(budget_before.saturating_sub(budget_after));
    // The same job without the lists nested under each item: the listings' points as the
    // count-only pages would be charged (GitHub prices a query by its connections and `first`).
    let vars = json!({ "owner": "o", "name": "r", "first": page_size });
    let (issue_calls, pull_calls) = (
        sim.calls(ops::REPOSITORY_ISSUES),
        sim.calls(ops::REPOSITORY_PULL_REQUESTS),
    );
    let listing_points =
        sim.points(ops::REPOSITORY_ISSUES) + sim.points(ops::REPOSITORY_PULL_REQUESTS);
    let items_only = graphql_points.saturating_sub(listing_points)
        + issue_calls * u64::from(graphql_cost(ISSUES_COUNTS_ONLY, &vars))
        + pull_calls * u64::from(graphql_cost(PULLS_COUNTS_ONLY, &vars));
    let (comments, reviews) = nested_rows(&pool).await?;
    let webhooks = crate::github_webhooks::apply(&env, &pool, &sim, &conn).await?;
    sync.stop().await?;
    control.stop().await?;
    sim.shutdown().await;
    let webhook_ceiling =
        crate::github_webhooks::ceiling(&env.db.url, webhooks.events, webhook_concurrency).await?;

    // The ceilings write the same rows under fresh repositories: inserts, as in an INITIAL sync.
    let batched = ceiling(&pool, &issues, &pulls, 1, Write::Batched).await?;
    let per_row = ceiling(&pool, &issues, &pulls, 2, Write::RowByRow).await?;
    let pg_version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&pool)
        .await?;

    let engine_rate = items as f64 / job.seconds;
    let batched_rate = items as f64 / batched.as_secs_f64();
    let per_row_rate = items as f64 / per_row.as_secs_f64();
    let cost = graphql_points;

    println!();
    println!(
        "github-sync: INITIAL sync of {} repositories, {} items ({} issues, {} pull requests), pages of {page_size}",
        scenario.repositories,
        thousands(items),
        thousands(issues.len() as u64),
        thousands(pulls.len() as u64),
    );
    println!("machine: {}; PostgreSQL {pg_version}", crate::machine());
    println!();
    let mut t = Table::new(&["path", "items", "seconds", "items/s", "engine ÷ this"]);
    t.row(vec![
        "engine: INITIAL job, github-client → simulator over HTTP".into(),
        thousands(items),
        format!("{:.2}", job.seconds),
        rate(engine_rate),
        "1.00×".into(),
    ]);
    t.row(vec![
        "  (activation → job finished, incl. NATS dispatch)".into(),
        thousands(items),
        format!("{:.2}", wall.as_secs_f64()),
        rate(items as f64 / wall.as_secs_f64()),
        String::new(),
    ]);
    t.row(vec![
        format!("ceiling: INSERT … ON CONFLICT DO UPDATE, {BATCH} rows/statement+txn"),
        thousands(items),
        format!("{:.2}", batched.as_secs_f64()),
        rate(batched_rate),
        ratio(engine_rate, batched_rate),
    ]);
    t.row(vec![
        format!("ceiling: per row SELECT … FOR UPDATE + upsert, {BATCH} rows/txn"),
        thousands(items),
        format!("{:.2}", per_row.as_secs_f64()),
        rate(per_row_rate),
        ratio(engine_rate, per_row_rate),
    ]);
    t.print();
    println!();
    let mut t = Table::new(&[
        "GraphQL quota",
        "points",
        "requests",
        "points / 1,000 items",
    ]);
    t.row(vec![
        format!(
            "INITIAL job, comments and reviews included ({} comments, {} reviews mirrored; simulator's rateLimit accounting)",
            thousands(comments),
            thousands(reviews)
        ),
        thousands(cost),
        thousands(graphql_calls),
        format!("{:.1}", cost as f64 * 1000.0 / items as f64),
    ]);
    t.row(vec![
        "  items only (the same pages priced with counts instead of nested lists)".into(),
        thousands(items_only),
        thousands(graphql_calls),
        format!("{:.1}", items_only as f64 * 1000.0 / items as f64),
    ]);
    t.print();
    println!();
    println!(
        "engine time is the job row's started_at → finished_at; the ceilings run after it, one \
         connection, sequentially, like the engine"
    );
    println!();
    let applied_rate = webhooks.events as f64 / webhooks.seconds;
    let ceiling_rate = webhooks.events as f64 / webhook_ceiling.as_secs_f64();
    let mut t = Table::new(&[
        "webhooks",
        "events",
        "seconds",
        "events/s",
        "consumer ÷ this",
    ]);
    t.row(vec![
        format!(
            "consumer: pull_request deliveries from JetStream, {webhook_concurrency} at once ({} item events recorded)",
            thousands(webhooks.item_events.max(0) as u64)
        ),
        thousands(webhooks.events as u64),
        format!("{:.2}", webhooks.seconds),
        rate(applied_rate),
        "1.00×".into(),
    ]);
    t.row(vec![
        format!(
            "ceiling: 1-row txn, SELECT … FOR UPDATE + UPDATE, {webhook_concurrency} connections"
        ),
        thousands(webhooks.events as u64),
        format!("{:.2}", webhook_ceiling.as_secs_f64()),
        rate(ceiling_rate),
        ratio(applied_rate, ceiling_rate),
    ]);
    t.print();
    println!();
    println!(
        "consumer time runs from its first delivery to its last ack (publishing was already under \
         way); every delivery is a new version of a mirrored pull request, half of them pushes"
    );
    env.db.drop().await;
    Ok(())
}

/// The listing documents before nested lists, for pricing only: GitHub charges by connections
/// and their `first`, so the counts stand for the whole page.
const ISSUES_COUNTS_ONLY: &str = "query RepositoryIssues($owner: String!, $name: String!, $first: Int!, $after: String) { repository(owner: $owner, name: $name) { issues(first: $first, after: $after) { nodes { comments { totalCount } } } } }";
const PULLS_COUNTS_ONLY: &str = "query RepositoryPullRequests($owner: String!, $name: String!, $first: Int!, $after: String) { repository(owner: $owner, name: $name) { pullRequests(first: $first, after: $after) { nodes { comments { totalCount } reviews { totalCount } } } } }";

/// Conversation comments and reviews the job mirrored.
async fn nested_rows(pool: &PgPool) -> Result<(u64, u64)> {
    let (comments, reviews): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM comment), (SELECT count(*) FROM review)")
            .fetch_one(pool)
            .await?;
    Ok((comments.max(0) as u64, reviews.max(0) as u64))
}

struct JobEnd {
    status: String,
    error: Option<String>,
    done: i64,
    seconds: f64,
}

async fn wait_for_initial(pool: &PgPool) -> Result<JobEnd> {
    let deadline = Instant::now() + JOB_TIMEOUT;
    loop {
        let row: Option<(String, Option<String>, i64, f64)> = sqlx::query_as(
            "SELECT status, error, progress_done,
                    extract(epoch FROM finished_at - started_at)::float8
               FROM sync_job WHERE job_type = 'INITIAL' AND finished_at IS NOT NULL",
        )
        .fetch_optional(pool)
        .await?;
        if let Some((status, error, done, seconds)) = row {
            return Ok(JobEnd {
                status,
                error,
                done,
                seconds,
            });
        }
        ensure!(
            Instant::now() < deadline,
            "the INITIAL job did not finish within {JOB_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An issue row as mirrored, without its identity and bookkeeping columns.
pub(crate) struct IssueRow {
    repository: usize,
    native_id: i64,
    node_id: String,
    number: i32,
    title: Option<String>,
    body: Option<String>,
    state: String,
    state_reason: Option<String>,
    author: Option<String>,
    locked: Option<bool>,
    lock_reason: Option<String>,
    comment_count: Option<i32>,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
    closed_at: Option<OffsetDateTime>,
}

/// A pull request row as mirrored.
pub(crate) struct PullRow {
    issue: IssueRow,
    draft: Option<bool>,
    review_count: Option<i32>,
    head_ref: Option<String>,
    head_sha: Option<String>,
    base_ref: Option<String>,
    merged_at: Option<OffsetDateTime>,
}

const ISSUE_COLUMNS: &str = "native_id, node_id, number, title, body, state, state_reason, \
     author, locked, lock_reason, comment_count, upstream_created_at, upstream_updated_at, closed_at";

fn issue_row(r: &sqlx::postgres::PgRow, repos: &[Uuid]) -> Result<IssueRow> {
    let repo: Uuid = r.try_get("repository_id")?;
    Ok(IssueRow {
        repository: repos
            .iter()
            .position(|id| *id == repo)
            .context("row of an unknown repository")?,
        native_id: r.try_get("native_id")?,
        node_id: r.try_get("node_id")?,
        number: r.try_get("number")?,
        title: r.try_get("title")?,
        body: r.try_get("body")?,
        state: r.try_get("state")?,
        state_reason: r.try_get("state_reason").unwrap_or(None),
        author: r.try_get("author")?,
        locked: r.try_get("locked")?,
        lock_reason: r.try_get("lock_reason")?,
        comment_count: r.try_get("comment_count")?,
        created_at: r.try_get("upstream_created_at")?,
        updated_at: r.try_get("upstream_updated_at")?,
        closed_at: r.try_get("closed_at")?,
    })
}

pub(crate) async fn load_rows(pool: &PgPool) -> Result<(Vec<IssueRow>, Vec<PullRow>)> {
    let repos: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM repository ORDER BY native_id")
        .fetch_all(pool)
        .await?;
    let issues = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT repository_id, {ISSUE_COLUMNS} FROM issue ORDER BY repository_id, native_id"
    )))
    .fetch_all(pool)
    .await?
    .iter()
    .map(|r| issue_row(r, &repos))
    .collect::<Result<Vec<_>>>()?;
    let pulls = sqlx::query(
        "SELECT repository_id, native_id, node_id, number, title, body, state, NULL::text AS state_reason,
                author, locked, lock_reason, comment_count, upstream_created_at, upstream_updated_at,
                closed_at, draft, review_count, head_ref, head_sha, base_ref, merged_at
           FROM pull_request ORDER BY repository_id, native_id",
    )
    .fetch_all(pool)
    .await?
    .iter()
    .map(|r| {
        Ok(PullRow {
            issue: issue_row(r, &repos)?,
            draft: r.try_get("draft")?,
            review_count: r.try_get("review_count")?,
            head_ref: r.try_get("head_ref")?,
            head_sha: r.try_get("head_sha")?,
            base_ref: r.try_get("base_ref")?,
            merged_at: r.try_get("merged_at")?,
        })
    })
    .collect::<Result<Vec<_>>>()?;
    Ok((issues, pulls))
}

#[derive(Clone, Copy)]
pub(crate) enum Write {
    /// One multi-row `INSERT … SELECT FROM unnest(…) ON CONFLICT DO UPDATE` per batch.
    Batched,
    /// Per row: `SELECT … FOR UPDATE`, then the engine's upsert; one transaction per batch.
    RowByRow,
}

/// Writes every row under fresh copies of the repositories (`generation` keeps them apart) and
/// returns how long the writes took.
pub(crate) async fn ceiling(
    pool: &PgPool,
    issues: &[IssueRow],
    pulls: &[PullRow],
    generation: i64,
    how: Write,
) -> Result<Duration> {
    let originals: Vec<(Uuid, i64, String, String)> = sqlx::query_as(
        "SELECT provider_instance_id, native_id, owner, name FROM repository
          WHERE native_id < 1000000000 ORDER BY native_id",
    )
    .fetch_all(pool)
    .await?;
    let mut repos = Vec::with_capacity(originals.len());
    for (instance, native_id, owner, name) in originals {
        let id = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO repository (id, provider_instance_id, native_id, node_id, owner, name)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id)
        .bind(instance)
        .bind(native_id + generation * 1_000_000_000)
        .bind(format!("R_bench{generation}_{native_id}"))
        .bind(owner)
        .bind(format!("{name}-bench{generation}"))
        .execute(pool)
        .await?;
        repos.push(id);
    }
    let mut conn = pool.acquire().await?;
    let started = Instant::now();
    for chunk in issues.chunk_by(|a, b| a.repository == b.repository) {
        for batch in chunk.chunks(BATCH) {
            let repo = repos[batch[0].repository];
            match how {
                Write::Batched => issues_batched(&mut conn, repo, batch).await?,
                Write::RowByRow => {
                    let rows: Vec<_> = batch.iter().map(|r| (r, None)).collect();
                    row_by_row(&mut conn, repo, &rows).await?;
                }
            }
        }
    }
    for chunk in pulls.chunk_by(|a, b| a.issue.repository == b.issue.repository) {
        for batch in chunk.chunks(BATCH) {
            let repo = repos[batch[0].issue.repository];
            match how {
                Write::Batched => pulls_batched(&mut conn, repo, batch).await?,
                Write::RowByRow => {
                    let rows: Vec<_> = batch.iter().map(|r| (&r.issue, Some(r))).collect();
                    row_by_row(&mut conn, repo, &rows).await?;
                }
            }
        }
    }
    Ok(started.elapsed())
}

fn ids(n: usize) -> Vec<Uuid> {
    (0..n).map(|_| Uuid::now_v7()).collect()
}

async fn issues_batched(
    conn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    rows: &[IssueRow],
) -> Result<()> {
    let col = |f: fn(&IssueRow) -> Option<String>| rows.iter().map(f).collect::<Vec<_>>();
    sqlx::query(
        "INSERT INTO issue (id, repository_id, native_id, node_id, number, title, body, state,
                            state_reason, author, locked, lock_reason, comment_count,
                            upstream_created_at, upstream_updated_at, closed_at)
         SELECT id, $2, native_id, node_id, number, title, body, state, state_reason, author,
                locked, lock_reason, comment_count, created_at, updated_at, closed_at
           FROM unnest($1::uuid[], $3::int8[], $4::text[], $5::int4[], $6::text[], $7::text[],
                       $8::text[], $9::text[], $10::text[], $11::bool[], $12::text[], $13::int4[],
                       $14::timestamptz[], $15::timestamptz[], $16::timestamptz[])
             AS t(id, native_id, node_id, number, title, body, state, state_reason, author,
                  locked, lock_reason, comment_count, created_at, updated_at, closed_at)
         ON CONFLICT (repository_id, native_id) DO UPDATE SET
            node_id = EXCLUDED.node_id, number = EXCLUDED.number, title = EXCLUDED.title,
            body = EXCLUDED.body, state = EXCLUDED.state, state_reason = EXCLUDED.state_reason,
            author = EXCLUDED.author, locked = coalesce(EXCLUDED.locked, issue.locked),
            lock_reason = EXCLUDED.lock_reason, comment_count = EXCLUDED.comment_count,
            upstream_created_at = EXCLUDED.upstream_created_at,
            upstream_updated_at = EXCLUDED.upstream_updated_at,
            closed_at = EXCLUDED.closed_at, deleted_at = NULL, mirrored_at = now()",
    )
    .bind(ids(rows.len()))
    .bind(repository_id)
    .bind(rows.iter().map(|r| r.native_id).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.node_id.clone()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.number).collect::<Vec<_>>())
    .bind(col(|r| r.title.clone()))
    .bind(col(|r| r.body.clone()))
    .bind(rows.iter().map(|r| r.state.clone()).collect::<Vec<_>>())
    .bind(col(|r| r.state_reason.clone()))
    .bind(col(|r| r.author.clone()))
    .bind(rows.iter().map(|r| r.locked).collect::<Vec<_>>())
    .bind(col(|r| r.lock_reason.clone()))
    .bind(rows.iter().map(|r| r.comment_count).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.created_at).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.updated_at).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.closed_at).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}

async fn pulls_batched(
    conn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    rows: &[PullRow],
) -> Result<()> {
    let col = |f: fn(&PullRow) -> Option<String>| rows.iter().map(f).collect::<Vec<_>>();
    sqlx::query(
        "INSERT INTO pull_request (id, repository_id, native_id, node_id, number, title, body,
                                   state, draft, author, locked, lock_reason, comment_count,
                                   review_count, head_ref, head_sha, base_ref,
                                   upstream_created_at, upstream_updated_at, closed_at, merged_at)
         SELECT id, $2, native_id, node_id, number, title, body, state, draft, author, locked,
                lock_reason, comment_count, review_count, head_ref, head_sha, base_ref,
                created_at, updated_at, closed_at, merged_at
           FROM unnest($1::uuid[], $3::int8[], $4::text[], $5::int4[], $6::text[], $7::text[],
                       $8::text[], $9::bool[], $10::text[], $11::bool[], $12::text[], $13::int4[],
                       $14::int4[], $15::text[], $16::text[], $17::text[], $18::timestamptz[],
                       $19::timestamptz[], $20::timestamptz[], $21::timestamptz[])
             AS t(id, native_id, node_id, number, title, body, state, draft, author, locked,
                  lock_reason, comment_count, review_count, head_ref, head_sha, base_ref,
                  created_at, updated_at, closed_at, merged_at)
         ON CONFLICT (repository_id, native_id) DO UPDATE SET
            node_id = EXCLUDED.node_id, number = EXCLUDED.number, title = EXCLUDED.title,
            body = EXCLUDED.body, state = EXCLUDED.state, draft = EXCLUDED.draft,
            author = EXCLUDED.author, locked = EXCLUDED.locked, lock_reason = EXCLUDED.lock_reason,
            comment_count = EXCLUDED.comment_count, review_count = EXCLUDED.review_count,
            head_ref = EXCLUDED.head_ref, head_sha = EXCLUDED.head_sha, base_ref = EXCLUDED.base_ref,
            upstream_created_at = EXCLUDED.upstream_created_at,
            upstream_updated_at = EXCLUDED.upstream_updated_at,
            closed_at = EXCLUDED.closed_at, merged_at = EXCLUDED.merged_at,
            deleted_at = NULL, mirrored_at = now()",
    )
    .bind(ids(rows.len()))
    .bind(repository_id)
    .bind(rows.iter().map(|r| r.issue.native_id).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.issue.node_id.clone()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.issue.number).collect::<Vec<_>>())
    .bind(col(|r| r.issue.title.clone()))
    .bind(col(|r| r.issue.body.clone()))
    .bind(rows.iter().map(|r| r.issue.state.clone()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.draft).collect::<Vec<_>>())
    .bind(col(|r| r.issue.author.clone()))
    .bind(rows.iter().map(|r| r.issue.locked).collect::<Vec<_>>())
    .bind(col(|r| r.issue.lock_reason.clone()))
    .bind(rows.iter().map(|r| r.issue.comment_count).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.review_count).collect::<Vec<_>>())
    .bind(col(|r| r.head_ref.clone()))
    .bind(col(|r| r.head_sha.clone()))
    .bind(col(|r| r.base_ref.clone()))
    .bind(rows.iter().map(|r| r.issue.created_at).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.issue.updated_at).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.issue.closed_at).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.merged_at).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}

/// One transaction; per row the lock-and-compare read, then the upsert, as the engine's rules
/// require (the engine locks a page's rows in one statement, which is cheaper than this).
async fn row_by_row(
    conn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    rows: &[(&IssueRow, Option<&PullRow>)],
) -> Result<()> {
    use sqlx::Connection as _;
    let mut txn = conn.begin().await?;
    for (r, pull) in rows {
        let table = if pull.is_some() {
            "pull_request"
        } else {
            "issue"
        };
        let _locked: Option<(OffsetDateTime, Option<i32>)> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT upstream_updated_at, comment_count FROM {table}
                  WHERE repository_id = $1 AND native_id = $2 FOR UPDATE"
            )))
            .bind(repository_id)
            .bind(r.native_id)
            .fetch_optional(&mut *txn)
            .await?;
        match pull {
            None => {
                sqlx::query(
                    "INSERT INTO issue (id, repository_id, native_id, node_id, number, title, body,
                                        state, state_reason, author, locked, lock_reason,
                                        comment_count, upstream_created_at, upstream_updated_at,
                                        closed_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
                     ON CONFLICT (repository_id, native_id) DO UPDATE SET
                        node_id = EXCLUDED.node_id, number = EXCLUDED.number,
                        title = EXCLUDED.title, body = EXCLUDED.body, state = EXCLUDED.state,
                        state_reason = EXCLUDED.state_reason, author = EXCLUDED.author,
                        locked = EXCLUDED.locked, lock_reason = EXCLUDED.lock_reason,
                        comment_count = EXCLUDED.comment_count,
                        upstream_created_at = EXCLUDED.upstream_created_at,
                        upstream_updated_at = EXCLUDED.upstream_updated_at,
                        closed_at = EXCLUDED.closed_at, deleted_at = NULL, mirrored_at = now()",
                )
                .bind(Uuid::now_v7())
                .bind(repository_id)
                .bind(r.native_id)
                .bind(&r.node_id)
                .bind(r.number)
                .bind(&r.title)
                .bind(&r.body)
                .bind(&r.state)
                .bind(&r.state_reason)
                .bind(&r.author)
                .bind(r.locked)
                .bind(&r.lock_reason)
                .bind(r.comment_count)
                .bind(r.created_at)
                .bind(r.updated_at)
                .bind(r.closed_at)
                .execute(&mut *txn)
                .await?;
            }
            Some(p) => {
                sqlx::query(
                    "INSERT INTO pull_request (id, repository_id, native_id, node_id, number, title,
                                               body, state, draft, author, locked, lock_reason,
                                               comment_count, review_count, head_ref, head_sha,
                                               base_ref, upstream_created_at, upstream_updated_at,
                                               closed_at, merged_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                             $17, $18, $19, $20, $21)
                     ON CONFLICT (repository_id, native_id) DO UPDATE SET
                        node_id = EXCLUDED.node_id, number = EXCLUDED.number,
                        title = EXCLUDED.title, body = EXCLUDED.body, state = EXCLUDED.state,
                        draft = EXCLUDED.draft, author = EXCLUDED.author,
                        locked = EXCLUDED.locked, lock_reason = EXCLUDED.lock_reason,
                        comment_count = EXCLUDED.comment_count,
                        review_count = EXCLUDED.review_count, head_ref = EXCLUDED.head_ref,
                        head_sha = EXCLUDED.head_sha, base_ref = EXCLUDED.base_ref,
                        upstream_created_at = EXCLUDED.upstream_created_at,
                        upstream_updated_at = EXCLUDED.upstream_updated_at,
                        closed_at = EXCLUDED.closed_at, merged_at = EXCLUDED.merged_at,
                        deleted_at = NULL, mirrored_at = now()",
                )
                .bind(Uuid::now_v7())
                .bind(repository_id)
                .bind(r.native_id)
                .bind(&r.node_id)
                .bind(r.number)
                .bind(&r.title)
                .bind(&r.body)
                .bind(&r.state)
                .bind(p.draft)
                .bind(&r.author)
                .bind(r.locked)
                .bind(&r.lock_reason)
                .bind(r.comment_count)
                .bind(p.review_count)
                .bind(&p.head_ref)
                .bind(&p.head_sha)
                .bind(&p.base_ref)
                .bind(r.created_at)
                .bind(r.updated_at)
                .bind(r.closed_at)
                .bind(p.merged_at)
                .execute(&mut *txn)
                .await?;
            }
        }
    }
    txn.commit().await?;
    Ok(())
}
