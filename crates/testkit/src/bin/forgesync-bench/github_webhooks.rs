//! The webhook half of `github-sync`: pull_request deliveries (half edits, half pushes that also
//! record an item event and an outbox message) published onto the webhook stream as ingress
//! publishes them, applied by github-sync's consumer; beside the raw Postgres ceiling of the same
//! number of row-locked single-row transactions (`SELECT … FOR UPDATE`, then `UPDATE`) at the
//! consumer's concurrency, measured in the same run on the same rows.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt as _;
use serde_json::Value;
use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::github::GithubSim;
use vendor_sim::github::webhook;

/// Deliveries published.
pub const EVENTS: usize = 6_000;

/// What the consumer did.
pub struct Applied {
    pub events: usize,
    pub seconds: f64,
    pub item_events: i64,
}

/// Publishes [`EVENTS`] pull_request deliveries for the mirrored pull requests and waits until
/// github-sync's repository consumer has handled every one; the clock runs from the consumer's
/// first delivery to its last ack.
pub async fn apply(
    env: &testkit::TestEnv,
    pool: &PgPool,
    sim: &GithubSim,
    connection_id: &str,
) -> Result<Applied> {
    let payloads: Vec<(String, Vec<u8>)> = sim.model(|m| {
        let mut out = Vec::with_capacity(EVENTS);
        let repos: Vec<_> = m.repositories().cloned().collect();
        let pulls: Vec<_> = repos
            .iter()
            .flat_map(|r| r.pull_requests().map(move |p| (r, p.clone())))
            .collect();
        for i in 0..EVENTS {
            let (repo, pr) = &pulls[i % pulls.len()];
            let round = (i / pulls.len()) as i64 + 1;
            let mut pr = pr.clone();
            // Each round a second later than anything the sync stored.
            pr.updated_at += time::Duration::days(30) + time::Duration::seconds(round);
            pr.title = format!("{} (round {round})", pr.title);
            let before = pr.head_ref_oid.clone();
            let push = i % 2 == 0;
            if push {
                pr.head_ref_oid = format!("{:040x}", 0xbe_0000_0000_u64 + i as u64);
            }
            let action = if push { "synchronize" } else { "edited" };
            let mut payload = webhook::pull_request_payload(m, action, repo, &pr);
            if push {
                payload["before"] = Value::from(before);
                payload["after"] = Value::from(pr.head_ref_oid.clone());
            }
            let subject = lifecycle_core::subject::github(&repo.owner, &repo.name, "pull_request")
                .expect("simulator names fit a subject token");
            out.push((subject, serde_json::to_vec(&payload).unwrap_or_default()));
        }
        out
    });
    let events_before: i64 = sqlx::query_scalar("SELECT count(*) FROM item_event")
        .fetch_one(pool)
        .await?;
    let bus = &env.bus;
    futures::stream::iter(payloads)
        .map(|(subject, body): (String, Vec<u8>)| async move {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Forgesync-Connection", connection_id);
            headers.insert("Forgesync-Event", "pull_request");
            let ack = bus
                .publish_start(&subject, &Uuid::now_v7().to_string(), headers, body.into())
                .await?;
            ack.await?;
            anyhow::Ok(())
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<()>>>()?;

    let ns = bus.namespace();
    let stream = bus
        .jetstream()
        .get_stream(ns.name(bus::Stream::WebhooksGithub.name()))
        .await?;
    let durable = ns.name("github-sync-repository-events");
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut first: Option<Instant> = None;
    loop {
        ensure!(
            Instant::now() < deadline,
            "the webhook consumer did not drain"
        );
        let info = stream
            .consumer_info(&durable)
            .await
            .context("github-sync's repository consumer")?;
        if first.is_none() && info.delivered.stream_sequence > 0 {
            first = Some(Instant::now());
        }
        if info.num_pending == 0 && info.num_ack_pending == 0 && first.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seconds = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    let events_after: i64 = sqlx::query_scalar("SELECT count(*) FROM item_event")
        .fetch_one(pool)
        .await?;
    let applied: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pull_request WHERE title LIKE '%(round %'")
            .fetch_one(pool)
            .await?;
    ensure!(applied > 0, "no delivery changed the mirror");
    Ok(Applied {
        events: EVENTS,
        seconds,
        item_events: events_after - events_before,
    })
}

/// The ceiling: `n` single-row transactions over the mirrored pull requests, each locking its
/// row and updating it, `concurrency` at a time on as many connections.
pub async fn ceiling(database_url: &str, n: usize, concurrency: usize) -> Result<Duration> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(concurrency as u32)
        .connect(database_url)
        .await?;
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM pull_request ORDER BY id")
        .fetch_all(&pool)
        .await?;
    ensure!(!ids.is_empty(), "no pull requests to write");
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let (pool, id) = (&pool, ids[i % ids.len()]);
            async move {
                let mut txn = pool.begin().await?;
                let (updated,): (OffsetDateTime,) = sqlx::query_as(
                    "SELECT upstream_updated_at FROM pull_request WHERE id = $1 FOR UPDATE",
                )
                .bind(id)
                .fetch_one(&mut *txn)
                .await?;
                sqlx::query(
                    "UPDATE pull_request SET title = $2, upstream_updated_at = $3,
                            head_sha = $4, mirrored_at = now() WHERE id = $1",
                )
                .bind(id)
                .bind(format!("ceiling {i}"))
                .bind(updated + time::Duration::seconds(1))
                .bind(format!("{i:040x}"))
                .execute(&mut *txn)
                .await?;
                txn.commit().await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<()>>>()?;
    Ok(started.elapsed())
}
