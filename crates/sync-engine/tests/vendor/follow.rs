//! A shared webhook consumer whose filters grew past what the server takes (every tenant's
//! monitors widen it): the server refuses the declaration, and the consumer says so and declares
//! again; it never ends the service. Once the filters fit again, deliveries flow.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use bus::Stream;
use bus::consumer::{ConsumerSpec, Delivery, Handler, HandlerError, Settle};
use lifecycle_core::subject::Monitor;
use store::contracts::Incoming;
use sync_engine::webhook::follow::{self, Filters, Monitors};
use tokio_util::sync::CancellationToken;

/// Monitors a test sets at will.
#[derive(Clone, Default)]
struct Set(Arc<Mutex<Vec<Monitor>>>);

impl Monitors for Set {
    async fn monitors(&self) -> Result<Vec<Monitor>, sqlx::Error> {
        Ok(self.0.lock().expect("not poisoned").clone())
    }
}

/// Any message.
struct Any;

impl Incoming for Any {
    fn decode(_: &str, _: &dyn Fn(&str) -> Option<String>, _: &[u8]) -> Result<Self, String> {
        Ok(Any)
    }
}

#[derive(Default)]
struct Counted(AtomicUsize);

impl Handler for Counted {
    type Message = Any;

    async fn handle(&self, _: Any, _: &Delivery) -> Result<Settle, HandlerError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Settle::Applied("counted"))
    }
}

fn channels(n: usize) -> Vec<Monitor> {
    (0..n)
        .map(|i| Monitor::SlackChannel {
            team: "t0acme".into(),
            channel: format!("c{i:05}-a-channel-name-long-enough-to-grow-the-request"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_the_server_refuses_declares_again_and_never_ends() -> Result<()> {
    // A server taking requests of 8 KiB at most: a consumer with hundreds of filters does not fit.
    let nats = testkit::OwnNats::start(&testkit::NatsSetup {
        config: "max_payload: 8192".into(),
        ..testkit::NatsSetup::jetstream()?
    })?;
    let db = testkit::TestDb::new().await?;
    let bus = bus::Bus::connect(
        &nats.url(),
        None,
        bus::Namespace::new("").map_err(anyhow::Error::msg)?,
        bus::StreamSettings::default(),
    )
    .await?;
    bus.declare_streams().await?;
    let monitors = Set::default();
    *monitors.0.lock().expect("not poisoned") = channels(400);
    let handler = Arc::new(Counted::default());
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (bus, db, handler, stop) = (bus.clone(), db.db.clone(), handler.clone(), stop.clone());
        let filters = Filters {
            monitors: monitors.clone(),
            excluded: Vec::new(),
            // Unbounded, as the filters were before they had a cap: the server refuses them.
            cap: usize::MAX,
        };
        async move {
            follow::run(
                bus,
                db,
                ConsumerSpec::new(Stream::WebhooksSlack, "follow-refused"),
                handler,
                filters,
                Duration::from_millis(100),
                stop,
            )
            .await
        }
    });
    // Refused, again and again: it keeps running.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !task.is_finished(),
        "the consumer ended when the server refused it"
    );

    // The filters fit again: the next declaration takes, and deliveries flow.
    *monitors.0.lock().expect("not poisoned") = channels(1);
    let subject = match &channels(1)[0] {
        Monitor::SlackChannel { channel, .. } => {
            format!(
                "slack.t0acme.{}.message",
                lifecycle_core::subject::token(channel)?
            )
        }
        _ => unreachable!(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut n = 0;
    while handler.0.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no delivery reached the consumer once its filters fit"
        );
        n += 1;
        bus.publish(
            &subject,
            &format!("m-{n}"),
            async_nats::HeaderMap::new(),
            "{}".into(),
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!task.is_finished());
    stop.cancel();
    task.await??;
    Ok(())
}

/// With its cap, the consumer every tenant's monitors widen stays small: 400 channels of one
/// team and one of another, on a server that refuses a request past 8 KiB, are declared as a
/// bounded filter the server takes. A monitored channel's delivery is handled, and a team-level
/// one, another consumer's subject the wider filter also takes, is settled untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_following_every_tenants_monitors_keeps_a_bounded_filter() -> Result<()> {
    let nats = testkit::OwnNats::start(&testkit::NatsSetup {
        config: "max_payload: 8192".into(),
        ..testkit::NatsSetup::jetstream()?
    })?;
    let db = testkit::TestDb::new().await?;
    let bus = bus::Bus::connect(
        &nats.url(),
        None,
        bus::Namespace::new("").map_err(anyhow::Error::msg)?,
        bus::StreamSettings::default(),
    )
    .await?;
    bus.declare_streams().await?;
    let monitors = Set::default();
    let mut all = channels(400);
    all.push(Monitor::SlackChannel {
        team: "t1other".into(),
        channel: "c1".into(),
    });
    *monitors.0.lock().expect("not poisoned") = all;
    let handler = Arc::new(Counted::default());
    let stop = CancellationToken::new();
    let spec = ConsumerSpec::new(Stream::WebhooksSlack, "follow-bounded");
    let task = tokio::spawn({
        let (bus, db, handler, stop, spec) = (
            bus.clone(),
            db.db.clone(),
            handler.clone(),
            stop.clone(),
            spec.clone(),
        );
        let filters = Filters {
            monitors: monitors.clone(),
            // Team-level events are another consumer's.
            excluded: vec!["slack.*.?.>".into()],
            cap: 16,
        };
        async move {
            follow::run(
                bus,
                db,
                spec,
                handler,
                filters,
                Duration::from_millis(100),
                stop,
            )
            .await
        }
    });
    let channel = match &channels(400)[399] {
        Monitor::SlackChannel { channel, .. } => lifecycle_core::subject::token(channel)?,
        _ => unreachable!(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let declared = loop {
        if let Some(filters) = bus::consumer::server_filters(&bus, &spec).await? {
            break filters;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bounded consumer was never declared"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(declared.len() <= 16, "{declared:?}");
    assert!(
        declared.contains(&"slack.t0acme.>".to_owned()),
        "{declared:?}"
    );
    for (n, subject) in [
        "slack.t0acme.?.member_joined_channel".to_owned(),
        format!("slack.t0acme.{channel}.message"),
        "slack.t1other.c1.message".to_owned(),
    ]
    .iter()
    .enumerate()
    {
        bus.publish(
            subject,
            &format!("m-{n}"),
            async_nats::HeaderMap::new(),
            "{}".into(),
        )
        .await?;
    }
    while handler.0.load(Ordering::SeqCst) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the monitored channels' deliveries were not handled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Give the team-level delivery time to be (wrongly) handled too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        handler.0.load(Ordering::SeqCst),
        2,
        "a team-level delivery was handled by the channels' consumer"
    );
    assert!(!task.is_finished());
    stop.cancel();
    task.await??;
    Ok(())
}
