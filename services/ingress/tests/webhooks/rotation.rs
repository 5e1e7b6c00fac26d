//! Secret rotation: the previous secret verifies inside its window and not after.

use std::time::Duration;

use anyhow::Result;
use reqwest::StatusCode;
use sea_orm::ConnectionTrait as _;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::{self, Registration};

use crate::support::{Harness, count, github_push, sign};

fn push(n: u64, secret: &str) -> (Vec<(&'static str, String)>, Vec<u8>) {
    let body = github_push(n);
    (
        vec![
            ("X-GitHub-Event", "push".to_owned()),
            ("X-GitHub-Delivery", format!("d-{n}")),
            ("X-GitHub-Hook-ID", "55".to_owned()),
            (
                "X-Hub-Signature-256",
                format!("sha256={}", sign(secret, &[&body])),
            ),
        ],
        body,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_secret_verifies_inside_the_window_only() -> Result<()> {
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Github, None).await?;
    let ep = h
        .endpoint(
            &conn,
            Registration::Operator,
            Some("55"),
            None,
            "old-secret",
        )
        .await?;
    let rotated = store::inbound::rotate_secret(
        h.db(),
        &h.key,
        ep,
        b"new-secret",
        Duration::from_secs(86_400),
        false,
    )
    .await?;
    assert_eq!(rotated.status, inbound_endpoint::EndpointStatus::Rotating);

    let (hs, b) = push(1, "old-secret");
    assert_eq!(h.post("/webhooks/github", &hs, b).await?.0, StatusCode::OK);
    let (hs, b) = push(2, "new-secret");
    assert_eq!(h.post("/webhooks/github", &hs, b).await?.0, StatusCode::OK);
    assert_eq!(
        count(
            h.db(),
            "SELECT count(*) FROM inbound_message WHERE verification = 'previous_signature'"
        )
        .await?,
        1
    );

    // The window ends.
    h.db()
        .execute_unprepared(
            "UPDATE inbound_endpoint SET previous_valid_until = now() - interval '1 second'",
        )
        .await?;
    // Compare with what is stored now (the dispatcher is still at work on earlier rows, so
    // nothing is truncated under it).
    let before = h.footprint().await?;
    let (hs, b) = push(3, "old-secret");
    let (status, body) = h.post("/webhooks/github", &hs, b).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("bad_signature"), "{body}");
    assert_eq!(
        h.footprint().await?,
        before,
        "a refused delivery stored something"
    );
    let (hs, b) = push(4, "new-secret");
    assert_eq!(h.post("/webhooks/github", &hs, b).await?.0, StatusCode::OK);
    h.ingress.stop().await
}
