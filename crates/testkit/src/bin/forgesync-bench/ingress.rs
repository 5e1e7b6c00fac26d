//! `ingress`: signed GitHub webhooks (real-shaped `issues` payloads from the simulator) posted to
//! a running ingress at several concurrencies, beside two ceilings measured in the same run at
//! the same concurrency: the Postgres transaction ingress makes per delivery (dedup keys, raw
//! body, message, outbox row) done directly with sqlx, and JetStream publishes with ack through
//! `bus::Bus::publish`. Then an open-loop run at half the best Postgres ceiling for the latency goal.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use sea_orm::{ActiveModelTrait as _, ActiveValue::Set, DatabaseConnection, TransactionTrait as _};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use store::entity::inbound_endpoint::Registration;
use store::entity::{ConnectionKind, ConnectionStatus, connection, provider_instance, workspace};
use store::inbound::{Dedup, EndpointIds, NewMessage, Recorded};
use uuid::Uuid;
use vendor_sim::github::webhook::{Delivery, issues_payload};
use vendor_sim::github::{Scenario, generate};

use crate::table::{Table, rate, ratio, thousands};

/// Concurrent senders per closed-loop level.
const CONCURRENCY: [usize; 4] = [1, 8, 32, 64];
/// Deliveries per level and path, unless `FORGESYNC_BENCH_PER_LEVEL` says otherwise (longer
/// levels steady the figures and leave time to attach a profiler).
const PER_LEVEL: usize = 3_000;
/// A level stops issuing after this, whatever is left.
const LEVEL_TIME_CAP: Duration = Duration::from_secs(30);
/// The open-loop run's length and its cap on requests in flight.
const PACED_FOR: Duration = Duration::from_secs(5);
const PACED_MAX_IN_FLIGHT: usize = 512;
const SECRET: &[u8] = b"bench-webhook-secret";
const HOOK_ID: u64 = 4242;

type Op = Arc<dyn Fn(usize) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> + Send + Sync>;

/// What one run of a path measured.
struct Measured {
    ok: usize,
    errors: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    first_error: Option<String>,
}

impl Measured {
    fn per_sec(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let i = ((self.latencies.len() as f64 * p).ceil() as usize).clamp(1, self.latencies.len());
        self.latencies[i - 1].as_secs_f64() * 1000.0
    }
}

/// `concurrency` workers run `op` over indexes `first..first + count`, each as soon as its
/// previous one ends (closed loop).
async fn closed_loop(op: Op, first: usize, count: usize, concurrency: usize) -> Measured {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let op = op.clone();
            let next = next.clone();
            tokio::spawn(async move {
                let mut out = (Vec::new(), 0usize, None::<String>);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count || started.elapsed() > LEVEL_TIME_CAP {
                        return out;
                    }
                    let t = Instant::now();
                    match op(first + i).await {
                        Ok(()) => out.0.push(t.elapsed()),
                        Err(e) => {
                            out.1 += 1;
                            out.2.get_or_insert_with(|| format!("{e:#}"));
                        }
                    }
                }
            })
        })
        .collect();
    let mut m = Measured {
        ok: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::with_capacity(count),
        first_error: None,
    };
    for w in workers {
        if let Ok((lat, errors, first_error)) = w.await {
            m.latencies.extend(lat);
            m.errors += errors;
            m.first_error = m.first_error.or(first_error);
        }
    }
    m.elapsed = started.elapsed();
    m.ok = m.latencies.len();
    m.latencies.sort();
    m
}

/// Starts `op` at a fixed rate whatever the answers (open loop); latency counts from each
/// request's scheduled start, so a stall is not hidden by the sender waiting.
async fn open_loop(op: Op, first: usize, count: usize, per_sec: f64) -> Measured {
    let permits = Arc::new(tokio::sync::Semaphore::new(PACED_MAX_IN_FLIGHT));
    let started = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(count);
    let mut dropped = 0;
    for i in 0..count {
        let at = started + Duration::from_secs_f64(i as f64 / per_sec);
        tokio::time::sleep_until(at).await;
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            dropped += 1;
            continue;
        };
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            op(first + i).await.map(|()| at.elapsed())
        }));
    }
    let mut m = Measured {
        ok: 0,
        errors: dropped,
        elapsed: Duration::ZERO,
        latencies: Vec::with_capacity(count),
        first_error: (dropped > 0)
            .then(|| format!("{dropped} not sent: {PACED_MAX_IN_FLIGHT} already in flight")),
    };
    for t in tasks {
        match t.await {
            Ok(Ok(lat)) => m.latencies.push(lat),
            Ok(Err(e)) => {
                m.errors += 1;
                m.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
            Err(e) => {
                m.errors += 1;
                m.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    m.elapsed = started.elapsed();
    m.ok = m.latencies.len();
    m.latencies.sort();
    m
}

/// One delivery as every path sends it: the same body, event, ids and subject.
struct Prepared {
    delivery: Delivery,
    subject: String,
}

pub async fn run() -> Result<()> {
    let env = testkit::TestEnv::new().await?;
    let db = &env.db.db;
    let per_level = match std::env::var("FORGESYNC_BENCH_PER_LEVEL") {
        Ok(v) => v
            .parse()
            .context("FORGESYNC_BENCH_PER_LEVEL must be a number")?,
        Err(_) => PER_LEVEL,
    };
    let paced_cap = 6_000;
    let total = CONCURRENCY.len() * per_level + paced_cap;
    let generated = generate(&Scenario {
        items: total,
        pull_request_percent: 0,
        ..Scenario::default()
    });
    let model = &generated.model;
    let mut prepared = Vec::with_capacity(total);
    for repo in model.repositories() {
        for issue in repo.issues() {
            let mut delivery =
                Delivery::new("issues", &issues_payload(model, "edited", repo, issue));
            delivery.hook_id = HOOK_ID;
            prepared.push(Prepared {
                subject: format!(
                    "github.{}.{}.issues",
                    repo.owner.to_ascii_lowercase(),
                    repo.name.to_ascii_lowercase()
                ),
                delivery,
            });
        }
    }
    ensure!(
        prepared.len() >= total,
        "the simulator made {} issues",
        prepared.len()
    );
    let body_bytes = prepared
        .iter()
        .map(|p| p.delivery.body.len())
        .sum::<usize>()
        / prepared.len();
    let prepared = Arc::new(prepared);

    // A workspace, an active GitHub connection, and two endpoints: one for ingress, one for the
    // Postgres ceiling (dedup keys are per endpoint, so the same bodies never collide).
    let ws = workspace::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set("bench".into()),
        ..Default::default()
    }
    .insert(db)
    .await?;
    let instance = provider_instance::ensure(db, ConnectionKind::Github, None).await?;
    let conn = connection::ActiveModel {
        id: Set(Uuid::now_v7()),
        workspace_id: Set(ws.id),
        kind: Set(ConnectionKind::Github),
        status: Set(ConnectionStatus::Active),
        version: Set(1),
        lifecycle_generation: Set(1),
        provider_instance_id: Set(instance.id),
        settings: Set(serde_json::json!({})),
        ..Default::default()
    }
    .insert(db)
    .await?;
    let key = store::secrets::Keyring::parse(&testkit::secret_key())?;
    let mut endpoints = Vec::new();
    for provider_ref in [HOOK_ID.to_string(), "bench-ceiling".to_owned()] {
        endpoints.push(
            store::inbound::create_endpoint(
                db,
                &key,
                store::inbound::NewEndpoint {
                    workspace_id: ws.id,
                    connection_id: conn.id,
                    kind: ConnectionKind::Github,
                    registration: Registration::Operator,
                    provider_ref: Some(provider_ref),
                    address_token: None,
                    tenant_keyed: false,
                },
                SECRET,
            )
            .await?,
        );
    }
    // ingress's Postgres pool (FORGESYNC_DB_POOL_SIZE); the Postgres ceiling gets no more.
    let mut common = env.common_args();
    if let Ok(size) = std::env::var("FORGESYNC_DB_POOL_SIZE") {
        common.db_pool_size = size
            .parse()
            .context("FORGESYNC_DB_POOL_SIZE must be a number")?;
    }
    let pool_size = common.db_pool_size as usize;
    let ingress = testkit::spawn(testkit::ingress_config(common)).await?;
    let url = format!("{}/webhooks/github", ingress.url());
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(PACED_MAX_IN_FLIGHT)
        .build()?;
    let pool = env.db.db.get_postgres_connection_pool().clone();

    let ingress_op: Op = {
        let prepared = prepared.clone();
        Arc::new(move |i| {
            let prepared = prepared.clone();
            let http = http.clone();
            let url = url.clone();
            Box::pin(async move {
                let status = prepared[i].delivery.send(&http, &url, SECRET).await?;
                ensure!(
                    status == reqwest::StatusCode::OK,
                    "ingress answered {status}"
                );
                Ok(())
            })
        })
    };
    let ceiling_secret = Arc::new(endpoints[1].secret_current.clone());
    let ceiling = Ceiling {
        endpoint: endpoints[1].id,
        workspace: ws.id,
        connection: conn.id,
    };
    let bus = env.bus.clone();
    let publish_op: Op = {
        let prepared = prepared.clone();
        Arc::new(move |i| {
            let prepared = prepared.clone();
            let bus = bus.clone();
            Box::pin(async move {
                let p = &prepared[i];
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(
                    "Forgesync-Workspace",
                    ceiling.workspace.to_string().as_str(),
                );
                headers.insert(
                    "Forgesync-Connection",
                    ceiling.connection.to_string().as_str(),
                );
                headers.insert("Forgesync-Event", "issues");
                let msg_id = format!("bench-publish:{}", p.delivery.delivery_id);
                bus.publish(
                    &p.subject,
                    &msg_id,
                    headers,
                    bytes::Bytes::from(p.delivery.body.clone()),
                )
                .await?;
                Ok(())
            })
        })
    };

    struct Level {
        concurrency: usize,
        ingress: Measured,
        drained: Option<Duration>,
        postgres: Measured,
        jetstream: Measured,
    }
    let mut levels = Vec::new();
    for (n, &concurrency) in CONCURRENCY.iter().enumerate() {
        let first = n * per_level;
        eprintln!("bench: ingress at concurrency {concurrency} ...");
        let ingress_m = closed_loop(ingress_op.clone(), first, per_level, concurrency).await;
        // The inline publishes after each 2xx finish before the next path runs.
        let drained = drain_outbox(&pool).await?;
        let pg_pool = PgPoolOptions::new()
            .max_connections(concurrency.min(pool_size) as u32)
            .connect(&env.db.url)
            .await?;
        let postgres_op: Op = {
            let prepared = prepared.clone();
            let pg_db = sea_orm::SqlxPostgresConnector::from_sqlx_postgres_pool(pg_pool.clone());
            let secret = ceiling_secret.clone();
            Arc::new(move |i| {
                let prepared = prepared.clone();
                let pg_db = pg_db.clone();
                let secret = secret.clone();
                Box::pin(async move { ceiling.record(&pg_db, &prepared[i], &secret).await })
            })
        };
        eprintln!("bench: Postgres ceiling at concurrency {concurrency} ...");
        let postgres_m = closed_loop(postgres_op, first, per_level, concurrency).await;
        pg_pool.close().await;
        eprintln!("bench: JetStream ceiling at concurrency {concurrency} ...");
        let jetstream_m = closed_loop(publish_op.clone(), first, per_level, concurrency).await;
        levels.push(Level {
            concurrency,
            ingress: ingress_m,
            drained,
            postgres: postgres_m,
            jetstream: jetstream_m,
        });
    }

    // The latency goal: p99 under 100 ms at half the best Postgres ceiling, offered open loop.
    let best_pg = levels
        .iter()
        .map(|l| l.postgres.per_sec())
        .fold(0.0_f64, f64::max);
    let paced_rate = best_pg / 2.0;
    let paced_count = ((paced_rate * PACED_FOR.as_secs_f64()) as usize).clamp(1, paced_cap);
    eprintln!("bench: ingress open loop at {paced_rate:.0}/s ...");
    let paced = open_loop(
        ingress_op.clone(),
        CONCURRENCY.len() * per_level,
        paced_count,
        paced_rate,
    )
    .await;
    let paced_drained = drain_outbox(&pool).await?;
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM inbound_message WHERE endpoint_id = $1")
            .bind(endpoints[0].id)
            .fetch_one(&pool)
            .await?;
    let pg_version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&pool)
        .await?;
    ingress.stop().await?;

    println!();
    println!(
        "ingress: signed GitHub `issues` deliveries (real-shaped, {body_bytes} bytes on average), \
         {per_level} per path and concurrency, closed loop"
    );
    println!("machine: {}; PostgreSQL {pg_version}", crate::machine());
    println!(
        "Postgres ceiling: the per-delivery transaction ingress makes (store::inbound::record: \
         endpoint re-check + 2 dedup keys, body, message, dispatch record), called directly, pool \
         of min(concurrency, {pool_size}) like ingress's"
    );
    println!("JetStream ceiling: bus::Bus::publish with ack, same bodies and subjects");
    println!();
    let mut t = Table::new(&[
        "concurrency / path",
        "ok",
        "errors",
        "per s",
        "p50 ms",
        "p99 ms",
        "÷ Postgres",
    ]);
    for l in &levels {
        let pg = l.postgres.per_sec();
        for (name, m) in [
            ("ingress: POST /webhooks/github → 200", &l.ingress),
            ("ceiling: Postgres transaction", &l.postgres),
            ("ceiling: JetStream publish + ack", &l.jetstream),
        ] {
            t.row(vec![
                format!("{:>2}  {name}", l.concurrency),
                thousands(m.ok as u64),
                thousands(m.errors as u64),
                rate(m.per_sec()),
                format!("{:.1}", m.percentile_ms(0.50)),
                format!("{:.1}", m.percentile_ms(0.99)),
                ratio(m.per_sec(), pg),
            ]);
        }
    }
    t.print();
    println!();
    let mut t = Table::new(&[
        "open loop (latency from scheduled start)",
        "offered/s",
        "ok",
        "errors",
        "achieved/s",
        "p50 ms",
        "p99 ms",
    ]);
    t.row(vec![
        "ingress at half the best Postgres ceiling".into(),
        rate(paced_rate),
        thousands(paced.ok as u64),
        thousands(paced.errors as u64),
        rate(paced.per_sec()),
        format!("{:.1}", paced.percentile_ms(0.50)),
        format!("{:.1}", paced.percentile_ms(0.99)),
    ]);
    t.print();
    println!();
    let best_ingress = levels
        .iter()
        .map(|l| l.ingress.per_sec())
        .fold(0.0_f64, f64::max);
    println!(
        "goal 1, at least half the Postgres ceiling: best ingress {} /s vs best ceiling {} /s = {} → {}",
        rate(best_ingress),
        rate(best_pg),
        ratio(best_ingress, best_pg),
        if best_ingress >= best_pg / 2.0 {
            "met"
        } else {
            "NOT met"
        }
    );
    let p99 = paced.percentile_ms(0.99);
    println!(
        "goal 2, p99 under 100 ms at half the ceiling ({} /s offered): p99 {p99:.1} ms → {}",
        rate(paced_rate),
        if p99 < 100.0 && paced.errors == 0 {
            "met"
        } else {
            "NOT met"
        }
    );
    for l in &levels {
        println!(
            "concurrency {:>2}: inline publishes drained {}",
            l.concurrency,
            l.drained.map_or("NOT within 60 s".to_owned(), |d| format!(
                "{:.2} s after the last 2xx",
                d.as_secs_f64()
            ))
        );
    }
    println!(
        "open loop: drained {}; {stored} messages stored for {} accepted deliveries",
        paced_drained.map_or("NOT within 60 s".to_owned(), |d| format!(
            "{:.2} s after the last 2xx",
            d.as_secs_f64()
        )),
        levels.iter().map(|l| l.ingress.ok).sum::<usize>() + paced.ok
    );
    for l in &levels {
        for (name, m) in [
            ("ingress", &l.ingress),
            ("Postgres", &l.postgres),
            ("JetStream", &l.jetstream),
        ] {
            if let Some(e) = &m.first_error {
                println!("first error, {name} at concurrency {}: {e}", l.concurrency);
            }
        }
    }
    if let Some(e) = &paced.first_error {
        println!("first error, open loop: {e}");
    }
    env.db.drop().await;
    Ok(())
}

/// Waits until every outbox row is published (ingress publishes inline after each 2xx, the relay
/// takes what is left); `None` when rows are still pending after a minute.
async fn drain_outbox(pool: &PgPool) -> Result<Option<Duration>> {
    let started = Instant::now();
    loop {
        let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
            .fetch_one(pool)
            .await?;
        if pending == 0 {
            return Ok(Some(started.elapsed()));
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The Postgres work of one accepted delivery, without ingress around it: the transaction
/// ingress opens, and `store::inbound::record`, the very call ingress makes in it (endpoint
/// re-check and dedup keys, raw body, message, dispatch record), then the commit.
#[derive(Clone, Copy)]
struct Ceiling {
    endpoint: Uuid,
    workspace: Uuid,
    connection: Uuid,
}

impl Ceiling {
    async fn record(&self, db: &DatabaseConnection, p: &Prepared, secret: &str) -> Result<()> {
        let d = &p.delivery;
        let headers = BTreeMap::from([
            ("x-github-event".to_owned(), d.event.clone()),
            ("x-github-delivery".to_owned(), d.delivery_id.clone()),
            ("x-github-hook-id".to_owned(), d.hook_id.to_string()),
            (
                "user-agent".to_owned(),
                "GitHub-Hookshot/vendor-sim".to_owned(),
            ),
            ("content-type".to_owned(), "application/json".to_owned()),
        ]);
        let txn = db.begin().await?;
        let recorded = store::inbound::record(
            &txn,
            NewMessage {
                endpoint: EndpointIds {
                    endpoint_id: self.endpoint,
                    workspace_id: self.workspace,
                    connection_id: self.connection,
                    kind: ConnectionKind::Github,
                },
                verification: "signature".into(),
                headers,
                body: d.body.clone(),
                event: d.event.clone(),
                subject: p.subject.clone(),
                dedup: Dedup::Keys {
                    event_id: Some(d.delivery_id.clone()),
                    digest_window: Duration::from_secs(24 * 3600),
                    verified_by: Some(secret.to_owned()),
                },
                retention: Duration::from_secs(7 * 24 * 3600),
                inline_body_max: 1024 * 1024,
                relay_hold: Duration::ZERO,
            },
        )
        .await?;
        ensure!(
            matches!(recorded, Recorded::Accepted(_)),
            "the ceiling's delivery was not stored: {recorded:?}"
        );
        txn.commit().await.context("commit")?;
        Ok(())
    }
}
