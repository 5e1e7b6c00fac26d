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

/// Changes made at the simulator, and what in-order application leaves of them.
#[derive(Default)]
struct Changes {
    /// ts -> (text, deleted).
    expected: BTreeMap<String, (String, bool)>,
    /// Messages not deleted yet.
    live: Vec<String>,
    posts: i64,
    edits: i64,
    deletes: i64,
    /// The event source key (`channel:ts:edited:edited_ts`) of each live message's last edit.
    last_edits: BTreeMap<String, String>,
}

impl Changes {
    /// One random change in `channel`: a post, a reply (sometimes broadcast), an edit, an
    /// unfurl (no edit) or a deletion.
    fn make(&mut self, w: &World, rng: &mut Rng, channel: &str, i: usize) -> Result<()> {
        let e = |e| anyhow!("{e:?}");
        let user = &w.user;
        let roll = rng.below(10);
        if self.live.is_empty() || roll < 4 {
            let text = format!("post {i}");
            let ts = w.sim.model(|m| m.post(channel, user, &text)).map_err(e)?;
            self.expected.insert(ts.clone(), (text, false));
            self.live.push(ts);
            self.posts += 1;
        } else if roll < 6 {
            let parent = self.live[rng.below(self.live.len())].clone();
            let text = format!("reply {i}");
            let broadcast = rng.below(4) == 0;
            let ts = w
                .sim
                .model(|m| m.reply(channel, &parent, user, &text, broadcast))
                .map_err(e)?;
            self.expected.insert(ts.clone(), (text, false));
            self.live.push(ts);
            self.posts += 1;
        } else if roll < 8 {
            let ts = self.live[rng.below(self.live.len())].clone();
            let text = format!("edit {i}");
            let edited = w.sim.model(|m| m.edit(channel, &ts, &text)).map_err(e)?;
            let key = format!("{channel}:{ts}:edited:{edited}");
            self.last_edits.insert(ts.clone(), key);
            self.expected.insert(ts, (text, false));
            self.edits += 1;
        } else if roll < 9 {
            let ts = self.live[rng.below(self.live.len())].clone();
            w.sim.model(|m| m.unfurl(channel, &ts)).map_err(e)?;
        } else {
            let ts = self.live.swap_remove(rng.below(self.live.len()));
            w.sim.model(|m| m.delete(channel, &ts)).map_err(e)?;
            self.last_edits.remove(&ts);
            self.expected.get_mut(&ts).expect("posted").1 = true;
            self.deletes += 1;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shuffled_triple_deliveries_equal_in_order_application() -> Result<()> {
    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    let consented = w.consent(w.a, &general).await?;
    w.drained().await?;

    // The changes, made at the simulator while its deliveries go nowhere (recorded, not sent).
    w.deafen();
    let mut rng = Rng(0x5eed_cafe_f00d_d00d);
    let mut changes = Changes::default();
    for i in 0..500 {
        changes.make(&w, &mut rng, &general, i)?;
    }
    let Changes {
        expected,
        posts,
        edits,
        deletes,
        ..
    } = changes;
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
    assert_eq!(tombstoned as i64, deletes);

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
        deleted <= deletes,
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
    let mut changes = Changes::default();
    for i in 0..45 {
        changes.make(&w, &mut rng, &general, i)?;
        w.sim.settle().await;
    }
    let Changes {
        expected,
        posts,
        edits,
        deletes,
        last_edits,
        ..
    } = changes;
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
    // Deliveries are applied concurrently, so a change can be applied after a later one of
    // the same message: it is older and changes nothing, and makes no event. What every
    // message ended as always made one: its post while it lives, its deletion once deleted,
    // and the last edit of one still there.
    let keys = |event_type: &'static str| {
        let pool = w.pool.clone();
        async move {
            let keys: Vec<String> = sqlx::query_scalar(
                "SELECT source_key FROM integration_event WHERE connection_id = $1 AND type = $2",
            )
            .bind(w.a.connection_id)
            .bind(event_type)
            .fetch_all(&pool)
            .await?;
            anyhow::Ok(keys.into_iter().collect::<BTreeSet<String>>())
        }
    };
    let (posted, edited, deleted) = (
        keys("slack.message.posted").await?,
        keys("slack.message.edited").await?,
        keys("slack.message.deleted").await?,
    );
    for (ts, (_, gone)) in &expected {
        let key = format!("{general}:{ts}");
        if *gone {
            assert!(
                deleted.contains(&format!("{key}:deleted")),
                "{ts}: no deletion event"
            );
        } else {
            assert!(posted.contains(&key), "{ts}: no post event");
        }
    }
    let missing: Vec<&String> = last_edits
        .values()
        .filter(|k| !edited.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "no event for the last edits {missing:?}"
    );
    assert!(posted.len() as i64 - before.0 <= posts, "posted events");
    assert!(edited.len() as i64 - before.1 <= edits, "edited events");
    assert!(deleted.len() as i64 - before.2 <= deletes, "deleted events");
    Ok(())
}
