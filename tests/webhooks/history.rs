//! Redelivered, late and reordered webhooks only move the mirror forward, and each lifecycle
//! change records exactly one item event and one activity entry, whichever path reports it.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use futures::StreamExt as _;
use time::OffsetDateTime;
use vendor_sim::github::webhook::{self, Delivery};
use vendor_sim::github::{
    Model, NewPullRequest, PullRequest, PullRequestState, Repository, Scenario,
};

use crate::support::{HOOK_ID, LiveStack};

/// splitmix64: a seeded, dependency-free source of choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One scripted change: its delivery and the item event it must record (if any).
struct Change {
    delivery: Delivery,
    number: u64,
    event: Option<&'static str>,
}

/// `push` names the head before a `synchronize` (the pull request holds the new one).
fn pull_request_delivery(
    m: &Model,
    repo: &Repository,
    pr: &PullRequest,
    action: &str,
    push: Option<&str>,
) -> Delivery {
    let payload = match push {
        Some(before) => webhook::pull_request_synchronize_payload(m, repo, pr, before),
        None => webhook::pull_request_payload(m, action, repo, pr),
    };
    let mut delivery = Delivery::new("pull_request", &payload);
    delivery.hook_id = HOOK_ID;
    delivery
}

/// 20 pull requests opened, then `changes - 20` random lifecycle changes and edits, each one
/// second after the last; returns the changes in the order they happened.
fn script(s: &LiveStack, repo_id: u64, changes: usize, seed: u64) -> Vec<Change> {
    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(changes);
    s.sim.model(|m| {
        let mut numbers = Vec::new();
        for i in 0..20 {
            let pr = m
                .add_pull_request(
                    repo_id,
                    NewPullRequest {
                        title: format!("change {i}"),
                        author: Some("dev".into()),
                        is_draft: i % 3 == 0,
                        ..Default::default()
                    },
                )
                .expect("repository exists");
            let repo = m.repository(repo_id).expect("repository").clone();
            out.push(Change {
                delivery: pull_request_delivery(m, &repo, &pr, "opened", None),
                number: pr.number,
                event: Some("scm.pull_request.opened"),
            });
            numbers.push(pr.number);
        }
        let mut pushes = 0u64;
        while out.len() < changes {
            let number = numbers[rng.below(numbers.len())];
            let pr = m
                .repository(repo_id)
                .unwrap()
                .pull_request(number)
                .unwrap()
                .clone();
            let at = m.tick();
            // The moves this pull request's state allows; an edit is always possible.
            let mut moves = vec!["edited"];
            match (pr.state, pr.is_draft) {
                (PullRequestState::Open, true) => {
                    moves.extend(["synchronize", "ready_for_review", "closed"])
                }
                (PullRequestState::Open, false) => {
                    moves.extend(["synchronize", "converted_to_draft", "closed", "merged"])
                }
                (PullRequestState::Closed, _) => moves.push("reopened"),
                (PullRequestState::Merged, _) => {}
            }
            let action = moves[rng.below(moves.len())];
            let mut push = None;
            let before = pr.head_ref_oid.clone();
            m.update_pull_request(repo_id, number, |pr| {
                pr.updated_at = at;
                match action {
                    "edited" => pr.title = format!("{} (edit {})", pr.title, out.len()),
                    "synchronize" => {
                        pushes += 1;
                        pr.head_ref_oid = format!("{:040x}", 0xfeed_0000_u64 + pushes);
                        push = Some(pr.head_ref_oid.clone());
                    }
                    "ready_for_review" => pr.is_draft = false,
                    "converted_to_draft" => pr.is_draft = true,
                    "closed" => {
                        pr.state = PullRequestState::Closed;
                        pr.closed_at = Some(at);
                    }
                    "merged" => {
                        pr.state = PullRequestState::Merged;
                        pr.closed_at = Some(at);
                        pr.merged_at = Some(at);
                    }
                    "reopened" => {
                        pr.state = PullRequestState::Open;
                        pr.closed_at = None;
                    }
                    _ => unreachable!(),
                }
            });
            let repo = m.repository(repo_id).unwrap().clone();
            let pr = repo.pull_request(number).unwrap().clone();
            // GitHub reports a merge as `closed` with `merged: true`.
            let wire_action = if action == "merged" { "closed" } else { action };
            let delivery = pull_request_delivery(
                m,
                &repo,
                &pr,
                wire_action,
                push.is_some().then_some(before.as_str()),
            );
            let event = match action {
                "synchronize" => Some("scm.pull_request.synchronized"),
                "ready_for_review" => Some("scm.pull_request.ready_for_review"),
                "converted_to_draft" => Some("scm.pull_request.converted_to_draft"),
                "closed" => Some("scm.pull_request.closed"),
                "merged" => Some("scm.pull_request.merged"),
                "reopened" => Some("scm.pull_request.reopened"),
                _ => None,
            };
            out.push(Change {
                delivery,
                number,
                event,
            });
        }
    });
    out
}

/// Publishes `delivery` straight onto the webhook stream under a fresh message id, as a copy
/// arriving after the duplicate window (or an operator's replay) would.
async fn publish_copy(s: &LiveStack, owner: &str, repo: &str, delivery: &Delivery) -> Result<()> {
    // A copy of the message ingress stored for the delivery: it names that record, which says
    // what its signature proved. Until ingress has stored it (a shuffled send may come first)
    // the copy names none, and is then only a claim, which github-sync confirms by reading.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let stored = loop {
        let stored: Option<uuid::Uuid> =
            sqlx::query_scalar("SELECT id FROM inbound_message WHERE provider_event_id = $1")
                .bind(&delivery.delivery_id)
                .fetch_optional(&s.pool)
                .await?;
        if stored.is_some() || tokio::time::Instant::now() >= deadline {
            break stored;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Forgesync-Connection", s.conn.as_str());
    if let Some(stored) = stored {
        headers.insert("Forgesync-Delivery", stored.to_string().as_str());
    }
    headers.insert("Forgesync-Event", delivery.event.as_str());
    let subject = lifecycle_core::subject::github(owner, repo, &delivery.event)?;
    s.env
        .bus
        .publish(
            &subject,
            &uuid::Uuid::now_v7().to_string(),
            headers,
            delivery.body.clone().into(),
        )
        .await?;
    Ok(())
}

/// The stored state of every pull request, as (state, draft, title, head, closed, merged, updated).
type Row = (
    String,
    Option<bool>,
    Option<String>,
    Option<String>,
    Option<OffsetDateTime>,
    Option<OffsetDateTime>,
    OffsetDateTime,
);

type NumberedRow = (
    i32,
    String,
    Option<bool>,
    Option<String>,
    Option<String>,
    Option<OffsetDateTime>,
    Option<OffsetDateTime>,
    OffsetDateTime,
);

async fn mirror(s: &LiveStack) -> Result<BTreeMap<i32, Row>> {
    let rows: Vec<NumberedRow> = sqlx::query_as(
        "SELECT number, state, draft, title, head_sha, closed_at, merged_at, upstream_updated_at
               FROM pull_request ORDER BY number",
    )
    .fetch_all(&s.pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.0, (r.1, r.2, r.3, r.4, r.5, r.6, r.7)))
        .collect())
}

fn expected_mirror(s: &LiveStack, repo_id: u64) -> BTreeMap<i32, Row> {
    s.sim.model(|m| {
        m.repository(repo_id)
            .unwrap()
            .pull_requests()
            .map(|pr| {
                let state = match pr.state {
                    PullRequestState::Open => "open",
                    PullRequestState::Closed => "closed",
                    PullRequestState::Merged => "merged",
                };
                (
                    pr.number as i32,
                    (
                        state.to_owned(),
                        Some(pr.is_draft),
                        Some(pr.title.clone()),
                        Some(pr.head_ref_oid.clone()),
                        pr.closed_at,
                        pr.merged_at,
                        pr.updated_at,
                    ),
                )
            })
            .collect()
    })
}

/// (number, event name) → how many item events the mirror holds.
async fn item_events(s: &LiveStack) -> Result<BTreeMap<(i32, String), i64>> {
    let rows: Vec<(i32, String, i64)> = sqlx::query_as(
        "SELECT p.number, e.name, count(*) FROM item_event e
           JOIN pull_request p ON p.id = e.pull_request_id GROUP BY 1, 2",
    )
    .fetch_all(&s.pool)
    .await?;
    Ok(rows.into_iter().map(|(n, e, c)| ((n, e), c)).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shuffled_tripled_history_interleaved_with_syncs_equals_in_order_application()
-> Result<()> {
    let s = LiveStack::start(Scenario {
        repositories: 1,
        items: 0,
        ..Scenario::default()
    })
    .await?;
    let repo_id = s.repositories[0];
    let (owner, name) = s.sim.model(|m| {
        let r = m.repository(repo_id).unwrap();
        (r.owner.clone(), r.name.clone())
    });
    let changes = script(&s, repo_id, 200, 7);

    // Every delivery three times: twice through ingress under its GitHub delivery id (the second
    // is absorbed there), once straight onto the stream under a new message id (a copy from
    // beyond the duplicate window). The whole lot shuffled.
    let mut sends: Vec<(usize, u8)> = (0..changes.len())
        .flat_map(|i| [(i, 0), (i, 1), (i, 2)])
        .collect();
    let mut rng = Rng(99);
    for i in (1..sends.len()).rev() {
        sends.swap(i, rng.below(i + 1));
    }
    // A stream copy follows its delivery's first send (it copies what ingress stored).
    for change in 0..changes.len() {
        let at = |copy| sends.iter().position(|&c| c == (change, copy));
        if let (Some(first), Some(copy)) = (at(0), at(2))
            && copy < first
        {
            sends.swap(first, copy);
        }
    }
    let third = sends.len() / 3;
    for (part, chunk) in sends.chunks(third).enumerate() {
        futures::stream::iter(chunk.iter().copied())
            .map(|(i, copy)| {
                let (s, owner, name, change) = (&s, &owner, &name, &changes[i]);
                async move {
                    if copy < 2 {
                        let status = s.send(&change.delivery).await?;
                        anyhow::ensure!(status == 200, "ingress answered {status}");
                    } else {
                        publish_copy(s, owner, name, &change.delivery).await?;
                    }
                    Ok(())
                }
            })
            .buffer_unordered(8)
            .collect::<Vec<Result<()>>>()
            .await
            .into_iter()
            .collect::<Result<Vec<()>>>()?;
        // Syncs interleaved with the deliveries: each reads the simulator's final state.
        if part < 2 {
            s.reconcile().await?;
        }
    }
    s.finished_jobs("RECONCILIATION", 2).await?;
    s.settle().await?;

    // The mirror equals the in-order application (the simulator's final state).
    assert_eq!(mirror(&s).await?, expected_mirror(&s, repo_id));

    // Exactly one item event per lifecycle change, and nothing else.
    let mut expected: BTreeMap<(i32, String), i64> = BTreeMap::new();
    for change in &changes {
        if let Some(event) = change.event {
            *expected
                .entry((change.number as i32, event.to_owned()))
                .or_default() += 1;
        }
    }
    assert_eq!(item_events(&s).await?, expected);
    let total: i64 = expected.values().sum();
    // One activity entry per event for the one workspace, and one message announcing each.
    assert_eq!(s.count("SELECT count(*) FROM activity_event").await?, total);
    assert_eq!(s.events(total as usize).await?.len() as i64, total);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redelivery_after_the_duplicate_window_changes_nothing() -> Result<()> {
    let s = LiveStack::start(Scenario {
        repositories: 1,
        items: 0,
        ..Scenario::default()
    })
    .await?;
    let repo_id = s.repositories[0];
    let (owner, name) = s.sim.model(|m| {
        let r = m.repository(repo_id).unwrap();
        (r.owner.clone(), r.name.clone())
    });
    let changes = script(&s, repo_id, 40, 3);
    for change in &changes {
        assert_eq!(s.send(&change.delivery).await?, 200);
    }
    s.settle().await?;
    let mirrored = mirror(&s).await?;
    assert_eq!(mirrored, expected_mirror(&s, repo_id));
    let events = item_events(&s).await?;
    let activity = s.count("SELECT count(*) FROM activity_event").await?;

    // Every delivery again, oldest first, as new stream messages (the window has passed), then
    // once more in reverse.
    for change in changes.iter().chain(changes.iter().rev()) {
        publish_copy(&s, &owner, &name, &change.delivery).await?;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.settle().await?;
    assert_eq!(mirror(&s).await?, mirrored);
    assert_eq!(item_events(&s).await?, events);
    assert_eq!(
        s.count("SELECT count(*) FROM activity_event").await?,
        activity
    );
    Ok(())
}
