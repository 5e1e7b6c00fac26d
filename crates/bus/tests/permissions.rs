//! NATS authorization as an attacker meets it (issue 28), against a nats-server of the test's own
//! that enforces `bus::permissions`: a client without credentials is refused; ingress's user
//! cannot queue a job, take one, or listen to another service's subjects or replies; and a
//! service's outbox relay claims only the rows its user may publish, so it never holds a row
//! the server would refuse it.

use std::time::Duration;

use anyhow::Result;
use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, pull};
use bus::permissions::{self, Identity};
use bus::relay::{Relay, RelayConfig};
use bus::{Bus, Namespace, Stream, StreamSettings};
use futures::StreamExt;
use sea_orm::TransactionTrait;
use store::outbox::{OutboxMessage, enqueue};
use testkit::{NatsSetup, OwnNats};

/// A server whose users are the identities of `bus::permissions`, in no namespace.
struct Authorized(OwnNats);

impl Authorized {
    fn start() -> Result<Authorized> {
        let config =
            permissions::authorization(&Namespace::root(), |i| format!("\"{}\"", password(i)));
        Ok(Authorized(OwnNats::start(&NatsSetup {
            config,
            ..NatsSetup::jetstream()?
        })?))
    }

    /// The URL a service connects with: its user and password in the user info.
    fn url(&self, identity: Identity) -> String {
        format!(
            "nats://{}:{}@127.0.0.1:{}",
            identity.user(),
            password(identity),
            self.0.port()
        )
    }

    async fn bus(&self, identity: Identity) -> Result<Bus> {
        let bus = Bus::connect(
            &self.url(identity),
            None,
            Namespace::root(),
            StreamSettings::default(),
        )
        .await?;
        // Every service declares the streams when it starts.
        bus.declare_streams().await?;
        Ok(bus)
    }
}

fn password(identity: Identity) -> String {
    format!("{}-password", identity.user())
}

/// How many messages `stream` holds.
async fn stored(bus: &Bus, stream: Stream) -> Result<u64> {
    let mut handle = bus.jetstream().get_stream(stream.name()).await?;
    Ok(handle.info().await?.state.messages)
}

/// Whether `subscriber` receives nothing within a second.
async fn hears_nothing(subscriber: &mut async_nats::Subscriber) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(1), subscriber.next()).await,
        Err(_) | Ok(None)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_credentials_is_refused() -> Result<()> {
    let nats = Authorized::start()?;
    let anonymous = async_nats::ConnectOptions::new()
        .connect(nats.0.url())
        .await;
    assert!(anonymous.is_err(), "a client without credentials connected");
    let guessed = async_nats::ConnectOptions::with_user_and_password(
        Identity::ControlApi.user().into(),
        "guess".into(),
    )
    .connect(nats.0.url())
    .await;
    assert!(guessed.is_err(), "a guessed password connected");
    // The users themselves get in, through the URL as services pass it.
    nats.bus(Identity::ControlApi).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_cannot_queue_take_or_overhear_jobs() -> Result<()> {
    let nats = Authorized::start()?;
    let ingress = nats.bus(Identity::Ingress).await?;
    let control = nats.bus(Identity::ControlApi).await?;
    let sync = nats.bus(Identity::GithubSync).await?;

    // Its own subjects pass, so what is refused below is refused for what it is.
    ingress
        .publish("github.acme.repo.push", "d1", HeaderMap::new(), "{}".into())
        .await?;
    let job = format!("jobs.github.{}.initial", uuid::Uuid::new_v4());
    let queued = ingress
        .publish(&job, "j1", HeaderMap::new(), "{}".into())
        .await;
    assert!(queued.is_err(), "ingress queued a job: {queued:?}");
    assert_eq!(stored(&control, Stream::Jobs).await?, 0);

    // No durable of its own on the jobs, nor listening to them or to github-sync's replies
    // (where github-sync's pulled jobs arrive).
    let durable = ingress
        .jetstream()
        .get_stream(Stream::Jobs.name())
        .await?
        .create_consumer(pull::Config {
            durable_name: Some("ingress-jobs".into()),
            ..Default::default()
        })
        .await;
    assert!(durable.is_err(), "ingress declared a consumer on JOBS");
    let mut jobs = ingress.client().subscribe("jobs.>").await?;
    let mut replies = ingress.client().subscribe("_INBOX.github-sync.>").await?;
    ingress.client().flush().await?;

    // control-api queues the job and github-sync takes it: ingress hears neither.
    control
        .publish(&job, "j2", HeaderMap::new(), "{}".into())
        .await?;
    let taken = sync
        .jetstream()
        .get_stream(Stream::Jobs.name())
        .await?
        .create_consumer(pull::Config {
            durable_name: Some("github-sync-jobs".into()),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await?
        .fetch()
        .max_messages(1)
        .messages()
        .await?
        .next()
        .await
        .expect("github-sync takes the job")
        .map_err(anyhow::Error::msg)?;
    assert_eq!(taken.subject.as_str(), job);
    taken.double_ack().await.map_err(anyhow::Error::msg)?;
    assert!(hears_nothing(&mut jobs).await, "ingress overheard a job");
    assert!(
        hears_nothing(&mut replies).await,
        "ingress overheard github-sync's replies"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_claims_only_what_its_user_may_publish() -> Result<()> {
    let nats = Authorized::start()?;
    let db = testkit::TestDb::new().await?;
    let job = format!("jobs.github.{}.initial", uuid::Uuid::new_v4());
    let txn = db.db.begin().await?;
    enqueue(&txn, OutboxMessage::json(&job, &serde_json::json!({}))).await?;
    enqueue(
        &txn,
        OutboxMessage::json("github.acme.repo.push", &serde_json::json!({})),
    )
    .await?;
    txn.commit().await?;
    let relay = |bus: Bus, identity: Identity| {
        Relay::new(
            db.db.clone(),
            bus,
            RelayConfig {
                subjects: identity.publishes(),
                ..RelayConfig::default()
            },
        )
    };

    // Ingress's relay sends the delivery and leaves the job, without a refusal to wait out.
    let ingress = nats.bus(Identity::Ingress).await?;
    let sent = relay(ingress.clone(), Identity::Ingress)
        .publish_batch()
        .await?;
    assert_eq!(sent, 1);
    assert_eq!(stored(&ingress, Stream::WebhooksGithub).await?, 1);
    assert_eq!(stored(&ingress, Stream::Jobs).await?, 0);

    // control-api's relay sends the job.
    let control = nats.bus(Identity::ControlApi).await?;
    let sent = relay(control.clone(), Identity::ControlApi)
        .publish_batch()
        .await?;
    assert_eq!(sent, 1);
    assert_eq!(stored(&control, Stream::Jobs).await?, 1);
    db.drop().await;
    Ok(())
}

#[test]
fn the_shipped_nats_conf_is_valid_and_needs_every_password() -> Result<()> {
    let bin = std::env::var("FORGESYNC_TEST_NATS_SERVER")?;
    let conf = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/nats.conf");
    let valid = |without: Option<Identity>| {
        let mut check = std::process::Command::new(&bin);
        check.args(["-c", conf, "-t"]);
        for identity in Identity::ALL.into_iter().filter(|i| Some(*i) != without) {
            check.env(identity.password_variable(), password(identity));
        }
        check.output().map(|out| out.status.success())
    };
    assert!(valid(None)?, "deploy/nats.conf does not parse");
    // A password left unset stops the server rather than opening its user.
    assert!(!valid(Some(Identity::Eraser))?);
    Ok(())
}
