//! One delivery is one trace: the services export to an in-process OTLP receiver, and a signed
//! webhook's trace holds ingress's request, its durable insert and publish, and github-sync's
//! handling and mirror write; a replayed dead message is linked to the trace it first travelled
//! in. Log lines name the trace they were written in.

use std::time::Duration;

use anyhow::{Context as _, Result};
use serde_json::json;
use testkit::otlp::{OtlpReceiver, ReceivedSpan, render_all};
use vendor_sim::github::{NewIssue, Scenario, webhook};

use crate::support::LiveStack;

const WAIT: Duration = Duration::from_secs(60);

fn in_trace<'a>(spans: &'a [ReceivedSpan], trace_id: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.trace_id == trace_id).collect()
}

/// The webhook's server span in ingress, once it arrived.
fn webhook_request(spans: &[ReceivedSpan], nth: usize) -> Option<&ReceivedSpan> {
    let mut requests: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.kind == "server" && s.attr("http.route") == Some("/webhooks/github"))
        .collect();
    requests.sort_by_key(|s| s.start_unix_nano);
    requests.get(nth).copied()
}

fn consumer_of<'a>(spans: &[&'a ReceivedSpan]) -> Option<&'a ReceivedSpan> {
    spans.iter().copied().find(|s| {
        s.kind == "consumer"
            && s.attr("consumer")
                .is_some_and(|c| c.contains("github-sync-repository-events"))
    })
}

/// Whether `span` descends from `ancestor` through parents received in the same trace.
fn descends(spans: &[&ReceivedSpan], span: &ReceivedSpan, ancestor: &ReceivedSpan) -> bool {
    let mut at = span;
    for _ in 0..64 {
        if at.span_id == ancestor.span_id {
            return true;
        }
        match spans.iter().find(|s| s.span_id == at.parent_span_id) {
            Some(parent) => at = parent,
            None => return false,
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_signed_webhook_is_one_trace_across_ingress_and_github_sync() -> Result<()> {
    let receiver = OtlpReceiver::start("127.0.0.1:0".parse()?, None).await?;
    let logs = testkit::LogCapture::default();
    let lines = logs.clone();
    let _telemetry = runtime::telemetry::init_with_writer(
        "forgesync-e2e",
        runtime::LogFormat::Json,
        Some(&receiver.endpoint()),
        move || lines.clone(),
    )?;
    let s = LiveStack::start(Scenario {
        repositories: 1,
        items: 0,
        ..Scenario::default()
    })
    .await?;
    let payload = s.sim.model(|m| {
        let issue = m
            .add_issue(
                s.repositories[0],
                NewIssue {
                    title: "traced".into(),
                    author: Some("dev".into()),
                    ..Default::default()
                },
            )
            .unwrap();
        let repo = m.repository(s.repositories[0]).unwrap().clone();
        webhook::issues_payload(m, "opened", &repo, &issue)
    });
    s.deliver("issues", &payload).await?;
    s.settle().await?;
    assert_eq!(
        s.count("SELECT count(*) FROM issue WHERE title = 'traced'")
            .await?,
        1
    );

    // The request, the durable insert, the publish, the consumer and the mirror write: one trace.
    let spans = receiver
        .wait_for(WAIT, |spans| {
            webhook_request(spans, 0).is_some_and(|root| {
                let trace = in_trace(spans, &root.trace_id);
                ["durable insert", "mirror write"]
                    .iter()
                    .all(|n| trace.iter().any(|s| s.name == *n))
                    && trace.iter().any(|s| s.kind == "producer")
                    && consumer_of(&trace).is_some()
            })
        })
        .await?;
    let root = webhook_request(&spans, 0).context("the webhook's request span")?;
    let trace = in_trace(&spans, &root.trace_id);
    let dump = render_all(&trace.iter().map(|s| (*s).clone()).collect::<Vec<_>>());
    assert_eq!(root.parent_span_id, "", "ingress starts the trace\n{dump}");
    assert_eq!(root.attr("forgesync.service"), Some("ingress"), "{dump}");
    let insert = trace
        .iter()
        .find(|s| s.name == "durable insert")
        .context("durable insert")?;
    let publish = trace
        .iter()
        .find(|s| s.kind == "producer" && s.attr("subject").is_some_and(|x| x.ends_with(".issues")))
        .with_context(|| format!("no publish of the delivery\n{dump}"))?;
    let consumer = consumer_of(&trace).context("consumer span")?;
    let write = trace
        .iter()
        .find(|s| s.name == "mirror write")
        .context("mirror write")?;
    for (what, span) in [
        ("the durable insert", *insert),
        ("the publish", *publish),
        ("github-sync's handling", consumer),
        ("the mirror write", *write),
    ] {
        assert!(
            descends(&trace, span, root),
            "{what} does not descend from ingress's request\n{dump}"
        );
    }
    assert!(descends(&trace, consumer, insert), "{dump}");
    assert!(descends(&trace, write, consumer), "{dump}");
    assert_eq!(consumer.attr("attempt"), Some("1"), "{dump}");
    assert!(
        consumer
            .attr("stream_sequence")
            .is_some_and(|n| n.parse::<u64>().is_ok_and(|n| n > 0)),
        "{dump}"
    );
    assert_eq!(
        consumer.attr("connection_id"),
        Some(s.conn.as_str()),
        "{dump}"
    );
    assert_eq!(write.attr("outcome"), Some("applied"), "{dump}");
    // Nothing else of the delivery went to another trace.
    let mirrored_elsewhere = spans
        .iter()
        .filter(|s| s.name == "mirror write" && s.trace_id != root.trace_id)
        .count();
    assert_eq!(mirrored_elsewhere, 0, "{}", render_all(&spans));

    // Logs and traces join: ingress's line about the delivery names the trace.
    let text = logs.text();
    // (Its `message` field, the inbound message id, follows the text in the flattened line.)
    let stored: serde_json::Value = text
        .lines()
        .find(|l| l.contains(r#""message":"delivery stored""#))
        .map(serde_json::from_str)
        .transpose()?
        .with_context(|| format!("no `delivery stored` line in\n{text}"))?;
    assert_eq!(stored["trace_id"], root.trace_id.as_str(), "{stored}");
    assert!(
        stored["span_id"].as_str().is_some_and(|s| s.len() == 16),
        "{stored}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replayed_dead_message_links_to_its_original_trace() -> Result<()> {
    let receiver = OtlpReceiver::start("127.0.0.1:0".parse()?, None).await?;
    let _telemetry = runtime::telemetry::init(
        "forgesync-e2e",
        runtime::LogFormat::Json,
        Some(&receiver.endpoint()),
    )?;
    let s = LiveStack::start(Scenario {
        repositories: 1,
        items: 0,
        ..Scenario::default()
    })
    .await?;
    // A delivery github-sync can never apply: recorded dead at once.
    let mut payload = s.sim.model(|m| {
        let issue = m.add_issue(s.repositories[0], NewIssue::default()).unwrap();
        let repo = m.repository(s.repositories[0]).unwrap().clone();
        webhook::issues_payload(m, "opened", &repo, &issue)
    });
    payload["issue"] = json!("not an issue");
    s.deliver("issues", &payload).await?;
    s.settle().await?;
    let (dead,): (uuid::Uuid,) = sqlx::query_as(
        "SELECT id FROM dead_message WHERE subject LIKE 'github.%.issues' ORDER BY created_at LIMIT 1",
    )
    .fetch_one(&s.pool)
    .await
    .context("the malformed delivery was not recorded dead")?;
    let spans = receiver
        .wait_for(WAIT, |spans| {
            webhook_request(spans, 0)
                .is_some_and(|root| consumer_of(&in_trace(spans, &root.trace_id)).is_some())
        })
        .await?;
    let original = webhook_request(&spans, 0)
        .context("the webhook's request")?
        .clone();
    let failed = consumer_of(&in_trace(&spans, &original.trace_id))
        .context("the first handling")?
        .clone();
    assert!(failed.error, "a dead message's handling is an error span");

    let (status, body) = s
        .post(&format!("/dead-messages/{dead}/replay"), json!({}))
        .await?;
    assert_eq!(status, 202, "{body}");
    let spans = receiver
        .wait_for(WAIT, |spans| {
            spans.iter().any(|s| {
                s.kind == "consumer" && s.links.iter().any(|(t, _)| *t == original.trace_id)
            })
        })
        .await?;
    let replayed = spans
        .iter()
        .find(|s| s.kind == "consumer" && s.links.iter().any(|(t, _)| *t == original.trace_id))
        .context("the replay's handling")?;
    // Its own trace is the operator's replay request in control-api.
    assert_ne!(
        replayed.trace_id,
        original.trace_id,
        "{}",
        render_all(&spans)
    );
    let replay_trace = in_trace(&spans, &replayed.trace_id);
    let request = replay_trace
        .iter()
        .find(|s| s.kind == "server" && s.attr("http.route") == Some("/dead-messages/{id}/replay"))
        .with_context(|| format!("no replay request in\n{}", render_all(&spans)))?;
    assert_eq!(request.attr("forgesync.service"), Some("control-api"));
    assert!(descends(&replay_trace, replayed, request));
    assert_eq!(
        replayed.attr("replay_of"),
        Some(dead.to_string().as_str()),
        "{}",
        render_all(&spans)
    );
    Ok(())
}
