//! Consumers against real NATS and Postgres: the runner settles what handlers return. A transient
//! failure comes back with backoff, a delivery budget ends in a dead message that can be replayed,
//! a permanent failure or an undecodable message is dead at once, in-progress acks keep a long
//! handler's message from redelivery, shutdown finishes in-flight work, and each consumer reports
//! its outcomes, failures by reason, redeliveries, durations and pending counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;
use async_nats::HeaderMap;
use bus::consumer::{self, ConsumerSpec, Delivery, Handler, HandlerError, Settle};
use bus::contracts::Incoming;
use bus::relay::{Relay, RelayConfig};
use bus::{Bus, Stream};
use sea_orm::{DatabaseConnection, EntityTrait};
use store::entity::dead_message;
use tokio_util::sync::CancellationToken;

/// Any JSON object; anything else does not decode.
struct AnyObject;

impl Incoming for AnyObject {
    fn decode(_: &str, _: &dyn Fn(&str) -> Option<String>, payload: &[u8]) -> Result<Self, String> {
        serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(payload)
            .map(|_| AnyObject)
            .map_err(|e| e.to_string())
    }
}

/// Fails transiently (or permanently) until `succeed` is set, then settles.
#[derive(Default)]
struct Flaky {
    attempts: AtomicUsize,
    acked: AtomicUsize,
    succeed: AtomicBool,
    permanent: bool,
    hold: Option<Duration>,
}

impl Handler for Flaky {
    type Message = AnyObject;

    async fn handle(&self, _: AnyObject, _: &Delivery) -> Result<Settle, HandlerError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        if let Some(hold) = self.hold {
            tokio::time::sleep(hold).await;
        }
        if !self.succeed.load(Ordering::SeqCst) {
            return Err(if self.permanent {
                HandlerError::permanent("never")
            } else {
                HandlerError::transient("not yet")
            });
        }
        self.acked.fetch_add(1, Ordering::SeqCst);
        Ok(Settle::Applied("test"))
    }
}

fn spec(max_deliveries: i64) -> ConsumerSpec {
    ConsumerSpec {
        max_deliveries,
        ack_wait: Duration::from_secs(10),
        backoff: vec![Duration::from_millis(100)],
        filter_subjects: vec!["lifecycle.>".into()],
        ..ConsumerSpec::new(Stream::Lifecycle, "test-consumer")
    }
}

fn start(
    bus: &Bus,
    db: &DatabaseConnection,
    spec: ConsumerSpec,
    handler: Arc<Flaky>,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), bus::BusError>>,
) {
    let token = CancellationToken::new();
    let (bus, db, t) = (bus.clone(), db.clone(), token.clone());
    let task = tokio::spawn(async move { consumer::run(&bus, db, spec, handler, t).await });
    (token, task)
}

async fn wait_for(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_delivery_comes_back_then_is_recorded_dead_after_its_budget() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let handler = Arc::new(Flaky::default());
    let (stop, task) = start(&bus, &db.db, spec(3), handler.clone());
    let mut headers = HeaderMap::new();
    headers.insert("Forgesync-Connection", "c1");
    bus.publish("lifecycle.github.c1.activated", "m-1", headers, "{}".into())
        .await?;

    wait_for("a dead message", async || {
        !dead_message::Entity::find()
            .all(&db.db)
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    // No delivery after the budget: the dead message was acked.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(handler.attempts.load(Ordering::SeqCst), 3);
    let dead = dead_message::Entity::find().all(&db.db).await?;
    assert_eq!(dead.len(), 1);
    let row = &dead[0];
    assert_eq!(
        row.subject, "lifecycle.github.c1.activated",
        "stored without the namespace"
    );
    assert_eq!(row.attempts, 3);
    assert_eq!(row.reason, "not yet");
    assert_eq!(row.headers["Forgesync-Connection"], "c1");
    assert!(row.headers.get(bus::MSG_ID_HEADER).is_none());
    stop.cancel();
    task.await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_dead_message_is_handled_again() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let handler = Arc::new(Flaky::default());
    let (stop, task) = start(&bus, &db.db, spec(2), handler.clone());
    bus.publish(
        "lifecycle.gitlab.c2.paused",
        "m-2",
        HeaderMap::new(),
        "{\"x\":1}".into(),
    )
    .await?;
    wait_for("a dead message", async || {
        !dead_message::Entity::find()
            .all(&db.db)
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    let dead = dead_message::Entity::find()
        .one(&db.db)
        .await?
        .expect("dead row");

    handler.succeed.store(true, Ordering::SeqCst);
    let replayed = bus::dead::replay(&db.db, dead.id).await?;
    assert_eq!(replayed.replay_count, 1);
    let relay = Relay::new(db.db.clone(), bus.clone(), RelayConfig::default());
    assert_eq!(relay.publish_batch().await?, 1);
    wait_for("the replay to be acked", async || {
        handler.acked.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(handler.attempts.load(Ordering::SeqCst), 3);

    assert!(matches!(
        bus::dead::replay(&db.db, uuid::Uuid::now_v7()).await,
        Err(bus::dead::ReplayError::NotFound(_))
    ));
    stop.cancel();
    task.await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_work_before_returning() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let handler = Arc::new(Flaky {
        succeed: AtomicBool::new(true),
        hold: Some(Duration::from_millis(700)),
        ..Default::default()
    });
    let (stop, task) = start(&bus, &db.db, spec(5), handler.clone());
    bus.publish(
        "lifecycle.slack.c3.resumed",
        "m-3",
        HeaderMap::new(),
        "{}".into(),
    )
    .await?;
    wait_for("the handler to start", async || {
        handler.attempts.load(Ordering::SeqCst) == 1
    })
    .await;
    stop.cancel();
    task.await??;
    assert_eq!(
        handler.acked.load(Ordering::SeqCst),
        1,
        "in-flight message finished and acked"
    );

    // Nothing is redelivered to a new consumer instance: the ack stuck.
    let again = Arc::new(Flaky {
        succeed: AtomicBool::new(true),
        ..Default::default()
    });
    let (stop, task) = start(&bus, &db.db, spec(5), again.clone());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(again.attempts.load(Ordering::SeqCst), 0);
    stop.cancel();
    task.await??;
    Ok(())
}

async fn dead_rows(db: &DatabaseConnection) -> Vec<dead_message::Model> {
    dead_message::Entity::find().all(db).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_is_dead_at_once_and_acked() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let handler = Arc::new(Flaky {
        permanent: true,
        ..Default::default()
    });
    let (stop, task) = start(&bus, &db.db, spec(5), handler.clone());
    bus.publish(
        "lifecycle.github.c4.activated",
        "m-4",
        HeaderMap::new(),
        "{}".into(),
    )
    .await?;
    wait_for("a dead message", async || {
        !dead_rows(&db.db).await.is_empty()
    })
    .await;
    // Acked: never delivered again although the budget allows four more attempts.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(handler.attempts.load(Ordering::SeqCst), 1);
    let dead = dead_rows(&db.db).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "never");
    assert_eq!(dead[0].attempts, 1);
    stop.cancel();
    task.await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_message_is_dead_without_reaching_the_handler() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let handler = Arc::new(Flaky {
        succeed: AtomicBool::new(true),
        ..Default::default()
    });
    let (stop, task) = start(&bus, &db.db, spec(5), handler.clone());
    bus.publish(
        "lifecycle.github.c5.activated",
        "m-5",
        HeaderMap::new(),
        "[1]".into(),
    )
    .await?;
    wait_for("a dead message", async || {
        !dead_rows(&db.db).await.is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(handler.attempts.load(Ordering::SeqCst), 0);
    let dead = dead_rows(&db.db).await;
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].reason.starts_with("undecodable: "),
        "{}",
        dead[0].reason
    );
    assert_eq!(dead[0].attempts, 1, "dead on its first delivery");
    assert_eq!(dead[0].payload, b"[1]");
    stop.cancel();
    task.await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_acks_keep_a_long_handler_from_redelivery() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    // Works four times as long as the server waits for an ack.
    let handler = Arc::new(Flaky {
        succeed: AtomicBool::new(true),
        hold: Some(Duration::from_secs(4)),
        ..Default::default()
    });
    let spec = ConsumerSpec {
        ack_wait: Duration::from_secs(1),
        ..spec(5)
    };
    let (stop, task) = start(&bus, &db.db, spec, handler.clone());
    bus.publish(
        "lifecycle.github.c6.activated",
        "m-6",
        HeaderMap::new(),
        "{}".into(),
    )
    .await?;
    wait_for("the handler to finish", async || {
        handler.acked.load(Ordering::SeqCst) == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        handler.attempts.load(Ordering::SeqCst),
        1,
        "not redelivered while it was being handled"
    );
    assert!(dead_rows(&db.db).await.is_empty());
    stop.cancel();
    task.await??;
    Ok(())
}

/// A handler stalled on a slow vendor holds its worker no longer than the consumer's handler
/// deadline: it is dropped, the message comes again after its backoff, and once its budget is
/// spent it is dead with the reason (never lost, never held forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_handler_is_dropped_at_its_deadline_and_the_message_comes_again() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let handler = Arc::new(Flaky {
        succeed: AtomicBool::new(true),
        hold: Some(Duration::from_secs(600)),
        ..Default::default()
    });
    let spec = ConsumerSpec {
        handler_deadline: Some(Duration::from_millis(300)),
        ..spec(2)
    };
    let (stop, task) = start(&bus, &db.db, spec, handler.clone());
    let started = std::time::Instant::now();
    bus.publish(
        "lifecycle.github.c9.activated",
        "m-9",
        HeaderMap::new(),
        "{}".into(),
    )
    .await?;
    wait_for("the stalled message to be recorded dead", async || {
        !dead_rows(&db.db).await.is_empty()
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(handler.attempts.load(Ordering::SeqCst), 2);
    assert_eq!(handler.acked.load(Ordering::SeqCst), 0);
    let dead = dead_rows(&db.db).await;
    assert!(dead[0].reason.contains("deadline"), "{}", dead[0].reason);
    stop.cancel();
    task.await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_are_counted_per_consumer() -> Result<()> {
    // This test's process has no other recorder (nextest runs each test alone).
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this process");
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let handler = Arc::new(Flaky {
        permanent: true,
        ..Default::default()
    });
    let (stop, task) = start(&bus, &db.db, spec(5), handler.clone());
    bus.publish(
        "lifecycle.github.c7.activated",
        "m-7",
        HeaderMap::new(),
        "{}".into(),
    )
    .await?;
    wait_for("a dead message", async || {
        !dead_rows(&db.db).await.is_empty()
    })
    .await;
    handler.succeed.store(true, Ordering::SeqCst);
    bus.publish(
        "lifecycle.github.c7.activated",
        "m-8",
        HeaderMap::new(),
        "{}".into(),
    )
    .await?;
    wait_for("the second to be handled", async || {
        handler.acked.load(Ordering::SeqCst) == 1
    })
    .await;
    stop.cancel();
    task.await??;
    let consumer = bus.namespace().name("test-consumer");
    let rendered = metrics.render();
    for outcome in ["dead", "applied"] {
        let line = format!("bus_messages_total{{consumer=\"{consumer}\",outcome=\"{outcome}\"}} 1");
        assert!(rendered.contains(&line), "{line} not in:\n{rendered}");
    }
    Ok(())
}

/// Panics on every message.
struct Panics(AtomicUsize);

impl Handler for Panics {
    type Message = AnyObject;

    async fn handle(&self, _: AnyObject, _: &Delivery) -> Result<Settle, HandlerError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("handler bug");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_redelivered_then_dead_never_lost() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let handler = Arc::new(Panics(AtomicUsize::new(0)));
    let token = CancellationToken::new();
    let task = tokio::spawn({
        let (bus, db, t, h) = (bus.clone(), db.db.clone(), token.clone(), handler.clone());
        async move { consumer::run(&bus, db, spec(2), h, t).await }
    });
    bus.publish(
        "lifecycle.github.c9.activated",
        "m-9",
        HeaderMap::new(),
        "{}".into(),
    )
    .await?;
    wait_for("a dead message", async || {
        !dead_rows(&db.db).await.is_empty()
    })
    .await;
    assert_eq!(handler.0.load(Ordering::SeqCst), 2);
    let dead = dead_rows(&db.db).await;
    assert_eq!(dead[0].reason, "dropped without ack");
    assert_eq!(dead[0].attempts, 2);
    token.cancel();
    task.await??;
    Ok(())
}

/// Fails its first delivery of each message transiently, settles the redelivery.
struct FailsFirst;

impl Handler for FailsFirst {
    type Message = AnyObject;

    async fn handle(&self, _: AnyObject, delivery: &Delivery) -> Result<Settle, HandlerError> {
        if delivery.attempt() == 1 {
            return Err(HandlerError::transient("first time"));
        }
        Ok(Settle::Applied("test"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_redeliveries_durations_and_pending_are_reported_per_consumer() -> Result<()> {
    // This test's process has no other recorder (nextest runs each test alone).
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this process");
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let token = CancellationToken::new();
    let task = tokio::spawn({
        let (bus, db, t) = (bus.clone(), db.db.clone(), token.clone());
        async move { consumer::run(&bus, db, spec(5), Arc::new(FailsFirst), t).await }
    });
    let consumer = bus.namespace().name("test-consumer");
    let line = |name: &str, labels: &str| format!("{name}{{consumer=\"{consumer}\"{labels}}}");
    // Registered at zero before anything arrives, so the first failure is an increase.
    wait_for("the consumer's series", async || {
        metrics
            .render()
            .contains(&format!("{} 0", line("bus_redeliveries_total", "")))
    })
    .await;
    bus.publish(
        "lifecycle.github.c10.activated",
        "m-10",
        HeaderMap::new(),
        "{}".into(),
    )
    .await?;
    let applied = format!("{} 1", line("bus_messages_total", ",outcome=\"applied\""));
    wait_for("the redelivery to be applied", async || {
        metrics.render().contains(&applied)
    })
    .await;
    token.cancel();
    task.await??;
    let rendered = metrics.render();
    for expected in [
        format!("{} 1", line("bus_messages_total", ",outcome=\"nak\"")),
        format!("{} 0", line("bus_messages_total", ",outcome=\"dead\"")),
        format!(
            "{} 1",
            line("bus_message_failures_total", ",reason=\"transient\"")
        ),
        format!(
            "{} 0",
            line("bus_message_failures_total", ",reason=\"exhausted\"")
        ),
        format!("{} 1", line("bus_redeliveries_total", "")),
        format!(
            "{} 1",
            line("bus_message_duration_seconds_count", ",outcome=\"nak\"")
        ),
        format!(
            "{} 1",
            line("bus_message_duration_seconds_count", ",outcome=\"applied\"")
        ),
        // The server's account of the durable, read when the consumer started.
        format!("{} ", line("bus_consumer_pending_messages", "")),
        format!("{} ", line("bus_consumer_ack_pending_messages", "")),
    ] {
        assert!(
            rendered.contains(&expected),
            "{expected} not in:\n{rendered}"
        );
    }
    Ok(())
}
