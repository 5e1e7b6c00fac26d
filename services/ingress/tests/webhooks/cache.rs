//! Cached endpoint reads never outlive a change: a disconnect or a rotation applies to the next
//! delivery, because the store re-checks the endpoint when it takes the delivery's dedup keys.

use std::time::Duration;

use anyhow::Result;
use reqwest::StatusCode;
use sea_orm::ConnectionTrait as _;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;

use crate::support::{Harness, count, github_push, sign};

const HOOK: &str = "808";

fn push(n: u64, secret: &str) -> (Vec<(&'static str, String)>, Vec<u8>) {
    let body = github_push(n);
    (
        vec![
            ("X-GitHub-Event", "push".to_owned()),
            ("X-GitHub-Delivery", format!("cache-{n}")),
            ("X-GitHub-Hook-ID", HOOK.to_owned()),
            (
                "X-Hub-Signature-256",
                format!("sha256={}", sign(secret, &[&body])),
            ),
        ],
        body,
    )
}

/// An ingress that keeps endpoint reads for ten minutes: every change below happens while the
/// endpoint is cached.
async fn cached_for_long() -> Result<Harness> {
    Harness::start_with(|c| c.endpoint_cache_ms = 600_000).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_endpoint_takes_nothing_once_its_connection_is_disconnected() -> Result<()> {
    let h = cached_for_long().await?;
    let conn = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&conn, Registration::Operator, Some(HOOK), None, "s")
        .await?;
    let (hs, b) = push(1, "s");
    assert_eq!(h.post("/webhooks/github", &hs, b).await?.0, StatusCode::OK);

    store::inbound::disable_endpoints(h.db(), conn.id).await?;
    let (hs, b) = push(2, "s");
    let (status, text) = h.post("/webhooks/github", &hs, b).await?;
    assert_eq!(status, StatusCode::GONE, "{text}");
    assert_eq!(
        h.footprint().await?,
        [1, 1, 2, 1],
        "the second stored nothing"
    );
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_endpoint_follows_a_rotation_and_the_end_of_its_window_at_once() -> Result<()> {
    let h = cached_for_long().await?;
    let conn = h.connection(ConnectionKind::Github, None).await?;
    let ep = h
        .endpoint(&conn, Registration::Operator, Some(HOOK), None, "old")
        .await?;
    let (hs, b) = push(1, "old");
    assert_eq!(h.post("/webhooks/github", &hs, b).await?.0, StatusCode::OK);

    store::inbound::rotate_secret(
        h.db(),
        &h.key,
        ep,
        b"new",
        Duration::from_secs(86_400),
        false,
    )
    .await?;
    // The cached read knows only the old secret: the new one is read afresh.
    let (hs, b) = push(2, "new");
    assert_eq!(h.post("/webhooks/github", &hs, b).await?.0, StatusCode::OK);
    let (hs, b) = push(3, "old");
    assert_eq!(h.post("/webhooks/github", &hs, b).await?.0, StatusCode::OK);

    // The window ends while the read that still holds the old secret is cached.
    h.db()
        .execute_unprepared(
            "UPDATE inbound_endpoint SET previous_valid_until = now() - interval '1 second'",
        )
        .await?;
    let (hs, b) = push(4, "old");
    let (status, text) = h.post("/webhooks/github", &hs, b).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
    let (hs, b) = push(5, "new");
    assert_eq!(h.post("/webhooks/github", &hs, b).await?.0, StatusCode::OK);
    assert_eq!(
        count(
            h.db(),
            "SELECT count(*) FROM inbound_message WHERE provider_event_id = 'cache-4'"
        )
        .await?,
        0
    );
    assert_eq!(
        count(
            h.db(),
            "SELECT count(*) FROM inbound_message WHERE verification = 'previous_signature'"
        )
        .await?,
        1
    );
    assert_eq!(h.footprint().await?[0], 4);
    h.ingress.stop().await
}
