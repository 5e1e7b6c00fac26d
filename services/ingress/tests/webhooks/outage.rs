//! A NATS outage does not take the front door down: with NATS not running, valid deliveries are
//! still answered 2xx (they are durable in Postgres) and `/readyz` stays ready; once NATS is
//! back, the streams are declared and every stored delivery reaches its stream exactly once.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Result;
use bus::{Bus, Stream, StreamSettings};
use reqwest::StatusCode;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;

use crate::support::{Harness, count, github_push, sign};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_stays_up_through_a_nats_outage_and_delivers_everything_once_it_is_back()
-> Result<()> {
    let setup = testkit::NatsSetup::jetstream()?;
    let url = testkit::OwnNats::url_of(setup.port);
    // NATS is down from the start: nothing listens on `port` yet.
    let h = Harness::start_with(|c| c.common.nats_url = url.clone()).await?;
    let conn = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&conn, Registration::Operator, Some("7"), None, "s")
        .await?;
    let mut ids = HashSet::new();
    for n in 0..5u64 {
        let body = github_push(n);
        let id = format!("outage-{n}");
        let headers = vec![
            ("X-GitHub-Event", "push".to_owned()),
            ("X-GitHub-Delivery", id.clone()),
            ("X-GitHub-Hook-ID", "7".to_owned()),
            (
                "X-Hub-Signature-256",
                format!("sha256={}", sign("s", &[&body])),
            ),
        ];
        let (status, text) = h.post("/webhooks/github", &headers, body).await?;
        assert!(status.is_success(), "{status}: {text}");
        ids.insert(id);
    }
    let ready = h
        .http
        .get(format!("{}/readyz", h.ingress.url()))
        .send()
        .await?;
    assert_eq!(
        ready.status(),
        StatusCode::OK,
        "ready without NATS: {}",
        ready.text().await?
    );
    assert_eq!(count(h.db(), "SELECT count(*) FROM outbox").await?, 5);

    // NATS comes back: the streams are declared and the relay delivers each delivery once.
    let _nats = testkit::OwnNats::start(&setup)?;
    let bus = Bus::connect(
        &url,
        None,
        h.env.bus.namespace().clone(),
        StreamSettings::default(),
    )
    .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while count(h.db(), "SELECT count(*) FROM outbox").await? > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the outbox was not drained after NATS came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let stored =
        testkit::read_stream(&bus, Stream::WebhooksGithub, ">", 5, Duration::from_secs(5)).await?;
    assert_eq!(stored.len(), 5, "each delivery once: {stored:?}");
    let msg_ids: HashSet<_> = stored.iter().filter_map(|m| m.msg_id.clone()).collect();
    assert_eq!(msg_ids.len(), 5, "no delivery twice");
    h.ingress.stop().await
}
