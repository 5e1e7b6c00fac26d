//! GitHub: `X-Hub-Signature-256` over the raw body, routed by repository or owner.

use anyhow::Result;
use bus::Stream;
use reqwest::StatusCode;
use sea_orm::ConnectionTrait as _;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use vendor_sim::github::webhook;
use vendor_sim::github::{Model, NewPullRequest, RepoId};

use crate::support::{Harness, assert_refused, count, sign};

const SECRET: &str = "gh-webhook-secret";

/// `Acme/<name>`, an organization's installed repository, as the simulator holds it.
fn acme_repository(name: &str) -> (Model, RepoId) {
    let mut m = Model::new();
    let installation = m.add_installation("Acme");
    let repo = m.add_repository(Some(installation), "Acme", name);
    (m, repo)
}

/// A `pull_request.opened` payload as GitHub sends it (the simulator's builder, checked against
/// GitHub's published schema in vendor-sim), of a repository whose name needs escaping in a
/// subject.
fn pull_request() -> serde_json::Value {
    let (mut m, repo) = acme_repository("Socket.io");
    let pr = m
        .add_pull_request(
            repo,
            NewPullRequest {
                title: "Fix".into(),
                author: Some("octocat".into()),
                ..Default::default()
            },
        )
        .expect("the repository exists");
    webhook::pull_request_payload(&m, "opened", m.repository(repo).expect("added"), &pr)
}

/// A `repository.renamed` payload as GitHub sends it: `socket-io` became `Socket.io`.
fn repository_renamed() -> serde_json::Value {
    let (mut m, repo) = acme_repository("socket-io");
    m.rename_repository(repo, "Socket.io");
    webhook::repository_payload(
        &m,
        "renamed",
        m.repository(repo).expect("added"),
        Some(webhook::renamed_changes("socket-io")),
    )
}

fn headers(event: &str, delivery: &str, body: &[u8], secret: &str) -> Vec<(&'static str, String)> {
    vec![
        ("X-GitHub-Event", event.to_owned()),
        ("X-GitHub-Delivery", delivery.to_owned()),
        ("X-GitHub-Hook-ID", "4242".to_owned()),
        (
            "X-Hub-Signature-256",
            format!("sha256={}", sign(secret, &[body])),
        ),
        ("User-Agent", "GitHub-Hookshot/abc".to_owned()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_delivery_is_stored_and_lands_once_on_its_subject() -> Result<()> {
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Github, None).await?;
    let ep = h
        .endpoint(&conn, Registration::Operator, Some("4242"), None, SECRET)
        .await?;
    let body = serde_json::to_vec(&pull_request())?;
    let (s, text) = h
        .post(
            "/webhooks/github",
            &headers("pull_request", "d-1", &body, SECRET),
            body.clone(),
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");

    let got = h.settled(Stream::WebhooksGithub, 1).await?;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].subject, "github.acme.socket%2Eio.pull_request");
    assert_eq!(
        got[0].msg_id.as_deref(),
        Some(format!("{}:event:d-1", ep.id).as_str())
    );
    assert_eq!(got[0].payload, body);

    // Raw body and selected headers are kept; the signature is not.
    let stored: Vec<u8> = h
        .db()
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT body FROM inbound_message_body",
        ))
        .await?
        .unwrap()
        .try_get_by_index(0)?;
    assert_eq!(stored, body);
    assert_eq!(count(h.db(), "SELECT count(*) FROM inbound_message WHERE headers ? 'x-github-delivery' AND NOT headers ? 'x-hub-signature-256'").await?, 1);
    // The dispatch record is marked once the stream holds the message.
    assert_eq!(
        count(
            h.db(),
            "SELECT count(*) FROM inbound_message_state WHERE processing_state = 'dispatched'"
        )
        .await?,
        1
    );

    // Repository lifecycle rides the owner level.
    let body = serde_json::to_vec(&repository_renamed())?;
    let (s, _) = h
        .post(
            "/webhooks/github",
            &headers("repository", "d-2", &body, SECRET),
            body.clone(),
        )
        .await?;
    assert_eq!(s, StatusCode::OK);
    let got = h
        .stream(Stream::WebhooksGithub, "github.acme.?.repository", 1)
        .await?;
    assert_eq!(got.len(), 1);
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rejection_answers_its_status_and_stores_nothing() -> Result<()> {
    let h = Harness::start_with(|c| c.github_max_body_bytes = 64 * 1024).await?;
    let conn = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&conn, Registration::Operator, Some("4242"), None, SECRET)
        .await?;
    let body = serde_json::to_vec(&pull_request())?;

    let mut missing = headers("pull_request", "d-1", &body, SECRET);
    missing.retain(|(k, _)| *k != "X-Hub-Signature-256");
    assert_refused(
        &h,
        h.post("/webhooks/github", &missing, body.clone()).await?,
        StatusCode::UNAUTHORIZED,
        "missing_signature",
    )
    .await?;

    let forged = headers("pull_request", "d-1", &body, "not-the-secret");
    assert_refused(
        &h,
        h.post("/webhooks/github", &forged, body.clone()).await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;

    // A body changed after signing does not verify.
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    assert_refused(
        &h,
        h.post(
            "/webhooks/github",
            &headers("pull_request", "d-1", &body, SECRET),
            tampered,
        )
        .await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;

    // An unknown hook id is answered exactly like a bad signature (hook ids cannot be
    // enumerated), and counted as what it is.
    let mut unknown = headers("pull_request", "d-1", &body, SECRET);
    unknown[2].1 = "999".into();
    assert_refused(
        &h,
        h.post("/webhooks/github", &unknown, body.clone()).await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;

    let garbage = b"{not json".to_vec();
    assert_refused(
        &h,
        h.post(
            "/webhooks/github",
            &headers("push", "d-3", &garbage, SECRET),
            garbage.clone(),
        )
        .await?,
        StatusCode::BAD_REQUEST,
        "malformed",
    )
    .await?;

    let big = vec![b' '; 65 * 1024];
    assert_refused(
        &h,
        h.post_oversize(
            "/webhooks/github",
            &headers("push", "d-4", &big, SECRET),
            big.len(),
        )
        .await?,
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
    )
    .await?;

    // Disconnecting disables the endpoint: 410, nothing stored.
    store::inbound::disable_endpoints(h.db(), conn.id).await?;
    assert_refused(
        &h,
        h.post(
            "/webhooks/github",
            &headers("pull_request", "d-5", &body, SECRET),
            body.clone(),
        )
        .await?,
        StatusCode::GONE,
        "disabled",
    )
    .await?;

    assert!(
        h.stream(bus::Stream::WebhooksGithub, ">", 0)
            .await?
            .is_empty()
    );
    let metrics = h.metrics().await?;
    for reason in [
        "missing_signature",
        "bad_signature",
        "unknown_endpoint",
        "malformed",
        "too_large",
        "disabled",
    ] {
        assert!(
            metrics.contains(&format!(
                "ingress_rejections_total{{vendor=\"github\",reason=\"{reason}\"}}"
            )),
            "{reason} not counted:\n{metrics}"
        );
    }
    h.ingress.stop().await
}
