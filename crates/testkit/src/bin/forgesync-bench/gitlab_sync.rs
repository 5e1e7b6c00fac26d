//! `gitlab-sync`: an INITIAL sync of 12 simulated GitLab projects in subgroups (10,000 issues
//! and merge requests) run by gitlab-sync's engine through gitlab-client over HTTP, beside the
//! raw Postgres upsert ceiling for the very rows it wrote, measured in the same run on the same
//! database. The projects are monitored as discovery records them (by native id); the job is
//! claimed and run as a replica runs it.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, ensure};
use sea_orm::EntityTrait;
use sync_engine::{Engine, JobOutcome, Vendor as _};
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::gitlab::{GitlabSim, Model, NewIssue, NewMergeRequest, ops};

use crate::github_sync::{Write, ceiling, load_rows};
use crate::table::{Table, rate, ratio, thousands};

const TOKEN: &str = "glpat-bench";
const PROJECTS: u64 = 12;
const ITEMS: u64 = 10_000;

pub async fn run() -> Result<()> {
    let mut model = Model::default();
    model.add_token(TOKEN);
    // Enough requests for the whole job in one window.
    model.rate_limit.limit = 100_000;
    model.rate_limit.remaining = 100_000;
    let top = model.add_group(None, "bench");
    let subgroups = [
        model.add_group(Some(top), "platform"),
        model.add_group(Some(top), "apps"),
        model.add_group(Some(top), "tools"),
    ];
    let mut projects = Vec::new();
    for p in 0..PROJECTS {
        let group = subgroups[p as usize % subgroups.len()];
        let id = model.add_project(group, &format!("project-{p}"));
        projects.push((group, id, format!("project-{p}")));
    }
    let updated = OffsetDateTime::from_unix_timestamp(1_700_000_000)?;
    for n in 0..ITEMS {
        let (_, project, _) = &projects[(n % PROJECTS) as usize];
        let at = updated + time::Duration::seconds(n as i64);
        if n % 2 == 0 {
            model.add_issue(
                *project,
                NewIssue {
                    title: format!("issue {n}"),
                    updated_at: at,
                },
            );
        } else {
            model.add_merge_request(
                *project,
                NewMergeRequest {
                    title: format!("merge request {n}"),
                    updated_at: at,
                },
            );
        }
    }
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
    let started = Instant::now();
    let job = engine.jobs.claim(job_id).await?.context("claimable")?;
    let source = engine.vendor.source(&conn).await?;
    let outcome = engine.run(&job, instance, source).await?;
    let wall = started.elapsed();
    ensure!(
        outcome == JobOutcome::Succeeded,
        "the INITIAL job ended {outcome:?}; no figures"
    );
    let (issues, pulls) = load_rows(&pool).await?;
    let items = (issues.len() + pulls.len()) as u64;
    ensure!(items == ITEMS, "mirrored {items} rows, expected {ITEMS}");
    let requests = sim.calls(ops::PROJECT_ISSUES) + sim.calls(ops::PROJECT_MERGE_REQUESTS);
    sim.shutdown().await;

    let batched = ceiling(&pool, &issues, &pulls, 1, Write::Batched).await?;
    let per_row = ceiling(&pool, &issues, &pulls, 2, Write::RowByRow).await?;
    let pg_version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&pool)
        .await?;
    let engine_rate = items as f64 / wall.as_secs_f64();
    let batched_rate = items as f64 / batched.as_secs_f64();
    let per_row_rate = items as f64 / per_row.as_secs_f64();

    println!();
    println!(
        "gitlab-sync: INITIAL sync of {PROJECTS} projects in subgroups, {} items ({} issues, {} merge requests), pages of {page_size}, {} GraphQL requests",
        thousands(items),
        thousands(issues.len() as u64),
        thousands(pulls.len() as u64),
        thousands(requests),
    );
    println!("machine: {}; PostgreSQL {pg_version}", crate::machine());
    println!();
    let mut t = Table::new(&["path", "items", "seconds", "items/s", "engine ÷ this"]);
    t.row(vec![
        "engine: INITIAL job, gitlab-client → simulator over HTTP".into(),
        thousands(items),
        format!("{:.2}", wall.as_secs_f64()),
        rate(engine_rate),
        "1.00×".into(),
    ]);
    t.row(vec![
        "ceiling: INSERT … ON CONFLICT DO UPDATE, 100 rows/statement+txn".into(),
        thousands(items),
        format!("{:.2}", batched.as_secs_f64()),
        rate(batched_rate),
        ratio(engine_rate, batched_rate),
    ]);
    t.row(vec![
        "ceiling: per row SELECT … FOR UPDATE + upsert, 100 rows/txn".into(),
        thousands(items),
        format!("{:.2}", per_row.as_secs_f64()),
        rate(per_row_rate),
        ratio(engine_rate, per_row_rate),
    ]);
    t.print();
    println!();
    println!(
        "engine time is claim → job finished; the ceilings run after it, one connection, \
         sequentially, like the engine; notes are not part of this job (gitlab-sync's notes \
         reconciliation reads them)"
    );
    env.db.drop().await;
    Ok(())
}
