//! The webhook half of `github-sync`: pull_request deliveries (half edits, half pushes that also
//! record an item event and an outbox message), recorded and published onto the webhook stream as
//! ingress records and publishes them for an operator's endpoint (so each is a fact, written from
//! its payload: a delivery ingress has no record of is a hint and costs a confirming read),
//! applied by github-sync's consumer; beside the raw Postgres ceiling of the same
//! number of row-locked single-row transactions (`SELECT … FOR UPDATE`, then `UPDATE`) at the
//! consumer's concurrency, measured in the same run on the same rows.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use futures::StreamExt as _;
use sea_orm::{DatabaseConnection, TransactionTrait as _};
use serde_json::Value;
use sqlx::PgPool;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::{Dedup, EndpointIds, NewEndpoint, NewMessage, Recorded};
use store::outbox::OutboxMessage;
use store::secrets::Keyring;
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
    // Stored first, untimed, as ingress stores them; then published as its relay would.
    let endpoint = operator_endpoint(env, connection_id).await?;
    let db = &env.db.db;
    let recorded: Vec<(Uuid, OutboxMessage)> = futures::stream::iter(payloads)
        .map(|(subject, body)| {
            let delivery_id = Uuid::now_v7().to_string();
            let headers = BTreeMap::from([
                ("x-github-event".to_owned(), "pull_request".to_owned()),
                ("x-github-delivery".to_owned(), delivery_id.clone()),
            ]);
            record(
                db,
                endpoint,
                subject,
                "pull_request",
                headers,
                delivery_id,
                body,
            )
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let events_before: i64 = sqlx::query_scalar("SELECT count(*) FROM item_event")
        .fetch_one(pool)
        .await?;
    let seconds = publish_and_drain(
        &env.bus,
        recorded,
        bus::Stream::WebhooksGithub,
        "github-sync-repository-events",
    )
    .await?;
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

/// Publishes `recorded` as ingress's relay would and waits until consumer `durable` of `stream`
/// has handled every message; the seconds from its first delivery to its last ack.
pub async fn publish_and_drain(
    bus: &bus::Bus,
    recorded: Vec<(Uuid, OutboxMessage)>,
    stream: bus::Stream,
    durable: &str,
) -> Result<f64> {
    futures::stream::iter(recorded)
        .map(|(outbox_id, message)| async move {
            bus.publish_outbox(outbox_id, message).await?;
            anyhow::Ok(())
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<()>>>()?;

    let ns = bus.namespace();
    let stream = bus.jetstream().get_stream(ns.name(stream.name())).await?;
    let durable = ns.name(durable);
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
            .with_context(|| format!("consumer {durable}"))?;
        if first.is_none() && info.delivered.stream_sequence > 0 {
            first = Some(Instant::now());
        }
        if info.num_pending == 0 && info.num_ack_pending == 0 && first.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(first.map_or(0.0, |f| f.elapsed().as_secs_f64()))
}

/// An endpoint of `connection_id` an operator registered: what it receives is a fact.
async fn operator_endpoint(env: &testkit::TestEnv, connection_id: &str) -> Result<EndpointIds> {
    let connection_id: Uuid = connection_id.parse()?;
    let workspace_id: Uuid =
        sqlx::query_scalar("SELECT workspace_id FROM connection WHERE id = $1")
            .bind(connection_id)
            .fetch_one(env.db.db.get_postgres_connection_pool())
            .await?;
    let keyring = Keyring::parse(&testkit::secret_key())?;
    let endpoint = store::inbound::create_endpoint(
        &env.db.db,
        &keyring,
        NewEndpoint {
            workspace_id,
            connection_id,
            kind: ConnectionKind::Github,
            registration: Registration::Operator,
            provider_ref: Some("4242000".to_owned()),
            address_token: None,
            tenant_keyed: false,
        },
        b"bench-operator-secret",
    )
    .await?;
    Ok(EndpointIds {
        endpoint_id: endpoint.id,
        workspace_id,
        connection_id,
        kind: ConnectionKind::Github,
    })
}

/// Stores one delivery of `event` as ingress does (`store::inbound::record`) and returns the
/// outbox row its relay would publish; held from the relay, which the benchmark publishes for.
pub async fn record(
    db: &DatabaseConnection,
    endpoint: EndpointIds,
    subject: String,
    event: &str,
    headers: BTreeMap<String, String>,
    delivery_id: String,
    body: Vec<u8>,
) -> Result<(Uuid, OutboxMessage)> {
    let txn = db.begin().await?;
    let recorded = store::inbound::record(
        &txn,
        NewMessage {
            endpoint,
            verification: "signature".into(),
            headers,
            body,
            event: event.into(),
            subject,
            dedup: Dedup::Keys {
                event_id: Some(delivery_id),
                digest_window: Duration::from_secs(24 * 3600),
                verified_by: None,
            },
            retention: Duration::from_secs(7 * 24 * 3600),
            inline_body_max: 1024 * 1024,
            relay_hold: Duration::from_secs(3600),
        },
    )
    .await?;
    let Recorded::Accepted(accepted) = recorded else {
        bail!("a delivery was not stored: {recorded:?}");
    };
    txn.commit().await?;
    Ok((accepted.outbox_id, accepted.message))
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
