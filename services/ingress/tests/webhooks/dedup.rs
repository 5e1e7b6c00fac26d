//! A redelivery changes nothing: provider event ids forever, body digests for a day, enforced by
//! unique keys, and the stream deduplicates on the same key.

use anyhow::Result;
use bus::Stream;
use reqwest::StatusCode;
use sea_orm::ConnectionTrait as _;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;

use crate::support::{Harness, count, github_push as body, sign};

const SECRET: &str = "gh-webhook-secret";

fn push(delivery: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        ("X-GitHub-Event", "push".to_owned()),
        ("X-GitHub-Delivery", delivery.to_owned()),
        ("X-GitHub-Hook-ID", "77".to_owned()),
        (
            "X-Hub-Signature-256",
            format!("sha256={}", sign(SECRET, &[body])),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_concurrent_copies_make_one_message_and_one_stream_entry() -> Result<()> {
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&conn, Registration::Operator, Some("77"), None, SECRET)
        .await?;
    let b = body(111);
    let hs = push("same-delivery", &b);
    let sends = (0..5).map(|_| h.post("/webhooks/github", &hs, b.clone()));
    for r in futures::future::join_all(sends).await {
        let (s, text) = r?;
        assert_eq!(s, StatusCode::OK, "{text}");
    }
    assert_eq!(h.footprint().await?, [1, 1, 2, 1]);
    assert_eq!(h.settled(Stream::WebhooksGithub, 1).await?.len(), 1);
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivery_changes_nothing_by_event_id_or_by_body_digest() -> Result<()> {
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&conn, Registration::Operator, Some("77"), None, SECRET)
        .await?;
    let (s, _) = h
        .post("/webhooks/github", &push("d-1", &body(1)), body(1))
        .await?;
    assert_eq!(s, StatusCode::OK);

    // Same delivery id, even with another body: recognised forever.
    let (s, text) = h
        .post("/webhooks/github", &push("d-1", &body(2)), body(2))
        .await?;
    assert_eq!(
        (s, text.contains("duplicate")),
        (StatusCode::OK, true),
        "{text}"
    );
    // Same body under a new id: recognised by its digest.
    let (s, text) = h
        .post("/webhooks/github", &push("d-9", &body(1)), body(1))
        .await?;
    assert_eq!(
        (s, text.contains("duplicate")),
        (StatusCode::OK, true),
        "{text}"
    );
    assert_eq!(
        count(h.db(), "SELECT count(*) FROM inbound_message").await?,
        1
    );

    // After the digest's day the same body is new again; the event id never expires.
    h.db()
        .execute_unprepared("UPDATE dedup_key SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL")
        .await?;
    let (s, text) = h
        .post("/webhooks/github", &push("d-9", &body(1)), body(1))
        .await?;
    assert_eq!(
        (s, text.contains("accepted")),
        (StatusCode::OK, true),
        "{text}"
    );
    let (s, text) = h
        .post("/webhooks/github", &push("d-1", &body(3)), body(3))
        .await?;
    assert_eq!(
        (s, text.contains("duplicate")),
        (StatusCode::OK, true),
        "{text}"
    );
    assert_eq!(
        count(h.db(), "SELECT count(*) FROM inbound_message").await?,
        2
    );
    assert_eq!(h.settled(Stream::WebhooksGithub, 2).await?.len(), 2);
    h.ingress.stop().await
}
