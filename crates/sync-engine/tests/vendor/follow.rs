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
