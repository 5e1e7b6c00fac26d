//! The front door under attack: workspace B holds its own endpoint secrets and sends what a NATS
//! client cannot carry, what the server cannot take, bodies past the vendor's limit, unsigned
//! garbage and slow bodies. Each is refused before anything is stored or published, and A's
//! next delivery still flows.

use std::time::Duration;

use anyhow::Result;
use bus::Stream;
use reqwest::StatusCode;
use serde_json::json;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::{Harness, assert_refused, github_push, now, sign};

const A_SECRET: &str = "a-webhook-secret";
const B_SECRET: &str = "b-webhook-secret";

fn github_headers(
    hook: &str,
    event: &str,
    delivery: &str,
    body: &[u8],
    secret: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("X-GitHub-Event", event.to_owned()),
        ("X-GitHub-Delivery", delivery.to_owned()),
        ("X-GitHub-Hook-ID", hook.to_owned()),
        (
            "X-Hub-Signature-256",
            format!("sha256={}", sign(secret, &[body])),
        ),
    ]
}

fn slack_headers(body: &[u8], secret: &str) -> Vec<(&'static str, String)> {
    let ts = now().to_string();
    vec![
        ("X-Slack-Request-Timestamp", ts.clone()),
        (
            "X-Slack-Signature",
            format!("v0={}", sign(secret, &[b"v0:", ts.as_bytes(), b":", body])),
        ),
    ]
}

fn outline_headers(body: &[u8], secret: &str) -> Vec<(&'static str, String)> {
    let t = (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).to_string();
    vec![(
        "Outline-Signature",
        format!("t={t},s={}", sign(secret, &[t.as_bytes(), b".", body])),
    )]
}

fn slack_message(team: &str, event_type: &str, event_id: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "team_id": team, "api_app_id": "A1", "type": "event_callback", "event_id": event_id,
        "event": {"type": event_type, "channel": "C0GENERAL", "user": "U1", "text": "hi",
            "ts": "1700000000.000100"}
    }))
    .unwrap()
}

fn outline_update(subscription: &str, event: &str, id: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": id, "actorId": "u-1", "webhookSubscriptionId": subscription,
        "createdAt": "2026-01-02T03:04:05.000Z", "event": event,
        "payload": {"id": "doc-1", "model": {"id": "doc-1", "title": "Runbook"}}
    }))
    .unwrap()
}

fn gitlab_push(object_kind: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "object_kind": object_kind, "ref": "refs/heads/main",
        "project": {"id": 15, "name": "api", "path_with_namespace": "bcorp/api"}
    }))
    .unwrap()
}

/// Sends `head` then `body` over a raw connection (what reqwest refuses to build) and returns
/// the status line the server answered, or "closed".
async fn raw_request(h: &Harness, head: &str, body: &[u8]) -> Result<String> {
    let addr = h.ingress.url().trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    Ok(status_line(&mut stream).await)
}

async fn status_line(stream: &mut tokio::net::TcpStream) -> String {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => String::from_utf8_lossy(&buf[..n])
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned(),
        _ => "closed".to_owned(),
    }
}

/// Every message in the webhook streams.
async fn published(h: &Harness) -> Result<usize> {
    let mut n = 0;
    for stream in [
        Stream::WebhooksGithub,
        Stream::WebhooksGitlab,
        Stream::WebhooksSlack,
        Stream::WebhooksOutline,
    ] {
        n += h.settled(stream, 0).await?.len();
    }
    Ok(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_event_names_and_delivery_ids_are_refused_on_every_route()
-> Result<()> {
    let h = Harness::start().await?;
    // A: the victim, whose deliveries must keep flowing.
    let a = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&a, Registration::Operator, Some("1111"), None, A_SECRET)
        .await?;
    // B: the attacker, with a verified endpoint of every kind.
    let b_gh = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(
        &b_gh,
        Registration::Operator,
        Some("2222"),
        Some("tok-b-github"),
        B_SECRET,
    )
    .await?;
    let b_gl = h.connection(ConnectionKind::Gitlab, None).await?;
    h.endpoint(&b_gl, Registration::Operator, None, None, B_SECRET)
        .await?;
    let b_sl = h.connection(ConnectionKind::Slack, None).await?;
    h.endpoint(&b_sl, Registration::App, Some("T0BCORP"), None, B_SECRET)
        .await?;
    let b_ol = h.connection(ConnectionKind::Outline, None).await?;
    h.endpoint(
        &b_ol,
        Registration::Registered,
        Some("sub-b"),
        Some("tok-b-outline"),
        B_SECRET,
    )
    .await?;
    let refused = StatusCode::BAD_REQUEST;

    // GitHub: a tab (which HTTP lets through) in the event name and in the delivery id, on the
    // vendor route and on the token route.
    let body = github_push(1);
    for (path, event, delivery) in [
        ("/webhooks/github", "push\tx", "d-1"),
        ("/webhooks/github", "push", "d\t1"),
        ("/hooks/tok-b-github", "pu\tsh", "d-1"),
    ] {
        let headers = github_headers("2222", event, delivery, &body, B_SECRET);
        let got = h.post(path, &headers, body.clone()).await?;
        assert_refused(&h, got, refused, "bad_header_value").await?;
    }
    // CR/LF in the event header itself never reaches a handler: the HTTP parser refuses it.
    let sig = format!("sha256={}", sign(B_SECRET, &[&body]));
    let head = format!(
        "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         X-GitHub-Hook-ID: 2222\r\nX-GitHub-Delivery: d-2\r\nX-Hub-Signature-256: {sig}\r\n\
         X-GitHub-Event: push\rX-Evil: 1\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let status = raw_request(&h, &head, &body).await?;
    assert!(status.contains(" 400 ") || status == "closed", "{status}");
    assert_eq!(h.footprint().await?, [0, 0, 0, 0]);

    // GitLab: CR/LF in the payload's object_kind, a tab in Idempotency-Key.
    let gl_headers = |idem: &str| {
        vec![
            ("X-Gitlab-Event", "Push Hook".to_owned()),
            ("X-Gitlab-Token", B_SECRET.to_owned()),
            ("Idempotency-Key", idem.to_owned()),
        ]
    };
    for (body, idem) in [
        (gitlab_push("push\r\nNats-Msg-Id: forged"), "i-1"),
        (gitlab_push("push"), "i\t1"),
    ] {
        let got = h.post("/webhooks/gitlab", &gl_headers(idem), body).await?;
        assert_refused(&h, got, refused, "bad_header_value").await?;
    }

    // Slack: CR/LF in the event type and in the event id.
    for body in [
        slack_message("T0BCORP", "message\r\nX-Evil: 1", "Ev1"),
        slack_message("T0BCORP", "message", "Ev\r\n1"),
        slack_message("T0BCORP", "message", &"E".repeat(257)),
    ] {
        let got = h
            .post("/webhooks/slack", &slack_headers(&body, B_SECRET), body)
            .await?;
        assert_refused(&h, got, refused, "bad_header_value").await?;
    }

    // Outline: CR/LF in the event and in the delivery id, on its route and the token route.
    for (path, body) in [
        (
            "/webhooks/outline/tok-b-outline",
            outline_update("sub-b", "documents.update\r\n", "d-1"),
        ),
        (
            "/hooks/tok-b-outline",
            outline_update("sub-b", "documents.update", "d\n1"),
        ),
    ] {
        let got = h
            .post(path, &outline_headers(&body, B_SECRET), body)
            .await?;
        assert_refused(&h, got, refused, "bad_header_value").await?;
    }
    assert_eq!(published(&h).await?, 0, "a refused delivery was published");

    // The next valid deliveries, A's and B's, still flow to the stream.
    let body = github_push(2);
    let (s, text) = h
        .post(
            "/webhooks/github",
            &github_headers("1111", "push", "d-a", &body, A_SECRET),
            body,
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    let body = slack_message("T0BCORP", "message", "Ev-ok");
    let (s, text) = h
        .post("/webhooks/slack", &slack_headers(&body, B_SECRET), body)
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert_eq!(
        h.stream(Stream::WebhooksGithub, "github.acme.api.push", 1)
            .await?
            .len(),
        1
    );
    assert_eq!(
        h.stream(Stream::WebhooksSlack, "slack.t0bcorp.>", 1)
            .await?
            .len(),
        1
    );
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_too_long_for_a_subject_is_refused_at_ingress() -> Result<()> {
    let h = Harness::start().await?;
    let b = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&b, Registration::Operator, Some("2222"), None, B_SECRET)
        .await?;
    // Names longer than a token, plainly or once their dots are escaped.
    for (owner, repo) in [
        ("acme".to_owned(), "r".repeat(300)),
        ("o".repeat(5000), "api".to_owned()),
        ("acme".to_owned(), ".".repeat(90)),
    ] {
        let body = serde_json::to_vec(&json!({
            "ref": "refs/heads/main",
            "repository": {"name": repo, "owner": {"login": owner}}
        }))?;
        let got = h
            .post(
                "/webhooks/github",
                &github_headers("2222", "push", "d-long", &body, B_SECRET),
                body,
            )
            .await?;
        assert_refused(&h, got, StatusCode::BAD_REQUEST, "subject_too_long").await?;
    }
    assert_eq!(published(&h).await?, 0);
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_the_vendor_limit_answer_413_and_store_nothing() -> Result<()> {
    let h = Harness::start().await?;
    let sl = h.connection(ConnectionKind::Slack, None).await?;
    h.endpoint(
        &sl,
        Registration::App,
        Some("T0BCORP"),
        Some("tok-b-slack"),
        B_SECRET,
    )
    .await?;
    let ol = h.connection(ConnectionKind::Outline, None).await?;
    h.endpoint(
        &ol,
        Registration::Registered,
        Some("sub-b"),
        Some("tok-b-outline"),
        B_SECRET,
    )
    .await?;
    // 1 MiB + 1, signed: Slack and Outline send nothing near it.
    let mut body = slack_message("T0BCORP", "message", "Ev-big");
    body.truncate(body.len() - 1);
    let pad = 1024 * 1024 + 1 - body.len() - br#","pad":"""#.len() - 1;
    body.extend_from_slice(br#","pad":""#);
    body.extend(std::iter::repeat_n(b'x', pad));
    body.extend_from_slice(br#""}"#);
    assert_eq!(body.len(), 1024 * 1024 + 1);
    for path in [
        "/webhooks/slack",
        "/hooks/tok-b-slack",
        "/webhooks/outline/tok-b-outline",
        "/hooks/tok-b-outline",
    ] {
        let got = h
            .post_oversize(path, &slack_headers(&body, B_SECRET), body.len())
            .await?;
        assert_refused(&h, got, StatusCode::PAYLOAD_TOO_LARGE, "too_large").await?;
    }
    // Exactly the limit is read (and then verified).
    body.truncate(1024 * 1024);
    let got = h
        .post("/webhooks/slack", &slack_headers(&body, "wrong"), body)
        .await?;
    assert_refused(&h, got, StatusCode::UNAUTHORIZED, "bad_signature").await?;
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_malformed_json_is_refused_by_the_signature_check_first() -> Result<()> {
    let h = Harness::start().await?;
    let gh = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&gh, Registration::Operator, Some("2222"), None, B_SECRET)
        .await?;
    let gl = h.connection(ConnectionKind::Gitlab, None).await?;
    h.endpoint(&gl, Registration::Operator, None, None, B_SECRET)
        .await?;
    let sl = h.connection(ConnectionKind::Slack, None).await?;
    h.endpoint(
        &sl,
        Registration::App,
        Some("T0BCORP"),
        Some("tok-b-slack"),
        B_SECRET,
    )
    .await?;
    let ol = h.connection(ConnectionKind::Outline, None).await?;
    h.endpoint(
        &ol,
        Registration::Registered,
        Some("sub-b"),
        Some("tok-b-outline"),
        B_SECRET,
    )
    .await?;
    let garbage = b"{\"team_id\": \"T0BCORP\", not json".to_vec();
    for (path, headers) in [
        (
            "/webhooks/github",
            github_headers("2222", "push", "d-1", &garbage, "wrong"),
        ),
        (
            "/webhooks/gitlab",
            vec![("X-Gitlab-Token", "wrong".to_owned())],
        ),
        ("/webhooks/slack", slack_headers(&garbage, "wrong")),
        ("/webhooks/slack", vec![]),
        ("/hooks/tok-b-slack", slack_headers(&garbage, "wrong")),
        ("/hooks/tok-b-slack", vec![]),
        (
            "/webhooks/outline/tok-b-outline",
            outline_headers(&garbage, "wrong"),
        ),
        ("/hooks/tok-b-outline", vec![]),
    ] {
        let (status, text) = h.post(path, &headers, garbage.clone()).await?;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {text}");
    }
    assert_eq!(h.footprint().await?, [0, 0, 0, 0]);
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_without_a_team_is_only_a_url_verification() -> Result<()> {
    let h = Harness::start().await?;
    let a = h.connection(ConnectionKind::Slack, None).await?;
    h.endpoint(&a, Registration::App, Some("T0ACME"), None, A_SECRET)
        .await?;
    let b = h.connection(ConnectionKind::Slack, None).await?;
    h.endpoint(
        &b,
        Registration::App,
        Some("T0BCORP"),
        Some("tok-b-slack"),
        B_SECRET,
    )
    .await?;
    // B signs an event that names no team: it may not be stored under any team's subject.
    let mut event: serde_json::Value =
        serde_json::from_slice(&slack_message("x", "message", "E1"))?;
    event.as_object_mut().expect("an object").remove("team_id");
    let body = serde_json::to_vec(&event)?;
    for path in ["/webhooks/slack", "/hooks/tok-b-slack"] {
        let got = h
            .post(path, &slack_headers(&body, B_SECRET), body.clone())
            .await?;
        assert_refused(&h, got, StatusCode::BAD_REQUEST, "malformed").await?;
    }
    // B's token endpoint cannot carry an event it signed as A's team.
    let as_a = slack_message("T0ACME", "message", "E2");
    let got = h
        .post("/hooks/tok-b-slack", &slack_headers(&as_a, B_SECRET), as_a)
        .await?;
    assert_refused(&h, got, StatusCode::BAD_REQUEST, "malformed").await?;
    // The one request without a team that is accepted: the challenge, answered, nothing stored.
    let challenge = serde_json::to_vec(&json!({"type": "url_verification", "challenge": "c-1"}))?;
    let (s, text) = h
        .post(
            "/webhooks/slack",
            &slack_headers(&challenge, B_SECRET),
            challenge,
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert!(text.contains("c-1"), "{text}");
    assert_eq!(h.footprint().await?, [0, 0, 0, 0]);
    assert_eq!(published(&h).await?, 0);
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_times_out_and_frees_its_slot() -> Result<()> {
    let h = Harness::start_with(|c| {
        c.body_timeout_secs = 1;
        c.concurrency = 1;
    })
    .await?;
    let b = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&b, Registration::Operator, Some("2222"), None, B_SECRET)
        .await?;
    // A slow-loris: announces 1000 bytes, sends a few, then one byte every 300 ms.
    let addr = h.ingress.url().trim_start_matches("http://").to_owned();
    let (mut rd, mut wr) = tokio::net::TcpStream::connect(&addr).await?.into_split();
    wr.write_all(
        b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Hook-ID: 2222\r\n\
          Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"ref\": \"",
    )
    .await?;
    let started = std::time::Instant::now();
    let trickle = async move {
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if wr.write_all(b"x").await.is_err() {
                // The server closed the connection.
                std::future::pending::<()>().await;
            }
        }
    };
    let read = async {
        let mut buf = vec![0u8; 4096];
        match rd.read(&mut buf).await {
            Ok(n) if n > 0 => String::from_utf8_lossy(&buf[..n])
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
            _ => "closed".to_owned(),
        }
    };
    let status = tokio::select! {
        status = read => status,
        _ = trickle => unreachable!("the trickle never ends by itself"),
        () = tokio::time::sleep(Duration::from_secs(20)) => "still open".to_owned(),
    };
    assert!(
        status.contains(" 408 ") || status == "closed",
        "the slow body was not cut off: {status}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(h.footprint().await?, [0, 0, 0, 0]);

    // The one slot is free again: the next delivery is taken.
    let body = github_push(3);
    let (s, text) = h
        .post(
            "/webhooks/github",
            &github_headers("2222", "push", "d-after", &body, B_SECRET),
            body,
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    h.ingress.stop().await
}

/// A nats-server of the test's own taking messages of 64 KiB at most: 56 KiB of body after the
/// header room.
fn small_payload_server() -> Result<testkit::OwnNats> {
    testkit::OwnNats::start(&testkit::NatsSetup {
        config: "max_payload: 65536".into(),
        ..testkit::NatsSetup::jetstream()?
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_servers_max_payload_travels_by_reference() -> Result<()> {
    // The inline limit is left at its default (1 MiB), more than this server takes.
    let nats = small_payload_server()?;
    let h = Harness::start_with(|c| c.common.nats_url = nats.url()).await?;
    let bus = bus::Bus::connect(
        &nats.url(),
        None,
        h.env.bus.namespace().clone(),
        bus::StreamSettings::default(),
    )
    .await?;
    bus.declare_streams().await?;
    let a = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&a, Registration::Operator, Some("1111"), None, A_SECRET)
        .await?;
    let mut push: serde_json::Value = serde_json::from_slice(&github_push(9))?;
    push["pad"] = json!("x".repeat(100 * 1024));
    let body = serde_json::to_vec(&push)?;
    let (s, text) = h
        .post(
            "/webhooks/github",
            &github_headers("1111", "push", "d-big", &body, A_SECRET),
            body,
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    let read = |min| {
        testkit::read_stream(
            &bus,
            Stream::WebhooksGithub,
            "github.acme.api.push",
            min,
            Duration::from_secs(10),
        )
    };
    let got = read(1).await?;
    assert_eq!(got.len(), 1, "the large delivery never reached the stream");
    assert!(
        got[0].payload.is_empty(),
        "published inline past max_payload"
    );
    // A small one still travels inline.
    let small = github_push(10);
    let (s, text) = h
        .post(
            "/webhooks/github",
            &github_headers("1111", "push", "d-small", &small, A_SECRET),
            small.clone(),
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    let got = read(2).await?;
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].payload, small);
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_limit_past_the_servers_max_payload_stops_ingress_naming_both() -> Result<()> {
    let nats = small_payload_server()?;
    let h = Harness::start_with(|c| {
        c.common.nats_url = nats.url();
        c.inline_body_bytes = Some(1024 * 1024);
    })
    .await?;
    let ended = tokio::time::timeout(Duration::from_secs(30), h.ingress.ended())
        .await
        .map_err(|_| anyhow::anyhow!("ingress kept running with an inline limit it cannot keep"))?;
    let err = ended.expect_err("ingress ended cleanly");
    let text = format!("{err:#}");
    assert!(
        text.contains("FORGESYNC_INGRESS_INLINE_BODY_BYTES is 1048576")
            && text.contains("max_payload"),
        "{text}"
    );
    Ok(())
}

/// Opens a connection, sends a request head announcing `declared` bytes of body and the first
/// `sent` of them, and leaves the rest unsent: the writer half is returned to keep it open.
async fn partial_post(
    h: &Harness,
    path: &str,
    headers: &[(&str, String)],
    declared: usize,
    sent: usize,
) -> Result<(
    tokio::net::tcp::OwnedReadHalf,
    tokio::net::tcp::OwnedWriteHalf,
)> {
    let mut all = vec![("Content-Type", "application/json".to_owned())];
    all.extend(headers.iter().cloned());
    let url = format!("{}{path}", h.ingress.url());
    let stream = testkit::http::open_post(&url, &all, declared, &vec![b' '; sent]).await?;
    Ok(stream.into_split())
}

/// The status line of the answer on `rd` (within 20 s), or "closed"/"silent".
async fn answer(rd: &mut tokio::net::tcp::OwnedReadHalf) -> String {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(Duration::from_secs(20), rd.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => String::from_utf8_lossy(&buf[..n]).into_owned(),
        Ok(_) => "closed".to_owned(),
        Err(_) => "silent".to_owned(),
    }
}

/// The value of `ingress_buffered_bytes` on `/metrics` (0 before any body was read).
async fn buffered(h: &Harness) -> Result<f64> {
    let text = h.metrics().await?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("ingress_buffered_bytes "))
        .map(|v| v.trim().parse())
        .transpose()?
        .unwrap_or(0.0))
}

const MIB: usize = 1024 * 1024;

/// A route, the headers a request to it carries, and the status it must answer.
type Probe = (String, Vec<(&'static str, String)>, &'static str);

/// 40 posts announcing 25 MiB each, to every route with hook ids, tokens and paths no endpoint
/// has, are each answered while their bodies are still unsent: the refusal comes from the head
/// alone, the shared routes answer it exactly like a bad signature, and nothing is buffered. A's
/// valid delivery flows meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_hooks_are_refused_before_their_bodies_are_read() -> Result<()> {
    let h = Harness::start_with(|c| c.buffer_budget_bytes = 8 * MIB).await?;
    let a = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&a, Registration::Operator, Some("1111"), None, A_SECRET)
        .await?;
    let slack = h.connection(ConnectionKind::Slack, None).await?;
    h.endpoint(&slack, Registration::App, Some("T0ACME"), None, A_SECRET)
        .await?;
    let sig = |name: &'static str| (name, "sha256=00".to_owned());
    let routes: Vec<Probe> = vec![
        (
            "/webhooks/github".into(),
            vec![
                ("X-GitHub-Hook-ID", "9999".into()),
                ("X-GitHub-Event", "push".into()),
                sig("X-Hub-Signature-256"),
            ],
            " 401 ",
        ),
        (
            "/webhooks/gitlab".into(),
            vec![("X-Gitlab-Token", "no-such-token".into())],
            " 401 ",
        ),
        (
            format!(
                "/webhooks/gitlab/connections/{}/k1/{}",
                uuid::Uuid::new_v4(),
                uuid::Uuid::new_v4()
            ),
            vec![("X-Gitlab-Token", "forged".into())],
            " 404 ",
        ),
        (
            "/webhooks/outline/no-such-token".into(),
            vec![("Outline-Signature", "t=1,s=00".into())],
            " 404 ",
        ),
        ("/hooks/no-such-token".into(), vec![], " 404 "),
        // Slack: a signature that no app secret verifies is refused once read (the body is what
        // is signed), but a stale timestamp is refused from the head.
        (
            "/webhooks/slack".into(),
            vec![
                ("X-Slack-Request-Timestamp", "1".into()),
                ("X-Slack-Signature", "v0=00".into()),
            ],
            " 401 ",
        ),
    ];
    let mut open = Vec::new();
    for i in 0..40 {
        let (path, headers, want) = &routes[i % routes.len()];
        let (mut rd, wr) = partial_post(&h, path, headers, 25 * MIB, 64 * 1024).await?;
        let got = answer(&mut rd).await;
        assert!(
            got.starts_with("HTTP/1.1") && got.contains(want),
            "{path}: answered {got:?} while its body was still unsent, wanted{want}"
        );
        open.push((rd, wr));
    }
    // The shared routes answer an unknown hook exactly as a wrong signature.
    let (_, github_unknown) = h
        .post(
            "/webhooks/github",
            &github_headers("9999", "push", "d-x", &github_push(1), A_SECRET),
            github_push(1),
        )
        .await?;
    let (_, github_forged) = h
        .post(
            "/webhooks/github",
            &github_headers("1111", "push", "d-x", &github_push(1), B_SECRET),
            github_push(1),
        )
        .await?;
    assert_eq!(github_unknown, github_forged);
    assert_eq!(
        buffered(&h).await?,
        0.0,
        "an unknown hook's body was buffered"
    );

    // With all 40 still open, A's delivery is read, stored and published.
    let body = github_push(2);
    let (s, text) = h
        .post(
            "/webhooks/github",
            &github_headers("1111", "push", "d-a", &body, A_SECRET),
            body,
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert_eq!(
        h.stream(Stream::WebhooksGithub, "github.acme.api.push", 1)
            .await?
            .len(),
        1
    );
    assert_eq!(buffered(&h).await?, 0.0, "A's body was not given back");
    let metrics = h.metrics().await?;
    assert!(
        metrics.contains(r#"ingress_rejections_total{vendor="github",reason="unknown_endpoint"}"#),
        "unknown hooks are counted as such:\n{metrics}"
    );
    drop(open);
    h.ingress.stop().await
}

/// B, with its own valid endpoint, holds bodies open to take ingress's memory: what all bodies
/// hold together stays within the budget, a body that finds no room is answered 503 with
/// Retry-After, A's small delivery still flows, and the budget comes back when B's bodies are
/// cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_share_one_buffer_budget() -> Result<()> {
    let h = Harness::start_with(|c| {
        c.buffer_budget_bytes = MIB;
        c.body_timeout_secs = 3;
    })
    .await?;
    let a = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&a, Registration::Operator, Some("1111"), None, A_SECRET)
        .await?;
    let b = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&b, Registration::Operator, Some("2222"), None, B_SECRET)
        .await?;
    let b_headers = vec![
        ("X-GitHub-Hook-ID", "2222".to_owned()),
        ("X-GitHub-Event", "push".to_owned()),
        ("X-Hub-Signature-256", "sha256=00".to_owned()),
    ];
    // Two slow bodies of 400 KiB each, announced as 20 MiB.
    let mut slow = Vec::new();
    for _ in 0..2 {
        slow.push(partial_post(&h, "/webhooks/github", &b_headers, 20 * MIB, 400 * 1024).await?);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while buffered(&h).await? < (800 * 1024) as f64 {
        assert!(
            std::time::Instant::now() < deadline,
            "the slow bodies were not read"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A third has no room for its 400 KiB: 503 at once, with Retry-After.
    let (mut rd, _wr) =
        partial_post(&h, "/webhooks/github", &b_headers, 20 * MIB, 400 * 1024).await?;
    let got = answer(&mut rd).await;
    assert!(
        got.contains(" 503 ") && got.to_ascii_lowercase().contains("retry-after: 1"),
        "{got}"
    );
    assert!(buffered(&h).await? <= MIB as f64);

    // A's delivery fits in what is left, and is taken.
    let body = github_push(4);
    let (s, text) = h
        .post(
            "/webhooks/github",
            &github_headers("1111", "push", "d-a", &body, A_SECRET),
            body,
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");

    // B's bodies are cut at the body deadline, and the budget is whole again.
    for (rd, _wr) in &mut slow {
        let got = answer(rd).await;
        assert!(got.contains(" 408 ") || got == "closed", "{got}");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while buffered(&h).await? > 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the budget was not given back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = h.metrics().await?;
    assert!(
        metrics.contains(r#"ingress_rejections_total{vendor="github",reason="busy"}"#),
        "{metrics}"
    );
    h.ingress.stop().await
}
