//! The outbox relay against real Postgres and NATS: every row reaches its stream exactly once,
//! even with several relays and one of them killed mid-batch; it reports its backlog.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Result;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use bus::relay::{Relay, RelayConfig};
use bus::{Bus, Stream};
use futures::StreamExt;
use sea_orm::{ConnectionTrait, DatabaseConnection, TransactionTrait};
use store::outbox::{OutboxMessage, enqueue};
use tokio_util::sync::CancellationToken;

async fn enqueue_many(db: &DatabaseConnection, n: usize) -> Result<HashSet<String>> {
    let txn = db.begin().await?;
    let mut ids = HashSet::new();
    for i in 0..n {
        let subject = format!("lifecycle.github.c{}.activated", i % 7);
        let id = enqueue(
            &txn,
            OutboxMessage::json(subject, &serde_json::json!({ "i": i })),
        )
        .await?;
        ids.insert(id.to_string());
    }
    txn.commit().await?;
    Ok(ids)
}

/// Every message id stored in the LIFECYCLE stream, in order.
async fn stored_ids(bus: &Bus) -> Result<Vec<String>> {
    let stream = bus
        .jetstream()
        .get_stream(bus.namespace().name(Stream::Lifecycle.name()))
        .await?;
    let total = stream.get_info().await?.state.messages as usize;
    let consumer = stream
        .create_consumer(pull::Config {
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            ..Default::default()
        })
        .await?;
    let mut ids = Vec::with_capacity(total);
    let mut messages = consumer.messages().await?;
    while ids.len() < total {
        let Some(m) = messages.next().await else {
            break;
        };
        let m = m.map_err(anyhow::Error::msg)?;
        let id = m
            .headers
            .as_ref()
            .and_then(|h| h.get(bus::MSG_ID_HEADER))
            .map(|v| v.to_string());
        ids.push(id.unwrap_or_default());
    }
    Ok(ids)
}

async fn pending(db: &DatabaseConnection) -> Result<i64> {
    let row = db
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT count(*) AS n FROM outbox",
        ))
        .await?
        .expect("count row");
    Ok(row.try_get("", "n")?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_relays_one_killed_mid_batch_publish_every_row_exactly_once() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let expected = enqueue_many(&db.db, 3000).await?;

    // The victim claims a large batch; it is killed once its first messages are in the stream,
    // i.e. after publishing part of the batch and before committing it.
    let victim = Relay::new(
        db.db.clone(),
        bus.clone(),
        RelayConfig {
            batch_size: 2000,
            ..Default::default()
        },
    );
    let victim_task = tokio::spawn(async move { victim.publish_batch().await });
    let stream = bus
        .jetstream()
        .get_stream(bus.namespace().name(Stream::Lifecycle.name()))
        .await?;
    let mut stream_probe = stream.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let n = stream_probe.info().await?.state.messages;
        if n > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "victim never published"
        );
        tokio::task::yield_now().await;
    }
    victim_task.abort();
    let _ = victim_task.await;
    let partially = stream_probe.info().await?.state.messages;

    eprintln!("victim stored {partially} before it was killed");
    let started = std::time::Instant::now();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut relays = Vec::new();
    for _ in 0..3 {
        let relay = Relay::new(
            db.db.clone(),
            bus.clone(),
            RelayConfig {
                batch_size: 100,
                poll_interval: Duration::from_millis(50),
                ..Default::default()
            },
        );
        let token = shutdown.clone();
        relays.push(tokio::spawn(async move { relay.run(token).await }));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while pending(&db.db).await? > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "relays did not drain the outbox"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("relays drained the outbox in {:?}", started.elapsed());
    shutdown.cancel();
    for r in relays {
        r.await?;
    }

    let ids = stored_ids(&bus).await?;
    let unique: HashSet<_> = ids.iter().cloned().collect();
    assert!(
        partially < 3000,
        "the victim must have been killed mid-batch"
    );
    assert_eq!(
        ids.len(),
        3000,
        "each row stored once (victim had stored {partially})"
    );
    assert_eq!(unique.len(), 3000, "no id stored twice");
    assert!(
        unique == expected,
        "the stored ids are exactly the outbox ids"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_wakes_the_relay_before_its_poll() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let relay = Relay::new(
        db.db.clone(),
        bus.clone(),
        RelayConfig {
            poll_interval: Duration::from_secs(3600),
            ..Default::default()
        },
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let token = shutdown.clone();
    let task = tokio::spawn(async move { relay.run(token).await });
    // Let the relay finish its first (empty) pass and start listening.
    tokio::time::sleep(Duration::from_millis(500)).await;
    enqueue_many(&db.db, 3).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while pending(&db.db).await? > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "NOTIFY did not wake the relay"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    task.await?;
    assert_eq!(stored_ids(&bus).await?.len(), 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_row_waits_for_its_hold_and_a_published_row_is_deleted() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let hold = Duration::from_millis(1500);
    let txn = db.db.begin().await?;
    let held = store::outbox::enqueue_with_id(
        &txn,
        uuid::Uuid::now_v7(),
        OutboxMessage::json("lifecycle.github.held.activated", &serde_json::json!({})),
        hold,
    )
    .await?;
    let free = enqueue(
        &txn,
        OutboxMessage::json("lifecycle.github.free.activated", &serde_json::json!({})),
    )
    .await?;
    txn.commit().await?;
    let started = std::time::Instant::now();

    let relay = Relay::new(db.db.clone(), bus.clone(), RelayConfig::default());
    // Only the row without a hold is taken; once published, its dispatch record is gone.
    assert_eq!(relay.publish_batch().await?, 1);
    assert_eq!(stored_ids(&bus).await?, vec![free.to_string()]);
    assert_eq!(pending(&db.db).await?, 1);
    assert!(
        started.elapsed() < hold,
        "the check ran after the hold ended; the machine is too slow for this test"
    );
    assert_eq!(relay.publish_batch().await?, 0, "the held row is not taken");

    tokio::time::sleep(hold.saturating_sub(started.elapsed()) + Duration::from_millis(100)).await;
    assert_eq!(relay.publish_batch().await?, 1);
    assert_eq!(
        stored_ids(&bus).await?,
        vec![free.to_string(), held.to_string()]
    );
    assert_eq!(pending(&db.db).await?, 0);
    Ok(())
}

async fn dead_rows(db: &DatabaseConnection) -> Result<Vec<(String, String, String)>> {
    let rows = db
        .query_all_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT consumer, subject, reason FROM dead_message ORDER BY created_at, id",
        ))
        .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("", "consumer")?,
                r.try_get("", "subject")?,
                r.try_get("", "reason")?,
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_never_stops_on_one_row_unpublishable_rows_are_parked_and_the_rest_published()
-> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    // Poison first, so every round meets it before the good rows: larger than the server's
    // max_payload, a header name NATS cannot carry, and a subject no stream captures.
    let max_payload = bus.client().server_info().max_payload;
    let txn = db.db.begin().await?;
    enqueue(
        &txn,
        OutboxMessage::bytes(
            "lifecycle.github.big.activated",
            vec![b'x'; max_payload + 1],
        ),
    )
    .await?;
    // Enqueue refuses such a header now; a row written before that check (or by hand) still
    // holds one, so the row is given it afterwards.
    let hdr = enqueue(
        &txn,
        OutboxMessage::json("lifecycle.github.hdr.activated", &serde_json::json!({}))
            .header("Xbadname", "v"),
    )
    .await?;
    txn.execute_raw(sea_orm::Statement::from_sql_and_values(
        sea_orm::DbBackend::Postgres,
        "UPDATE outbox SET headers = replace(headers::text, 'Xbadname', 'Bad:Name')::jsonb
          WHERE id = $1",
        [hdr.into()],
    ))
    .await?;
    enqueue(
        &txn,
        OutboxMessage::json("nowhere.github.x.activated", &serde_json::json!({})),
    )
    .await?;
    txn.commit().await?;
    let expected = enqueue_many(&db.db, 1000).await?;

    let relay = Relay::new(
        db.db.clone(),
        bus.clone(),
        RelayConfig {
            batch_size: 100,
            poll_interval: Duration::from_millis(50),
            ..Default::default()
        },
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let token = shutdown.clone();
    let task = tokio::spawn(async move { relay.run(token).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while pending(&db.db).await? > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay stopped on a row: {} left",
            pending(&db.db).await?
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    task.await?;

    let ids: HashSet<String> = stored_ids(&bus).await?.into_iter().collect();
    assert_eq!(ids, expected, "every good row published, no poison stored");
    let dead = dead_rows(&db.db).await?;
    let subjects: Vec<&str> = dead.iter().map(|(_, s, _)| s.as_str()).collect();
    assert_eq!(
        subjects,
        [
            "lifecycle.github.big.activated",
            "lifecycle.github.hdr.activated",
            "nowhere.github.x.activated"
        ]
    );
    assert!(dead.iter().all(|(c, _, _)| c == bus::relay::RELAY_CONSUMER));
    assert!(dead[0].2.contains("max payload"), "{}", dead[0].2);
    assert!(dead[1].2.contains("Bad:Name"), "{}", dead[1].2);

    // A parked row is replayable like any dead message: back in the outbox as a new message.
    let (id,): (uuid::Uuid,) = sqlx::query_as(
        "SELECT id FROM dead_message WHERE subject = 'lifecycle.github.big.activated'",
    )
    .fetch_one(db.db.get_postgres_connection_pool())
    .await?;
    bus::dead::replay(&db.db, id).await?;
    assert_eq!(pending(&db.db).await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_failure_keeps_the_row_unparked_until_it_can_be_published() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    // No stream captures the subject for now (as while streams are still being declared).
    bus.jetstream()
        .delete_stream(bus.namespace().name(Stream::Lifecycle.name()))
        .await?;
    let expected = enqueue_many(&db.db, 5).await?;
    let relay = Relay::new(db.db.clone(), bus.clone(), RelayConfig::default());
    let err = relay.publish_batch().await.expect_err("no stream yet");
    eprintln!("transient: {err}");
    assert_eq!(pending(&db.db).await?, 5, "rows kept");
    assert!(dead_rows(&db.db).await?.is_empty(), "nothing parked");

    bus.declare_streams().await?;
    assert_eq!(relay.publish_batch().await?, 5);
    let ids: HashSet<String> = stored_ids(&bus).await?.into_iter().collect();
    assert_eq!(ids, expected);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_reports_how_long_its_oldest_row_waited() -> Result<()> {
    // This test's process has no other recorder (nextest runs each test alone).
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this process");
    let lag = || -> f64 {
        let rendered = metrics.render();
        let line = rendered
            .lines()
            .find(|l| l.starts_with("outbox_relay_lag_seconds "))
            .unwrap_or_else(|| panic!("no outbox_relay_lag_seconds in:\n{rendered}"));
        line["outbox_relay_lag_seconds ".len()..].parse().unwrap()
    };
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    enqueue_many(&db.db, 3).await?;
    // A backlog: the rows have waited two minutes (NATS was down, say).
    db.db
        .execute_unprepared("UPDATE outbox SET available_at = now() - interval '120 seconds'")
        .await?;
    let relay = Relay::new(db.db.clone(), bus.clone(), RelayConfig::default());
    assert_eq!(relay.publish_batch().await?, 3);
    assert!((120.0..300.0).contains(&lag()), "lag {}", lag());
    assert_eq!(relay.publish_batch().await?, 0);
    assert!(lag() <= 0.0, "nothing waits any more, yet lag {}", lag());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_relay_reports_its_backlog_and_registers_its_counters() -> Result<()> {
    // This test's process has no other recorder (nextest runs each test alone).
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this process");
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    enqueue_many(&db.db, 4).await?;
    // One row held for an inline publisher is not the relays' backlog yet.
    db.db
        .execute_unprepared(
            "UPDATE outbox SET available_at = now() + interval '1 hour' \
             WHERE id = (SELECT id FROM outbox LIMIT 1)",
        )
        .await?;
    let relay = Relay::new(db.db.clone(), bus.clone(), RelayConfig::default());
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run(stop).await }
    });
    // The first round counts before it publishes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let rendered = loop {
        let rendered = metrics.render();
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay published nothing:\n{rendered}"
        );
        if rendered.contains("outbox_published_total 3") {
            break rendered;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    stop.cancel();
    task.await?;
    for expected in ["outbox_backlog_rows 3\n", "outbox_parked_total 0\n"] {
        assert!(
            rendered.contains(expected),
            "{expected} not in:\n{rendered}"
        );
    }
    Ok(())
}
