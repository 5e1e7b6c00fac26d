//! `eraser`: one disconnected GitHub connection erased through `eraser::Eraser::erase_connection`
//! (the library the eraser service runs): its monitors cover repositories holding 100,000
//! mirrored items with their derived rows, and 100,000 of its webhook messages sit in
//! WEBHOOKS_GITHUB, recorded in the stream ledger. Beside it, two ceilings measured in the same
//! run on the same servers: the holders' own DELETE statements run bare over an identical second
//! copy of the rows, and JetStream deletes by sequence of 10,000 other messages in the same
//! stream, as many in flight as the eraser keeps.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt as _;
use lifecycle_core::erasure::ErasureTrigger;
use sqlx::PgPool;
use store::entity::{ConnectionKind, provider_instance};
use store::erasure::Selector;
use uuid::Uuid;

use crate::table::{Table, rate, ratio, thousands};

/// Mirrored items (half issues, half pull requests), unless `FORGESYNC_BENCH_ERASER_ITEMS` says
/// otherwise.
const ITEMS: usize = 100_000;
/// Stream messages of the connection, unless `FORGESYNC_BENCH_ERASER_MESSAGES` says otherwise.
const MESSAGES: usize = 100_000;
/// Messages the JetStream ceiling deletes (at most the connection's): it is a rate, and on a
/// server that syncs every write (production durability) each delete costs a disk sync, so more
/// would add minutes without steadying it.
const CEILING_MESSAGES: usize = 10_000;
/// Repositories the items are spread over (each its own orphan-guard transaction).
const REPOSITORIES: usize = 10;
/// Publish acks awaited at once while seeding the streams.
const PUBLISH_WINDOW: usize = 1_000;
/// Ledger rows per INSERT while seeding.
const LEDGER_BATCH: usize = 10_000;
/// Bytes of each message's body (a small webhook).
const BODY_BYTES: usize = 1_024;
/// The erasure must finish within this, or the benchmark fails.
const ERASE_TIMEOUT: Duration = Duration::from_secs(1_800);
/// How often the erasure record is read to time its phases.
const POLL: Duration = Duration::from_millis(10);

fn count(var: &str, default: usize) -> Result<usize> {
    match std::env::var(var) {
        Ok(v) => {
            let n: usize = v
                .parse()
                .with_context(|| format!("{var} must be a number"))?;
            ensure!(
                n >= 2 * REPOSITORIES,
                "{var} must be at least {}",
                2 * REPOSITORIES
            );
            Ok(n)
        }
        Err(_) => Ok(default),
    }
}

pub async fn run() -> Result<()> {
    let items = count("FORGESYNC_BENCH_ERASER_ITEMS", ITEMS)?;
    let messages = count("FORGESYNC_BENCH_ERASER_MESSAGES", MESSAGES)?;
    let env = testkit::TestEnv::new().await?;
    let db = &env.db.db;
    let pool = db.get_postgres_connection_pool().clone();
    let instance = provider_instance::ensure(db, ConnectionKind::Github, None)
        .await?
        .id;

    // The connection to erase: its workspace, its monitors bound to its repositories.
    let (workspace, connection) = (Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'bench-erasure')")
        .bind(workspace)
        .execute(&pool)
        .await?;
    sqlx::query(
        "INSERT INTO connection (id, workspace_id, kind, status, version, lifecycle_generation,
                                 provider_instance_id)
         VALUES ($1, $2, 'github', 'active', 1, 1, $3)",
    )
    .bind(connection)
    .bind(workspace)
    .bind(instance)
    .execute(&pool)
    .await?;
    let seeding = Instant::now();
    let erased = seed_mirror(&pool, instance, workspace, 1, items).await?;
    let monitors = sqlx::query(
        "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name,
                                            native_id)
         SELECT gen_random_uuid(), $1, $2, owner, name, native_id
           FROM repository WHERE id = ANY($3)",
    )
    .bind(workspace)
    .bind(connection)
    .bind(&erased.repositories)
    .execute(&pool)
    .await?
    .rows_affected();
    // The ceiling's copy: the same rows under repositories no monitor covers, and a workspace
    // of its own for their activity entries.
    let ceiling_workspace = Uuid::now_v7();
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'bench-ceiling')")
        .bind(ceiling_workspace)
        .execute(&pool)
        .await?;
    let copy = seed_mirror(&pool, instance, ceiling_workspace, 1_000_001, items).await?;
    ensure!(
        copy.rows == erased.rows,
        "the two copies differ: {} and {} rows",
        erased.rows,
        copy.rows
    );
    let rows_seeded = seeding.elapsed();

    // The stream copies: the connection's messages, ledgered as the relay records them, and the
    // ceiling's, in the same stream, not ledgered.
    let seeding = Instant::now();
    let headers = |repository: Uuid| {
        let mut h = async_nats::HeaderMap::new();
        h.insert(store::headers::WORKSPACE, workspace.to_string().as_str());
        h.insert(store::headers::CONNECTION, connection.to_string().as_str());
        h.insert(store::headers::REPOSITORY, repository.to_string().as_str());
        h.insert(store::headers::EVENT, "issues");
        h
    };
    let repository_of = |i: usize| erased.repositories[i % REPOSITORIES];
    let ledger = publish(&env.bus, "erase", messages, |i| {
        (
            format!("github.bench.erase{}.issues", i % REPOSITORIES),
            headers(repository_of(i)),
        )
    })
    .await?;
    for (n, batch) in ledger.chunks(LEDGER_BATCH).enumerate() {
        let first = n * LEDGER_BATCH;
        sqlx::query(
            "INSERT INTO stream_message (stream, sequence, subject, workspace_id, connection_id,
                                         repository_id)
             SELECT $6, sequence, subject, $4, $5, repository_id
               FROM unnest($1::bigint[], $2::text[], $3::uuid[])
                 AS t(sequence, subject, repository_id)",
        )
        .bind(batch.iter().map(|l| l.0 as i64).collect::<Vec<_>>())
        .bind(batch.iter().map(|l| l.1.clone()).collect::<Vec<_>>())
        .bind(
            (first..first + batch.len())
                .map(&repository_of)
                .collect::<Vec<_>>(),
        )
        .bind(workspace)
        .bind(connection)
        .bind(bus::Stream::WebhooksGithub.name())
        .execute(&pool)
        .await?;
    }
    let ceiling_messages = messages.min(CEILING_MESSAGES);
    let untracked: Vec<u64> = publish(&env.bus, "ceiling", ceiling_messages, |i| {
        (
            format!("github.bench.ceiling{}.issues", i % REPOSITORIES),
            async_nats::HeaderMap::new(),
        )
    })
    .await?
    .into_iter()
    .map(|(sequence, _)| sequence)
    .collect();
    let messages_seeded = seeding.elapsed();
    let stream_name = env.bus.namespace().name(bus::Stream::WebhooksGithub.name());
    let mut stream = env.bus.jetstream().get_stream(&stream_name).await?;
    let stored = stream.info().await?.state.messages;
    ensure!(
        stored == (messages + ceiling_messages) as u64,
        "{stream_name} holds {stored} messages, not {}",
        messages + ceiling_messages
    );

    // The disconnection's part the eraser relies on: the connection no longer reads.
    sqlx::query("UPDATE connection SET status = 'disconnected' WHERE id = $1")
        .bind(connection)
        .execute(&pool)
        .await?;
    sqlx::query("VACUUM ANALYZE").execute(&pool).await?;

    let eraser = eraser::Eraser {
        db: db.clone(),
        bus: env.bus.clone(),
        holders: vendors::holders(),
    };
    let erasure = erase(&eraser, &pool, connection).await?;
    let counts = &erasure.counts;
    let rows_erased: i64 = counts
        .iter()
        .filter(|(k, _)| k.starts_with("table:") && *k != "table:stream_message")
        .map(|(_, n)| n)
        .sum();
    let messages_erased: i64 = counts
        .iter()
        .filter(|(k, _)| k.starts_with("stream:"))
        .map(|(_, n)| n)
        .sum();
    ensure!(
        rows_erased as u64 == erased.rows + monitors,
        "the erasure deleted {rows_erased} rows, not {} ({counts:?})",
        erased.rows + monitors
    );
    ensure!(
        messages_erased as usize == messages,
        "the erasure deleted {messages_erased} messages, not {messages} ({counts:?})"
    );
    let left = stream.info().await?.state.messages;
    ensure!(
        left == ceiling_messages as u64,
        "{stream_name} holds {left} messages after the erasure, not the ceiling's {ceiling_messages}"
    );
    let repositories_left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM repository WHERE id = ANY($1)")
            .bind(&erased.repositories)
            .fetch_one(&pool)
            .await?;
    ensure!(
        repositories_left == 0,
        "{repositories_left} repositories survived"
    );

    // Ceilings, after the erasure, on the same database and stream.
    sqlx::query("VACUUM ANALYZE").execute(&pool).await?;
    let (rows_deleted, delete_time) = raw_delete(&eraser, &pool, &copy.repositories).await?;
    ensure!(
        rows_deleted == copy.rows,
        "the raw deletes removed {rows_deleted} rows, not {}",
        copy.rows
    );
    let stream_delete_time = raw_stream_delete(&stream, &untracked).await?;
    let left = stream.info().await?.state.messages;
    ensure!(left == 0, "{stream_name} still holds {left} messages");
    let pg_version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&pool)
        .await?;

    println!();
    println!(
        "eraser: one disconnected GitHub connection: {} repositories, {} items ({} issues, {} pull \
         requests) and their derived rows, {} mirror rows in all; {} webhook messages ({BODY_BYTES} \
         B bodies) in WEBHOOKS_GITHUB",
        REPOSITORIES,
        thousands(items as u64),
        thousands(erased.issues),
        thousands(erased.pulls),
        thousands(erased.rows),
        thousands(messages as u64),
    );
    println!("machine: {}; PostgreSQL {pg_version}", crate::machine());
    println!(
        "seeding (not measured): rows {:.1} s (both copies), messages {:.1} s (both sets)",
        rows_seeded.as_secs_f64(),
        messages_seeded.as_secs_f64()
    );
    println!();
    let rows_rate = rows_erased as f64 / erasure.rows.as_secs_f64();
    let delete_rate = rows_deleted as f64 / delete_time.as_secs_f64();
    let messages_rate = messages_erased as f64 / erasure.messages.as_secs_f64();
    let stream_rate = untracked.len() as f64 / stream_delete_time.as_secs_f64();
    let mut t = Table::new(&["path", "count", "seconds", "per second", "eraser ÷ ceiling"]);
    t.row(vec![
        format!(
            "eraser: mirror rows (capture, monitors, {REPOSITORIES} repositories under the orphan \
             guard, connection rows)"
        ),
        thousands(rows_erased as u64),
        format!("{:.2}", erasure.rows.as_secs_f64()),
        rate(rows_rate),
        ratio(rows_rate, delete_rate),
    ]);
    t.row(vec![
        "ceiling: the holders' repository DELETEs, bare, 1 txn per repository".into(),
        thousands(rows_deleted),
        format!("{:.2}", delete_time.as_secs_f64()),
        rate(delete_rate),
        String::new(),
    ]);
    t.row(vec![
        format!(
            "eraser: messages by ledgered sequence ({} per batch, {} in flight)",
            eraser::streams::BATCH,
            bus::erasure::IN_FLIGHT
        ),
        thousands(messages_erased as u64),
        format!("{:.2}", erasure.messages.as_secs_f64()),
        rate(messages_rate),
        ratio(messages_rate, stream_rate),
    ]);
    t.row(vec![
        format!(
            "ceiling: JetStream delete by sequence, {} in flight",
            bus::erasure::IN_FLIGHT
        ),
        thousands(untracked.len() as u64),
        format!("{:.2}", stream_delete_time.as_secs_f64()),
        rate(stream_rate),
        String::new(),
    ]);
    t.row(vec![
        "  (whole erasure: erase_connection's call)".into(),
        String::new(),
        format!("{:.2}", erasure.total.as_secs_f64()),
        String::new(),
        String::new(),
    ]);
    t.print();
    println!();
    println!(
        "the rows phase ends when the erasure record's last step before the first stream tally \
         commits (read every {} ms); the ceilings run after the erasure, on the same database and \
         stream, after VACUUM ANALYZE",
        POLL.as_millis()
    );
    env.db.drop().await;
    Ok(())
}

/// Repositories written by [`seed_mirror`] and what they hold.
struct Mirror {
    repositories: Vec<Uuid>,
    issues: u64,
    pulls: u64,
    /// Every row written, the repositories included.
    rows: u64,
}

/// Mirrors `items` items, half issues and half pull requests, over [`REPOSITORIES`] new
/// repositories (native ids from `first_native`), as the erasure tests' world does: each issue
/// with a comment, an item event and `workspace`'s activity entry, each pull request with a
/// review and a review thread holding one review comment.
async fn seed_mirror(
    pool: &PgPool,
    instance: Uuid,
    workspace: Uuid,
    first_native: i64,
    items: usize,
) -> Result<Mirror> {
    let per_repository = (items / REPOSITORIES / 2) as i64;
    let mut mirror = Mirror {
        repositories: Vec::with_capacity(REPOSITORIES),
        issues: 0,
        pulls: 0,
        rows: 0,
    };
    for k in 0..REPOSITORIES as i64 {
        let id = Uuid::now_v7();
        let native_id = first_native + k;
        let mut tx = pool.begin().await?;
        sqlx::query(
            "INSERT INTO repository (id, provider_instance_id, native_id, node_id, owner, name)
             VALUES ($1, $2, $3, 'R' || $3, 'bench', 'repo-' || $3)",
        )
        .bind(id)
        .bind(instance)
        .bind(native_id)
        .execute(&mut *tx)
        .await?;
        mirror.rows += 1;
        for (n, sql) in [
            "INSERT INTO issue (id, repository_id, native_id, node_id, number, title, body, state,
                                author, upstream_created_at, upstream_updated_at)
             SELECT gen_random_uuid(), $1, g, 'I' || g, g, 'issue ' || g,
                    repeat(md5(g::text), 8), 'open', 'octocat', now(), now()
               FROM generate_series(1, $3::bigint) g",
            "INSERT INTO pull_request (id, repository_id, native_id, node_id, number, title, body,
                                       state, author, upstream_created_at, upstream_updated_at,
                                       head_sha, head_check_runs, head_check_state)
             SELECT gen_random_uuid(), $1, 1000000 + g, 'P' || g, 1000000 + g, 'pull ' || g,
                    repeat(md5(g::text), 8), 'open', 'octocat', now(), now(), md5(g::text),
                    '[{\"name\": \"ci\", \"state\": \"success\"}]'::jsonb, 'success'
               FROM generate_series(1, $3::bigint) g",
            "INSERT INTO comment (id, repository_id, issue_id, native_id, body,
                                  upstream_created_at, upstream_updated_at)
             SELECT gen_random_uuid(), $1, i.id, i.number, repeat(md5(i.node_id), 4), now(), now()
               FROM issue i WHERE i.repository_id = $1",
            "INSERT INTO review (id, pull_request_id, native_id, body, state, upstream_updated_at)
             SELECT gen_random_uuid(), p.id, p.number, 'looks good', 'APPROVED', now()
               FROM pull_request p WHERE p.repository_id = $1",
            "INSERT INTO review_thread (id, pull_request_id, node_id, path, resolved)
             SELECT gen_random_uuid(), p.id, 'T' || p.number, 'src/lib.rs', false
               FROM pull_request p WHERE p.repository_id = $1",
            "INSERT INTO review_comment (id, pull_request_id, thread_id, native_id, body,
                                         upstream_created_at, upstream_updated_at)
             SELECT gen_random_uuid(), t.pull_request_id, t.id, 1, repeat(md5(t.node_id), 4),
                    now(), now()
               FROM review_thread t JOIN pull_request p ON p.id = t.pull_request_id
              WHERE p.repository_id = $1",
            "INSERT INTO item_event (id, issue_id, name, source_key, version, origin)
             SELECT gen_random_uuid(), i.id, 'scm.issue.opened', 'opened:' || i.number, now(),
                    'webhook'
               FROM issue i WHERE i.repository_id = $1",
            "INSERT INTO activity_event (id, workspace_id, issue_id, kind, source_key,
                                         item_event_id)
             SELECT gen_random_uuid(), $2, e.issue_id, e.name, e.source_key, e.id
               FROM item_event e JOIN issue i ON i.id = e.issue_id WHERE i.repository_id = $1",
        ]
        .into_iter()
        .enumerate()
        {
            let written = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .bind(workspace)
                .bind(per_repository)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            match n {
                0 => mirror.issues += written,
                1 => mirror.pulls += written,
                _ => {}
            }
            mirror.rows += written;
        }
        tx.commit().await?;
        mirror.repositories.push(id);
    }
    Ok(mirror)
}

/// Publishes `n` messages (`subject_of(i)` gives each one's subject and headers),
/// [`PUBLISH_WINDOW`] acks awaited at a time; returns each one's sequence and subject, in order.
async fn publish(
    bus: &bus::Bus,
    tag: &str,
    n: usize,
    subject_of: impl Fn(usize) -> (String, async_nats::HeaderMap),
) -> Result<Vec<(u64, String)>> {
    let body = bytes::Bytes::from(vec![b'x'; BODY_BYTES]);
    let mut out = Vec::with_capacity(n);
    let indexes: Vec<usize> = (0..n).collect();
    for window in indexes.chunks(PUBLISH_WINDOW) {
        let mut acks = Vec::with_capacity(window.len());
        for &i in window {
            let (subject, headers) = subject_of(i);
            let ack = bus
                .publish_start(&subject, &format!("bench-{tag}:{i}"), headers, body.clone())
                .await?;
            acks.push((i, subject, ack));
        }
        for (i, subject, ack) in acks {
            let published = ack.await?;
            ensure!(!published.duplicate, "message {tag}:{i} was a duplicate");
            out.push((published.sequence, subject));
        }
    }
    Ok(out)
}

/// How long an erasure took, in all and per phase, and what its record counted.
struct Erased {
    total: Duration,
    /// Capture, monitors, repositories, the connection's rows.
    rows: Duration,
    /// Stream messages, subjects, the rest of the ledger.
    messages: Duration,
    counts: std::collections::BTreeMap<String, i64>,
}

/// Erases `connection` through the eraser's library while reading its record every [`POLL`]:
/// the rows phase ends when the last step before the first stream tally commits.
async fn erase(eraser: &eraser::Eraser, pool: &PgPool, connection: Uuid) -> Result<Erased> {
    let started = Instant::now();
    // Its own task, so reading the record never holds the erasure up.
    let eraser = eraser.clone();
    let mut run = tokio::spawn(async move {
        eraser
            .erase_connection(connection, ErasureTrigger::AdminDisconnect)
            .await
    });
    let mut steps_seen = 0usize;
    let mut last_step_at = Duration::ZERO;
    let mut rows_end = None;
    let outcome = loop {
        tokio::select! {
            outcome = &mut run => break outcome,
            () = tokio::time::sleep(POLL) => {
                ensure!(
                    started.elapsed() < ERASE_TIMEOUT,
                    "the erasure did not finish within {ERASE_TIMEOUT:?}"
                );
                if rows_end.is_some() {
                    continue;
                }
                let row: Option<(i64, bool)> = sqlx::query_as(
                    "SELECT jsonb_array_length(steps_done)::int8,
                            EXISTS (SELECT 1 FROM jsonb_object_keys(counts) k
                                     WHERE k LIKE 'stream:%')
                       FROM erasure WHERE connection_id = $1",
                )
                .bind(connection)
                .fetch_optional(pool)
                .await?;
                let Some((steps, streaming)) = row else { continue };
                if streaming {
                    rows_end = Some(last_step_at);
                } else if steps as usize > steps_seen {
                    steps_seen = steps as usize;
                    last_step_at = started.elapsed();
                }
            }
        }
    };
    let total = started.elapsed();
    let outcome = outcome?.context("erasing the connection")?;
    ensure!(
        outcome == eraser::Outcome::Erased,
        "the erasure ended {outcome:?}"
    );
    let rows = rows_end.context("the erasure's stream phase was never seen")?;
    let counts: String =
        sqlx::query_scalar("SELECT counts::text FROM erasure WHERE connection_id = $1")
            .bind(connection)
            .fetch_one(pool)
            .await?;
    Ok(Erased {
        total,
        rows,
        messages: total - rows,
        counts: serde_json::from_str(&counts)?,
    })
}

/// The ceiling for rows: every holder's repository DELETE for `repositories`, in holder order,
/// one transaction per repository, without the erasure's record, capture or guard.
async fn raw_delete(
    eraser: &eraser::Eraser,
    pool: &PgPool,
    repositories: &[Uuid],
) -> Result<(u64, Duration)> {
    let statements: Vec<String> = eraser
        .holders_of(Some(ConnectionKind::Github))
        .into_iter()
        .flat_map(|h| h.tables_where(|s| matches!(s, Selector::Repository(_))))
        .filter_map(|t| match t.selector {
            Selector::Repository(predicate) => {
                Some(format!("DELETE FROM \"{}\" WHERE {predicate}", t.table))
            }
            _ => None,
        })
        .collect();
    let mut deleted = 0;
    let mut conn = pool.acquire().await?;
    let started = Instant::now();
    for repository in repositories {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        for sql in &statements {
            deleted += sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
                .bind(repository)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        tx.commit().await?;
    }
    Ok((deleted, started.elapsed()))
}

/// The ceiling for messages: each of `sequences` deleted from `stream`, as many in flight as the
/// eraser keeps.
async fn raw_stream_delete(
    stream: &async_nats::jetstream::stream::Stream,
    sequences: &[u64],
) -> Result<Duration> {
    let started = Instant::now();
    let results: Vec<_> = futures::stream::iter(sequences.iter().map(|&sequence| {
        let stream = stream.clone();
        async move { stream.delete_message(sequence).await }
    }))
    .buffer_unordered(bus::erasure::IN_FLIGHT)
    .collect()
    .await;
    let elapsed = started.elapsed();
    for r in results {
        ensure!(r?, "a delete was refused");
    }
    Ok(elapsed)
}
