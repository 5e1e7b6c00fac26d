//! What a NATS server must offer (docs/deploy.md, "NATS prerequisites"), each against a
//! nats-server of the test's own: credentials in NATS_URL reach it (async-nats by itself ignores
//! a URL's user info), and a server without JetStream or short of replicas is named with its fix.

use std::time::Duration;

use anyhow::Result;
use bus::{Bus, Namespace, StreamSettings};
use testkit::{NatsSetup, OwnNats};

/// Whether a bus on `url` can declare its streams within a few seconds.
async fn declares(url: &str) -> bool {
    let Ok(bus) = Bus::connect(
        url,
        None,
        Namespace::new("auth").unwrap(),
        StreamSettings::default(),
    )
    .await
    else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), bus.declare_streams()).await,
        Ok(Ok(()))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_s_user_and_password_authenticate() -> Result<()> {
    let nats = OwnNats::start(&NatsSetup {
        config: "authorization {\n  user: forgesync\n  password: \"p@ss:word\"\n}".into(),
        ..NatsSetup::jetstream()?
    })?;
    let port = nats.port();
    // Percent-encoded, as a URL must carry `@` and `:` in a password.
    assert!(declares(&format!("nats://forgesync:p%40ss%3Aword@127.0.0.1:{port}")).await);
    assert!(!declares(&format!("nats://forgesync:wrong@127.0.0.1:{port}")).await);
    assert!(!declares(&format!("nats://127.0.0.1:{port}")).await);
    Ok(())
}

/// The error a fresh namespace's declaration meets on `url` with `replicas`.
async fn declaration_error(url: &str, replicas: usize) -> Result<bus::BusError> {
    let bus = Bus::connect(
        url,
        None,
        Namespace::new("prereq").unwrap(),
        StreamSettings {
            replicas,
            ..StreamSettings::default()
        },
    )
    .await?;
    match tokio::time::timeout(Duration::from_secs(20), bus.declare_streams()).await? {
        Ok(()) => anyhow::bail!("the streams were declared"),
        Err(e) => Ok(e),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_jetstream_is_named_with_its_fix() -> Result<()> {
    let nats = OwnNats::start(&NatsSetup {
        jetstream: false,
        ..NatsSetup::jetstream()?
    })?;
    let err = declaration_error(&nats.url(), 1).await?;
    assert!(
        matches!(err, bus::BusError::Unmet(bus::Unmet::JetStreamOff { .. })),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("JetStream is not enabled") && text.contains("-js"),
        "{text}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_the_server_cannot_place_name_the_setting() -> Result<()> {
    // One server, no cluster: three copies of a stream cannot be placed.
    let nats = OwnNats::start(&NatsSetup::jetstream()?)?;
    let err = declaration_error(&nats.url(), 3).await?;
    assert!(
        matches!(
            err,
            bus::BusError::Unmet(bus::Unmet::Replicas { wanted: 3, .. })
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("FORGESYNC_STREAM_REPLICAS is 3"),
        "{err}"
    );
    // The same server with the replicas it can place declares everything.
    let bus = Bus::connect(
        &nats.url(),
        None,
        Namespace::new("prereq").unwrap(),
        StreamSettings::default(),
    )
    .await?;
    bus.declare_streams().await?;
    Ok(())
}
