//! Redelivered, reordered and retried events: 500 posts, replies, edits, unfurls and deletes,
//! each delivered three times in a shuffled order (some as Slack's retries), leave the mirror
//! as in-order application would, with at most one event per change, and a deleted message
//! never comes back.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, anyhow};
use common::World;

/// A copy's retry header: its number and reason.
type Retry = Option<(u32, &'static str)>;

/// A tiny deterministic generator (xorshift), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shuffled_triple_deliveries_equal_in_order_application() -> Result<()> {
    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    let consented = w.consent(w.a, &general).await?;
    w.drained().await?;
    let user = w.user.clone();
    let e = |e| anyhow!("{e:?}");

    // The changes, made at the simulator while its deliveries go nowhere (recorded, not sent).
    w.deafen();
    let mut rng = Rng(0x5eed_cafe_f00d_d00d);
    // ts -> (text, deleted), as in-order application leaves it.
    let mut expected: BTreeMap<String, (String, bool)> = BTreeMap::new();
    let mut live: Vec<String> = Vec::new();
    let (mut posts, mut edits, mut deletes) = (0i64, 0i64, 0usize);
    for i in 0..500 {
        let roll = rng.below(10);
        if live.is_empty() || roll < 4 {
            let text = format!("post {i}");
            let ts = w.sim.model(|m| m.post(&general, &user, &text)).map_err(e)?;
            expected.insert(ts.clone(), (text, false));
            live.push(ts);
            posts += 1;
        } else if roll < 6 {
            let parent = live[rng.below(live.len())].clone();
            let text = format!("reply {i}");
            let ts = w
                .sim
                .model(|m| m.reply(&general, &parent, &user, &text, rng.below(4) == 0))
                .map_err(e)?;
            expected.insert(ts.clone(), (text, false));
            live.push(ts);
            posts += 1;
        } else if roll < 8 {
            let ts = live[rng.below(live.len())].clone();
            let text = format!("edit {i}");
            w.sim.model(|m| m.edit(&general, &ts, &text)).map_err(e)?;
            expected.insert(ts, (text, false));
            edits += 1;
        } else if roll < 9 {
            let ts = live[rng.below(live.len())].clone();
            w.sim.model(|m| m.unfurl(&general, &ts)).map_err(e)?;
        } else {
            let ts = live.swap_remove(rng.below(live.len()));
            w.sim.model(|m| m.delete(&general, &ts)).map_err(e)?;
            expected.get_mut(&ts).expect("posted").1 = true;
            deletes += 1;
        }
    }
    w.sim.settle().await;
    let mut bodies: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for attempt in w.sim.deliveries() {
        bodies
            .entry(attempt.event_id.clone())
            .or_insert(attempt.body);
    }
    assert!(bodies.len() >= 500, "{} events", bodies.len());

    // Each delivered three times, shuffled; every other copy claims to be Slack's retry.
    w.listen();
    let mut sends: Vec<(&Vec<u8>, Retry)> = Vec::new();
    for body in bodies.values() {
        sends.push((body, None));
        sends.push((body, Some((1, "http_timeout"))));
        sends.push((body, Some((2, "http_error"))));
    }
    for i in (1..sends.len()).rev() {
        sends.swap(i, rng.below(i + 1));
    }
    for chunk in sends.chunks(16) {
        let sent = futures::future::join_all(
            chunk
                .iter()
                .map(|(body, retry)| w.sim.send_event(body, *retry)),
        )
        .await;
        for status in sent {
            let status = status.map_err(|e| anyhow!("{e:?}"))?;
            assert!(status.is_success(), "{status}");
        }
    }
    w.drained().await?;

    let rows = w.messages(consented.id).await?;
    let consent = consented.consent_ts.expect("consent").to_string();
    let mirror: BTreeMap<String, (Option<String>, bool)> = rows
        .into_iter()
        .filter(|r| r.0 != consent)
        .map(|(ts, text, _, deleted)| (ts, (text, deleted)))
        .collect();
    for (ts, (text, deleted)) in &expected {
        match mirror.get(ts) {
            Some((_, true)) => assert!(*deleted, "{ts} was deleted in the mirror only"),
            Some((stored, false)) => {
                assert!(!deleted, "{ts}: a deleted message came back");
                assert_eq!(stored.as_deref(), Some(text.as_str()), "{ts}");
            }
            None => panic!("{ts} is missing from the mirror"),
        }
    }
    assert_eq!(mirror.len(), expected.len(), "nothing else is stored");
    let tombstoned = mirror.values().filter(|(t, d)| *d && t.is_none()).count();
    assert_eq!(tombstoned, deletes);

    // At most one event per change, whatever the copies.
    let posted = w.events(w.a, "slack.message.posted").await?;
    let edited = w.events(w.a, "slack.message.edited").await?;
    let deleted = w.events(w.a, "slack.message.deleted").await?;
    assert!(
        posted <= posts + 1,
        "{posted} posted events for {posts} posts"
    );
    assert!(edited <= edits, "{edited} edited events for {edits} edits");
    assert!(
        deleted <= deletes as i64,
        "{deleted} deleted events for {deletes} deletes"
    );
    let keys: Vec<String> =
        sqlx::query_scalar("SELECT source_key FROM integration_event WHERE connection_id = $1")
            .bind(w.a.connection_id)
            .fetch_all(&w.pool)
            .await?;
    let distinct: BTreeSet<&String> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn late_acks_make_slack_retry_and_every_change_is_applied_once() -> Result<()> {
    use std::time::Duration;
    use vendor_sim::slack::RetrySchedule;

    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    w.consent(w.a, &general).await?;
    w.drained().await?;
    let user = w.user.clone();
    let e = |e| anyhow!("{e:?}");

    // Every third first attempt is stored by ingress but answered after Slack gave up on it.
    let timeout = Duration::from_millis(400);
    let late = common::LateAcks::start(w.ingress.url().to_string(), 3, timeout * 2).await?;
    w.sim
        .subscribe_events(&format!("{}/webhooks/slack", late.url), common::SECRET);
    w.sim.set_retry_schedule(RetrySchedule {
        timeout,
        delays: vec![
            Duration::ZERO,
            Duration::from_millis(200),
            Duration::from_secs(1),
        ],
    });
    let before = (
        w.events(w.a, "slack.message.posted").await?,
        w.events(w.a, "slack.message.edited").await?,
        w.events(w.a, "slack.message.deleted").await?,
    );

    let mut rng = Rng(0x1a7e_ac45);
    let mut expected: BTreeMap<String, (String, bool)> = BTreeMap::new();
    let mut live: Vec<String> = Vec::new();
    let (mut posts, mut edits, mut deletes) = (0i64, 0i64, 0i64);
    for i in 0..45 {
        let roll = rng.below(10);
        if live.is_empty() || roll < 5 {
            let text = format!("late {i}");
            let ts = w.sim.model(|m| m.post(&general, &user, &text)).map_err(e)?;
            expected.insert(ts.clone(), (text, false));
            live.push(ts);
            posts += 1;
        } else if roll < 8 {
            let ts = live[rng.below(live.len())].clone();
            let text = format!("late edit {i}");
            w.sim.model(|m| m.edit(&general, &ts, &text)).map_err(e)?;
            expected.insert(ts, (text, false));
            edits += 1;
        } else {
            let ts = live.swap_remove(rng.below(live.len()));
            w.sim.model(|m| m.delete(&general, &ts)).map_err(e)?;
            expected.get_mut(&ts).expect("posted").1 = true;
            deletes += 1;
        }
        w.sim.settle().await;
    }
    w.drained().await?;

    // Slack retried what was answered late, saying why, and counts every event delivered.
    let attempts = w.sim.deliveries();
    let timed_out_retries = attempts
        .iter()
        .filter(|a| a.retry_num > 0 && a.retry_reason.as_deref() == Some("http_timeout"))
        .count();
    assert!(late.held() >= 10, "{} answers held", late.held());
    assert!(
        timed_out_retries >= late.held(),
        "{timed_out_retries} retries for {} late answers",
        late.held()
    );
    let delivered: BTreeSet<&str> = attempts
        .iter()
        .filter(|a| a.succeeded())
        .map(|a| a.event_id.as_str())
        .collect();
    let all: BTreeSet<&str> = attempts.iter().map(|a| a.event_id.as_str()).collect();
    assert_eq!(delivered, all, "every event was delivered in the end");

    // The mirror is what in-order application leaves, and each change made one event.
    let rows = w
        .messages(w.channel(w.a, &general).await?.expect("kept").id)
        .await?;
    for (ts, (text, deleted)) in &expected {
        let row = rows.iter().find(|r| &r.0 == ts);
        let row = row.unwrap_or_else(|| panic!("{ts} is missing from the mirror"));
        assert_eq!(row.3, *deleted, "{ts}");
        if !deleted {
            assert_eq!(row.1.as_deref(), Some(text.as_str()), "{ts}");
        }
    }
    let after = (
        w.events(w.a, "slack.message.posted").await?,
        w.events(w.a, "slack.message.edited").await?,
        w.events(w.a, "slack.message.deleted").await?,
    );
    assert_eq!(after.0 - before.0, posts, "posted events");
    assert_eq!(after.1 - before.1, edits, "edited events");
    assert_eq!(after.2 - before.2, deletes, "deleted events");
    Ok(())
}
