//! Failed deliveries are asked for again: recent events none of whose attempts reached ingress
//! are redelivered once each and reach the mirror; an event older than the window, or one that
//! was delivered after all, is not asked for.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use vendor_sim::github::webhook::{self, Delivery};
use vendor_sim::github::{NewIssue, NewPullRequest, Scenario};

use crate::support::{HOOK_ID, LiveStack, SECRET};

/// An `opened` delivery of a new pull request (`pr`) or issue titled `title`.
fn opened(s: &LiveStack, repo_id: u64, title: &str, pr: bool) -> Delivery {
    s.sim.model(|m| {
        let (event, payload) = if pr {
            let created = m
                .add_pull_request(
                    repo_id,
                    NewPullRequest {
                        title: title.to_owned(),
                        author: Some("dev".into()),
                        ..Default::default()
                    },
                )
                .expect("repository exists");
            let repo = m.repository(repo_id).expect("repository");
            let payload = webhook::pull_request_payload(m, "opened", repo, &created);
            ("pull_request", payload)
        } else {
            let created = m
                .add_issue(
                    repo_id,
                    NewIssue {
                        title: title.to_owned(),
                        ..Default::default()
                    },
                )
                .expect("repository exists");
            let repo = m.repository(repo_id).expect("repository");
            (
                "issues",
                webhook::issues_payload(m, "opened", repo, &created),
            )
        };
        let mut delivery = Delivery::new(event, &payload);
        delivery.hook_id = HOOK_ID;
        delivery
    })
}

/// A URL nothing listens on: ingress "down".
fn closed_port() -> Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(format!("http://{}/webhooks/github", listener.local_addr()?))
}

/// Mirrored pull requests and issues whose title starts with `prefix`.
async fn mirrored(s: &LiveStack, prefix: &str) -> Result<i64> {
    s.count(&format!(
        "SELECT (SELECT count(*) FROM pull_request WHERE title LIKE '{prefix}%')
              + (SELECT count(*) FROM issue WHERE title LIKE '{prefix}%')"
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recent_failed_deliveries_are_redelivered_once_and_old_or_delivered_ones_are_not()
-> Result<()> {
    let s = LiveStack::start(Scenario {
        repositories: 1,
        items: 0,
        ..Scenario::default()
    })
    .await?;
    let repo_id = s.repositories[0];
    let ingress = format!("{}/webhooks/github", s.ingress);

    // Ingress is down: every attempt fails.
    s.sim.set_webhook_target(&closed_port()?, SECRET.as_bytes());
    let mut failed = Vec::new();
    for (i, pr) in [true, true, false, false].into_iter().enumerate() {
        let delivery = opened(&s, repo_id, &format!("failed {i}"), pr);
        assert_eq!(s.sim.deliver(&delivery).await, 0);
        failed.push(delivery);
    }
    let old = opened(&s, repo_id, "too old", true);
    let long_ago = time::OffsetDateTime::now_utc() - time::Duration::minutes(125);
    assert_eq!(s.sim.deliver_at(&old, long_ago).await, 0);
    let retried = opened(&s, repo_id, "retried", false);
    assert_eq!(s.sim.deliver(&retried).await, 0);

    // Ingress is back; one event got through on a later attempt of its own.
    s.sim.set_webhook_target(&ingress, SECRET.as_bytes());
    assert_eq!(s.sim.deliver(&retried).await, 200);
    s.settle().await?;
    assert_eq!(
        mirrored(&s, "failed").await?,
        0,
        "nothing failed got through"
    );
    assert_eq!(mirrored(&s, "retried").await?, 1);

    // The record of an event redelivered long ago: past the window, it is pruned.
    sqlx::query(
        "INSERT INTO github_redelivery (connection_id, delivery_id, guid, event, delivered_at)
         VALUES ($1, 1, 'long-done', 'issues', now() - interval '3 days')",
    )
    .bind(s.conn.parse::<uuid::Uuid>()?)
    .execute(&s.pool)
    .await?;

    // A replica with the redelivery schedule (every second) joins.
    let mut config = testkit::github_sync_config(s.env.common_args());
    config.redeliver_cron = "* * * * * *".to_owned();
    let _redelivering = testkit::spawn(config).await?;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while s.count("SELECT count(*) FROM github_redelivery").await? < failed.len() as i64
        || failed
            .iter()
            .any(|d| s.sim.delivery_attempts(&d.delivery_id).len() < 2)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the failed deliveries were not redelivered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Several more passes run: each event stays asked for once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.settle().await?;

    let rows: BTreeMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "SELECT guid, count(*) FROM github_redelivery GROUP BY guid",
    )
    .fetch_all(&s.pool)
    .await?
    .into_iter()
    .collect();
    let expected: BTreeMap<String, i64> =
        failed.iter().map(|d| (d.delivery_id.clone(), 1)).collect();
    assert_eq!(
        rows, expected,
        "one row per recent failed event, nothing else"
    );
    for delivery in &failed {
        let attempts = s.sim.delivery_attempts(&delivery.delivery_id);
        let codes: Vec<_> = attempts
            .iter()
            .map(|a| (a.redelivery, a.status_code))
            .collect();
        assert_eq!(codes, [(false, 0), (true, 200)], "{}", delivery.delivery_id);
    }
    assert_eq!(s.sim.delivery_attempts(&old.delivery_id).len(), 1);
    assert_eq!(s.sim.delivery_attempts(&retried.delivery_id).len(), 2);

    assert_eq!(mirrored(&s, "failed").await?, failed.len() as i64);
    assert_eq!(mirrored(&s, "too old").await?, 0);
    assert_eq!(mirrored(&s, "retried").await?, 1);
    Ok(())
}
