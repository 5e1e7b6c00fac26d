//! `outline-sync`: the two write paths of outline-sync, each beside its ceiling measured in the
//! same run on the same servers.
//!
//! - A RECONCILIATION of a simulated team (3 collections, 6,000 documents, pages of 100) run by
//!   the running service's job consumer over HTTP, queued as Sync now queues it: documents
//!   written per second (the job's `started_at` → `finished_at`) beside batched upserts of the
//!   very rows it wrote into `outline_document` (one multi-row `INSERT … ON CONFLICT DO UPDATE`
//!   per page of 100, committed per page, from one connection like the engine).
//! - Signed deliveries (updates, moves and deletes of distinct documents, bodies as the
//!   simulator sent them) POSTed into ingress by several senders and applied by the webhook
//!   consumer: deliveries applied per second (first send → last event row) beside the row-locked
//!   ceiling, per delivery one transaction (the document row `FOR UPDATE`, updated forward, its
//!   event and the event's outbox row) at the consumer's concurrency. Path and ceiling alternate
//!   in rounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use futures::StreamExt as _;
use sea_orm::{EntityTrait as _, TransactionTrait as _};
use serde_json::Value;
use sqlx::PgPool;
use store::entity::inbound_endpoint::Registration;
use store::entity::{ConnectionKind, JobTrigger, JobType};
use store::inbound::NewEndpoint;
use store::secrets::Keyring;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;
use vendor_sim::outline::{Model, NewDocument, OutlineSim};

use crate::table::{Table, rate, ratio, thousands};

/// Collections of the team.
const COLLECTIONS: usize = 3;
/// Documents per collection.
const DOCUMENTS: usize = 2_000;
/// Items per page, read and written.
const PAGE: usize = 100;
/// Deliveries in all, each a change to its own document, split over the rounds.
const DELIVERIES: usize = 3_000;
/// Path/ceiling rounds of deliveries, alternating.
const ROUNDS: usize = 2;
/// Concurrent senders into ingress.
const SENDERS: usize = 16;
/// A phase of the path gives up after this.
const CAP: Duration = Duration::from_secs(120);
const TOKEN: &str = "ol_api_bench";
/// The subject of the ceiling's outbox rows (held from the relay, deleted after each round).
const CEILING_SUBJECT: &str = "bench.outline-sync.ceiling";
/// Goals: engine ÷ ceiling.
const RECONCILE_GOAL: f64 = 0.25;
const DELIVERY_GOAL: f64 = 0.5;

/// A document row as the reconcile wrote it, written again by the ceiling.
#[derive(sqlx::FromRow)]
struct DocumentRow {
    outline_id: String,
    collection_outline_id: String,
    parent_outline_id: Option<String>,
    title: Option<String>,
    text: Option<String>,
    url_id: Option<String>,
    created_at_upstream: Option<OffsetDateTime>,
    updated_at: Option<OffsetDateTime>,
    published_at: Option<OffsetDateTime>,
    archived_at: Option<OffsetDateTime>,
}

/// One delivery as the simulator sent it, and the change it carries for the ceiling.
struct Delivery {
    body: Vec<u8>,
    event: String,
    model: DocumentModel,
}

/// The document a delivery's `payload.model` carries.
struct DocumentModel {
    id: String,
    collection_id: String,
    parent_document_id: Option<String>,
    title: Option<String>,
    text: Option<String>,
    updated_at: OffsetDateTime,
    deleted_at: Option<OffsetDateTime>,
}

impl DocumentModel {
    fn parse(model: &Value) -> Result<DocumentModel> {
        let text = |key: &str| model.get(key).and_then(Value::as_str).map(str::to_owned);
        let date = |key: &str| -> Result<Option<OffsetDateTime>> {
            text(key)
                .map(|s| OffsetDateTime::parse(&s, &Rfc3339))
                .transpose()
                .with_context(|| format!("the model's {key}"))
        };
        Ok(DocumentModel {
            id: text("id").context("the model's id")?,
            collection_id: text("collectionId").context("the model's collectionId")?,
            parent_document_id: text("parentDocumentId"),
            title: text("title"),
            text: text("text"),
            updated_at: date("updatedAt")?.context("the model's updatedAt")?,
            deleted_at: date("deletedAt")?,
        })
    }
}

pub async fn run() -> Result<()> {
    let env = testkit::TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();

    // The team: its documents were written a day ago, one a millisecond, and never delivered.
    let mut model = Model::new("bench");
    model.add_token(TOKEN);
    let collections: Vec<String> = (0..COLLECTIONS)
        .map(|i| model.add_collection(&format!("Collection {i}")))
        .collect();
    let since = OffsetDateTime::now_utc() - time::Duration::days(1);
    let text = "A paragraph of a runbook: what the service does, who is on call, the dashboard \
                to open first and the three commands that restart it safely. "
        .repeat(6);
    model.quietly(|m| -> Result<()> {
        for (c, collection) in collections.iter().enumerate() {
            for i in 0..DOCUMENTS {
                let at = since + time::Duration::milliseconds((c * DOCUMENTS + i) as i64);
                m.add_document(
                    NewDocument::new(collection, &format!("Document {c}/{i}"))
                        .text(&text)
                        .dated(at),
                )
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            }
        }
        Ok(())
    })?;
    let sim = OutlineSim::start(model).await?;

    // A workspace's Outline connection, its subscription (delivering nowhere: the bench posts
    // the bodies itself) and its registered endpoint at ingress.
    let instance = Uuid::now_v7();
    sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'outline')")
        .bind(instance)
        .execute(&pool)
        .await?;
    let ingress = testkit::spawn(testkit::ingress_config(env.common_args())).await?;
    let workspace_id = Uuid::now_v7();
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'bench')")
        .bind(workspace_id)
        .execute(&pool)
        .await?;
    let [connection_id, ceiling_connection] = [Uuid::now_v7(), Uuid::now_v7()];
    for id in [connection_id, ceiling_connection] {
        sqlx::query(
            "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id,
                                     settings)
             VALUES ($1, $2, 'outline', 'active', $3, '{}')",
        )
        .bind(id)
        .bind(workspace_id)
        .bind(instance)
        .execute(&pool)
        .await?;
    }
    let keyring = Keyring::parse(&testkit::secret_key())?;
    store::secrets::put(
        &env.db.db,
        &keyring,
        connection_id,
        "token",
        TOKEN.as_bytes(),
    )
    .await?;
    let address = store::inbound::random_token()?;
    let secret = store::inbound::random_token()?;
    let route = format!("{}/webhooks/outline/{address}", ingress.url());
    let subscription = sim
        .model(|m| {
            m.create_subscription(
                "forgesync",
                "http://127.0.0.1:9/nowhere",
                &["*".to_owned()],
                Some(&secret),
            )
        })
        .map_err(|e| anyhow::anyhow!("{e:?}"))?
        .id;
    store::inbound::create_endpoint(
        &env.db.db,
        &keyring,
        NewEndpoint {
            workspace_id,
            connection_id,
            kind: ConnectionKind::Outline,
            registration: Registration::Registered,
            provider_ref: Some(subscription),
            address_token: Some(address),
            tenant_keyed: false,
        },
        secret.as_bytes(),
    )
    .await?;
    let config: outline_sync::Config = testkit::config(
        env.common_args(),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            format!("--outline-api-url={}", sim.base_url()),
            "--reconcile-cron=off".to_owned(),
            format!("--page-size={PAGE}"),
        ],
    )?;
    let concurrency = config.sync.webhook_concurrency.max(1);
    let service = testkit::spawn(config).await?;

    // 1. The RECONCILIATION, queued as Sync now queues it; the service's relay publishes it.
    eprintln!(
        "bench: RECONCILIATION of {} documents in {COLLECTIONS} collections ...",
        thousands((COLLECTIONS * DOCUMENTS) as u64)
    );
    let list_calls = sim.calls(vendor_sim::outline::methods::DOCUMENTS_LIST);
    let (job_took, queued_to_finished) = reconcile(&env, &pool, connection_id).await?;
    let list_calls = sim.calls(vendor_sim::outline::methods::DOCUMENTS_LIST) - list_calls;
    let rows: Vec<DocumentRow> = sqlx::query_as(
        "SELECT outline_id, collection_outline_id, parent_outline_id, title, text, url_id,
                created_at_upstream, updated_at, published_at, archived_at
           FROM outline_document WHERE connection_id = $1 AND deleted_at IS NULL
          ORDER BY collection_outline_id, created_at_upstream",
    )
    .bind(connection_id)
    .fetch_all(&pool)
    .await?;
    ensure!(
        rows.len() == COLLECTIONS * DOCUMENTS,
        "the reconcile mirrored {} documents of {}",
        rows.len(),
        COLLECTIONS * DOCUMENTS
    );
    eprintln!("bench: ceiling, batched upserts of the same rows ...");
    let collection_ids = ceiling_collections(&pool, workspace_id, ceiling_connection).await?;
    let upserts = upsert_ceiling(&pool, ceiling_connection, &collection_ids, &rows).await?;

    // 2. Deliveries: each a change to its own document, rotated update → move → delete, as the
    // simulator sends them (recorded while the subscription's URL answers nowhere).
    let changed: Vec<String> = rows
        .iter()
        .step_by(rows.len() / DELIVERIES)
        .take(DELIVERIES)
        .map(|r| r.outline_id.clone())
        .collect();
    ensure!(changed.len() == DELIVERIES, "too few documents to change");
    sim.model(|m| -> Result<()> {
        for (i, id) in changed.iter().enumerate() {
            let changed = match i % 3 {
                0 => m.update_document(id, Some(&format!("Renamed {i}")), Some("new text")),
                1 => {
                    let from = &m.document(id).context("a seeded document")?.collection_id;
                    let at = collections.iter().position(|c| c == from).unwrap_or(0);
                    let to = collections[(at + 1) % collections.len()].clone();
                    m.move_document(id, &to, None)
                }
                _ => m.delete_document(id),
            };
            changed.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
        Ok(())
    })?;
    sim.settle().await;
    let deliveries: Vec<Delivery> = sim
        .deliveries()
        .into_iter()
        .filter(|d| d.event.starts_with("documents."))
        .map(|d| {
            let model = DocumentModel::parse(&d.json()["payload"]["model"])?;
            Ok(Delivery {
                body: d.body,
                event: d.event,
                model,
            })
        })
        .collect::<Result<_>>()?;
    ensure!(
        deliveries.len() == DELIVERIES,
        "the simulator sent {} deliveries for {DELIVERIES} changes",
        deliveries.len()
    );
    let body_bytes = deliveries.iter().map(|d| d.body.len()).sum::<usize>() / deliveries.len();
    let deliveries = Arc::new(deliveries);
    drained(&env, &pool).await?;

    let per_round = DELIVERIES / ROUNDS;
    let route = Arc::new(route);
    let secret = Arc::new(secret);
    let mut path_rounds = Vec::new();
    let mut ceiling_rounds = Vec::new();
    for round in 0..ROUNDS {
        let range = round * per_round..(round + 1) * per_round;
        eprintln!(
            "bench: round {}: {per_round} deliveries into ingress, {SENDERS} senders ...",
            round + 1
        );
        let path = deliver(
            &pool,
            connection_id,
            &route,
            &secret,
            &deliveries,
            range.clone(),
        )
        .await
        .with_context(|| format!("round {}'s path", round + 1))?;
        drained(&env, &pool).await?;
        eprintln!(
            "bench: round {}: ceiling, {per_round} row-locked transactions on {concurrency} \
             connections ...",
            round + 1
        );
        let ceiling = delivery_ceiling(
            &env.db.url,
            ceiling_connection,
            workspace_id,
            &collection_ids,
            &deliveries[range],
            concurrency,
        )
        .await?;
        sqlx::query("DELETE FROM outbox WHERE subject = $1")
            .bind(CEILING_SUBJECT)
            .execute(&pool)
            .await?;
        path_rounds.push(path);
        ceiling_rounds.push(ceiling);
    }

    let pg_version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&pool)
        .await?;
    let durability: (String, String) =
        sqlx::query_as("SELECT current_setting('fsync'), current_setting('synchronous_commit')")
            .fetch_one(&pool)
            .await?;
    service.stop().await?;
    ingress.stop().await?;
    sim.shutdown().await;

    let documents = rows.len() as u64;
    println!();
    println!(
        "outline-sync: RECONCILIATION of one team ({COLLECTIONS} collections, {} documents of \
         ~{} bytes, pages of {PAGE}, {list_calls} documents.list calls), then {} signed \
         deliveries ({body_bytes} bytes on average; updates, moves and deletes of distinct \
         documents) into ingress from {SENDERS} senders, {ROUNDS} rounds (path, then ceiling)",
        thousands(documents),
        text.len(),
        thousands(DELIVERIES as u64),
    );
    println!(
        "machine: {}; PostgreSQL {pg_version} (fsync {}, synchronous_commit {})",
        crate::machine(),
        durability.0,
        durability.1
    );
    println!();
    let engine_rate = documents as f64 / job_took.as_secs_f64();
    let ceiling_rate = documents as f64 / upserts.as_secs_f64();
    let mut t = Table::new(&[
        "reconcile",
        "documents",
        "seconds",
        "docs/s",
        "engine ÷ this",
    ]);
    t.row(vec![
        "outline-sync: RECONCILIATION job, started → finished".into(),
        thousands(documents),
        format!("{:.2}", job_took.as_secs_f64()),
        rate(engine_rate),
        "1.00×".into(),
    ]);
    t.row(vec![
        "  (queued → finished, with the relay and the job consumer's pickup)".into(),
        thousands(documents),
        format!("{:.2}", queued_to_finished.as_secs_f64()),
        rate(documents as f64 / queued_to_finished.as_secs_f64()),
        String::new(),
    ]);
    t.row(vec![
        format!("ceiling: INSERT … ON CONFLICT DO UPDATE, {PAGE} rows/statement+txn"),
        thousands(documents),
        format!("{:.2}", upserts.as_secs_f64()),
        rate(ceiling_rate),
        ratio(engine_rate, ceiling_rate),
    ]);
    t.print();
    println!();
    let reconcile_ratio = engine_rate / ceiling_rate;
    println!(
        "reconcile ÷ ceiling: {reconcile_ratio:.2}×; goal {RECONCILE_GOAL}× → {}",
        met(reconcile_ratio >= RECONCILE_GOAL)
    );
    println!();

    let mut t = Table::new(&[
        "round  deliveries",
        "deliveries",
        "errors",
        "seconds",
        "per s",
        "p50 ms",
        "p99 ms",
        "applied ÷ ceiling",
    ]);
    let mut ratios = Vec::new();
    for (i, (p, c)) in path_rounds.iter().zip(&ceiling_rounds).enumerate() {
        let applied = p.applied_count as f64 / p.applied.as_secs_f64();
        let ceiling = c.written as f64 / c.took.as_secs_f64();
        ratios.push(applied / ceiling);
        t.row(vec![
            format!("{:>5}  ingress: POST /webhooks/outline/… → 2xx", i + 1),
            thousands(p.sent as u64),
            thousands(p.errors as u64),
            format!("{:.2}", p.acked.as_secs_f64()),
            rate(p.sent.saturating_sub(p.errors) as f64 / p.acked.as_secs_f64()),
            format!("{:.1}", percentile_ms(&p.latencies, 0.50)),
            format!("{:.1}", percentile_ms(&p.latencies, 0.99)),
            String::new(),
        ]);
        t.row(vec![
            "       outline-sync: applied, first send → last event".into(),
            thousands(p.applied_count as u64),
            String::new(),
            format!("{:.2}", p.applied.as_secs_f64()),
            rate(applied),
            String::new(),
            String::new(),
            ratio(applied, ceiling),
        ]);
        t.row(vec![
            format!("       ceiling: row-locked 1-delivery txn, {concurrency} connections"),
            thousands(c.written as u64),
            "0".into(),
            format!("{:.2}", c.took.as_secs_f64()),
            rate(ceiling),
            format!("{:.1}", percentile_ms(&c.latencies, 0.50)),
            format!("{:.1}", percentile_ms(&c.latencies, 0.99)),
            "1.00×".into(),
        ]);
    }
    t.print();
    println!();
    ratios.sort_by(f64::total_cmp);
    let median = if ratios.len().is_multiple_of(2) {
        (ratios[ratios.len() / 2 - 1] + ratios[ratios.len() / 2]) / 2.0
    } else {
        ratios[ratios.len() / 2]
    };
    println!(
        "applied ÷ ceiling over {ROUNDS} rounds: median {median:.2}× (spread {:.2}×-{:.2}×); \
         goal {DELIVERY_GOAL}× → {}",
        ratios[0],
        ratios[ratios.len() - 1],
        met(median >= DELIVERY_GOAL)
    );
    for (i, p) in path_rounds.iter().enumerate() {
        if p.applied_count < p.sent {
            println!(
                "round {}: only {} of {} deliveries applied within {} s",
                i + 1,
                p.applied_count,
                p.sent,
                CAP.as_secs()
            );
        }
        if let Some(e) = &p.first_error {
            println!("first error, round {}: {e}", i + 1);
        }
    }
    println!(
        "the reconcile also records one event (and its outbox row) per new document, which the \
         ceiling does not write; the delivery ceiling writes the document row, its event and the \
         event's outbox row, and nothing of ingress."
    );
    env.db.drop().await;
    Ok(())
}

fn met(yes: bool) -> &'static str {
    if yes { "met" } else { "NOT met" }
}

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[i - 1].as_secs_f64() * 1000.0
}

/// Queues a RECONCILIATION for the connection and waits for its end: how long the job ran
/// (`started_at` → `finished_at`), and queued → finished as the bench saw it.
async fn reconcile(
    env: &testkit::TestEnv,
    pool: &PgPool,
    connection_id: Uuid,
) -> Result<(Duration, Duration)> {
    let conn = store::entity::connection::Entity::find_by_id(connection_id)
        .one(&env.db.db)
        .await?
        .context("the connection")?;
    let queued_at = Instant::now();
    let txn = env.db.db.begin().await?;
    let job = store::jobs::queue(
        &txn,
        &conn,
        JobType::Reconciliation,
        JobTrigger::Manual,
        Some(format!("bench:{}", Uuid::now_v7())),
    )
    .await?
    .context("the job was not queued")?;
    txn.commit().await?;
    loop {
        let ended: Option<(String, Option<String>, OffsetDateTime, OffsetDateTime)> =
            sqlx::query_as(
                "SELECT status::text, error, started_at, finished_at FROM sync_job
                  WHERE id = $1 AND finished_at IS NOT NULL AND started_at IS NOT NULL",
            )
            .bind(job.id)
            .fetch_optional(pool)
            .await?;
        if let Some((status, error, started, finished)) = ended {
            let waited = queued_at.elapsed();
            ensure!(
                status == "succeeded",
                "the RECONCILIATION ended {status} ({error:?}); no figures"
            );
            return Ok(((finished - started).try_into()?, waited));
        }
        ensure!(
            queued_at.elapsed() < CAP,
            "the RECONCILIATION did not end within {} s",
            CAP.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The ceiling connection's collections, as the reconcile made the path's: Outline's id → ours.
async fn ceiling_collections(
    pool: &PgPool,
    workspace_id: Uuid,
    ceiling_connection: Uuid,
) -> Result<std::collections::HashMap<String, Uuid>> {
    let mut out = std::collections::HashMap::new();
    let listed: Vec<(String,)> =
        sqlx::query_as("SELECT DISTINCT collection_outline_id FROM outline_document ORDER BY 1")
            .fetch_all(pool)
            .await?;
    for (outline_id,) in listed {
        let id = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO outline_collection (id, connection_id, workspace_id, outline_id)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(id)
        .bind(ceiling_connection)
        .bind(workspace_id)
        .bind(&outline_id)
        .execute(pool)
        .await?;
        out.insert(outline_id, id);
    }
    Ok(out)
}

/// The rows written again for the ceiling connection, a page of [`PAGE`] per statement and
/// transaction, sequentially from one connection; how long it took.
async fn upsert_ceiling(
    pool: &PgPool,
    connection_id: Uuid,
    collection_ids: &std::collections::HashMap<String, Uuid>,
    rows: &[DocumentRow],
) -> Result<Duration> {
    let mut conn = pool.acquire().await?;
    let started = Instant::now();
    for page in rows.chunks(PAGE) {
        let mut txn = sqlx::Connection::begin(&mut *conn).await?;
        sqlx::query(
            "INSERT INTO outline_document (id, connection_id, collection_id, outline_id,
                                           collection_outline_id, parent_outline_id, title, text,
                                           url_id, created_at_upstream, updated_at, published_at,
                                           archived_at)
             SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[],
                                  $6::text[], $7::text[], $8::text[], $9::text[],
                                  $10::timestamptz[], $11::timestamptz[], $12::timestamptz[],
                                  $13::timestamptz[])
             ON CONFLICT (connection_id, outline_id) DO UPDATE SET
                 collection_id = EXCLUDED.collection_id,
                 collection_outline_id = EXCLUDED.collection_outline_id,
                 parent_outline_id = EXCLUDED.parent_outline_id, title = EXCLUDED.title,
                 text = EXCLUDED.text, url_id = EXCLUDED.url_id,
                 created_at_upstream = EXCLUDED.created_at_upstream,
                 updated_at = EXCLUDED.updated_at, published_at = EXCLUDED.published_at,
                 archived_at = EXCLUDED.archived_at, deleted_at = NULL, seen_at = now()",
        )
        .bind(page.iter().map(|_| Uuid::now_v7()).collect::<Vec<_>>())
        .bind(vec![connection_id; page.len()])
        .bind(
            page.iter()
                .map(|r| collection_ids.get(&r.collection_outline_id).copied())
                .collect::<Option<Vec<_>>>()
                .context("a row's collection")?,
        )
        .bind(
            page.iter()
                .map(|r| r.outline_id.clone())
                .collect::<Vec<_>>(),
        )
        .bind(
            page.iter()
                .map(|r| r.collection_outline_id.clone())
                .collect::<Vec<_>>(),
        )
        .bind(
            page.iter()
                .map(|r| r.parent_outline_id.clone())
                .collect::<Vec<_>>(),
        )
        .bind(page.iter().map(|r| r.title.clone()).collect::<Vec<_>>())
        .bind(page.iter().map(|r| r.text.clone()).collect::<Vec<_>>())
        .bind(page.iter().map(|r| r.url_id.clone()).collect::<Vec<_>>())
        .bind(
            page.iter()
                .map(|r| r.created_at_upstream)
                .collect::<Vec<_>>(),
        )
        .bind(page.iter().map(|r| r.updated_at).collect::<Vec<_>>())
        .bind(page.iter().map(|r| r.published_at).collect::<Vec<_>>())
        .bind(page.iter().map(|r| r.archived_at).collect::<Vec<_>>())
        .execute(&mut *txn)
        .await?;
        txn.commit().await?;
    }
    Ok(started.elapsed())
}

/// Waits until outline-sync has nothing left: its events consumer with nothing pending or in
/// flight, and no outbox row of ingress or the jobs unpublished, three checks in a row.
async fn drained(env: &testkit::TestEnv, pool: &PgPool) -> Result<()> {
    let deadline = Instant::now() + CAP;
    let ns = env.bus.namespace();
    let stream = env
        .bus
        .jetstream()
        .get_stream(ns.name(bus::Stream::WebhooksOutline.name()))
        .await?;
    let mut quiet = 0;
    while quiet < 3 {
        ensure!(Instant::now() < deadline, "outline-sync did not settle");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut busy = match stream.consumer_info(ns.name("outline-sync-events")).await {
            Ok(info) => info.num_pending > 0 || info.num_ack_pending > 0,
            Err(_) => true,
        };
        // The events outline-sync records are the relay's, not the consumer's: not counted.
        let unpublished: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox WHERE subject NOT LIKE 'events.%' AND subject <> $1",
        )
        .bind(CEILING_SUBJECT)
        .fetch_one(pool)
        .await?;
        busy |= unpublished > 0;
        quiet = if busy { 0 } else { quiet + 1 };
    }
    Ok(())
}

/// What one round of deliveries measured.
struct PathRound {
    sent: usize,
    errors: usize,
    first_error: Option<String>,
    acked: Duration,
    applied: Duration,
    applied_count: usize,
    latencies: Vec<Duration>,
}

/// Posts `range` of the deliveries into ingress from [`SENDERS`] closed-loop senders, each
/// signed at its send as Outline signs it, while counting the connection's events every 10 ms
/// until one per delivery is recorded.
async fn deliver(
    pool: &PgPool,
    connection_id: Uuid,
    route: &Arc<String>,
    secret: &Arc<String>,
    deliveries: &Arc<Vec<Delivery>>,
    range: std::ops::Range<usize>,
) -> Result<PathRound> {
    let count_events = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM integration_event WHERE connection_id = $1",
        )
        .bind(connection_id)
        .fetch_one(pool)
        .await
    };
    let before = count_events().await?;
    let n = range.len();
    let next = Arc::new(AtomicUsize::new(range.start));
    let http = reqwest::Client::new();
    let started = Instant::now();
    let workers: Vec<_> = (0..SENDERS)
        .map(|_| {
            let (next, deliveries, route, secret, http) = (
                next.clone(),
                deliveries.clone(),
                route.clone(),
                secret.clone(),
                http.clone(),
            );
            let end = range.end;
            tokio::spawn(async move {
                let mut out = (Vec::new(), 0usize, None::<String>, Duration::ZERO);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= end || started.elapsed() > CAP {
                        out.3 = started.elapsed();
                        return out;
                    }
                    let body = deliveries[i].body.clone();
                    let headers = vendor_sim::outline::signed_headers(
                        Some(secret.as_bytes()),
                        vendor_sim::outline::unix_ms(),
                        &body,
                    );
                    let t = Instant::now();
                    match http
                        .post(route.as_str())
                        .headers(headers)
                        .body(body)
                        .send()
                        .await
                    {
                        Ok(r) if r.status().is_success() => out.0.push(t.elapsed()),
                        Ok(r) => {
                            out.1 += 1;
                            out.2
                                .get_or_insert_with(|| format!("ingress answered {}", r.status()));
                        }
                        Err(e) => {
                            out.1 += 1;
                            out.2.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
            })
        })
        .collect();
    let mut applied = None;
    let mut applied_count = 0;
    while applied.is_none() {
        applied_count = (count_events().await? - before).max(0) as usize;
        if applied_count >= n || started.elapsed() > CAP {
            applied = Some(started.elapsed());
        } else {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let mut latencies = Vec::with_capacity(n);
    let (mut errors, mut first_error) = (0, None);
    let mut acked = Duration::ZERO;
    for w in workers {
        let (lat, e, first, done) = w.await?;
        latencies.extend(lat);
        errors += e;
        first_error = first_error.or(first);
        acked = acked.max(done);
    }
    if latencies.len() + errors < n {
        bail!("the senders stopped early");
    }
    latencies.sort();
    Ok(PathRound {
        sent: n,
        errors,
        first_error,
        acked,
        applied: applied.unwrap_or_default(),
        applied_count,
        latencies,
    })
}

/// What one round of the delivery ceiling measured.
struct CeilingRound {
    written: usize,
    took: Duration,
    latencies: Vec<Duration>,
}

/// The deliveries' changes applied to the ceiling connection's copies of the documents: per
/// delivery one transaction (the row `FOR UPDATE`, written forward, its event and the event's
/// outbox row), `concurrency` at a time on as many connections.
async fn delivery_ceiling(
    database_url: &str,
    connection_id: Uuid,
    workspace_id: Uuid,
    collection_ids: &std::collections::HashMap<String, Uuid>,
    deliveries: &[Delivery],
    concurrency: usize,
) -> Result<CeilingRound> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(concurrency as u32)
        .min_connections(concurrency as u32)
        .connect(database_url)
        .await?;
    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures::stream::iter(deliveries)
        .map(|d| {
            let pool = &pool;
            async move {
                let m = &d.model;
                let collection_id = *collection_ids
                    .get(&m.collection_id)
                    .context("the delivery's collection")?;
                let t = Instant::now();
                let mut txn = pool.begin().await?;
                let (id, held): (Uuid, Option<OffsetDateTime>) = sqlx::query_as(
                    "SELECT id, updated_at FROM outline_document
                      WHERE connection_id = $1 AND outline_id = $2 FOR UPDATE",
                )
                .bind(connection_id)
                .bind(&m.id)
                .fetch_one(&mut *txn)
                .await?;
                ensure!(
                    held.is_none_or(|h| h < m.updated_at),
                    "the ceiling's row is not behind"
                );
                let deleted = m.deleted_at.is_some();
                sqlx::query(
                    "UPDATE outline_document
                        SET collection_id = $2, collection_outline_id = $3,
                            parent_outline_id = $4, title = $5, text = $6, updated_at = $7,
                            deleted_at = $8, seen_at = now()
                      WHERE id = $1",
                )
                .bind(id)
                .bind(collection_id)
                .bind(&m.collection_id)
                .bind(&m.parent_document_id)
                .bind(if deleted { None } else { m.title.clone() })
                .bind(if deleted { None } else { m.text.clone() })
                .bind(m.updated_at)
                .bind(m.deleted_at)
                .execute(&mut *txn)
                .await?;
                let event_type = match d.event.as_str() {
                    "documents.delete" => "outline.document.deleted",
                    "documents.move" => "outline.document.moved",
                    _ => "outline.document.updated",
                };
                let at = m.deleted_at.unwrap_or(m.updated_at);
                let source_key = format!("{}:{}", m.id, store::events::rfc3339(at));
                let event_id = Uuid::now_v7();
                sqlx::query(
                    "INSERT INTO integration_event (id, connection_id, subject_kind, subject_id,
                         item_kind, item_id, type, source_key, occurred_at, workspace_ids)
                     VALUES ($1, $2, 'outline_collection', $3, 'outline_document', $4, $5, $6,
                             $7, $8)
                     ON CONFLICT DO NOTHING",
                )
                .bind(event_id)
                .bind(connection_id)
                .bind(collection_id)
                .bind(id)
                .bind(event_type)
                .bind(&source_key)
                .bind(at)
                .bind(vec![workspace_id])
                .execute(&mut *txn)
                .await?;
                let payload = serde_json::json!({
                    "id": event_id,
                    "event_type": event_type,
                    "workspace_id": workspace_id,
                    "item": {"kind": "outline_document", "id": id},
                    "source_key": source_key,
                    "occurred_at": store::events::rfc3339(at),
                    "detail": {"outline_id": m.id, "collection": m.collection_id},
                    "connection_id": connection_id,
                });
                sqlx::query(
                    "INSERT INTO outbox (id, subject, headers, payload, msg_id, available_at)
                     VALUES ($1, $2, '{}'::jsonb, $3, $4, now() + interval '1 day')",
                )
                .bind(Uuid::now_v7())
                .bind(CEILING_SUBJECT)
                .bind(serde_json::to_vec(&payload)?)
                .bind(event_id.to_string())
                .execute(&mut *txn)
                .await?;
                txn.commit().await?;
                anyhow::Ok(t.elapsed())
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let took = started.elapsed();
    pool.close().await;
    latencies.sort();
    Ok(CeilingRound {
        written: deliveries.len(),
        took,
        latencies,
    })
}
