//! RECONCILIATION replays: what events missed is added and later edits applied, from the
//! consent on; absence deletes nothing, and a replay under any fault (a short page, a lying
//! `has_more`, rate limits, 5xx, `ok:false`, the call budget) deletes nothing and says why.

mod common;

use anyhow::{Result, anyhow};
use common::{Tenant, World};
use vendor_sim::slack::{Fault, SlackFault, methods};

fn sim<T>(r: Result<T, vendor_sim::slack::SlackError>) -> Result<T> {
    r.map_err(|e| anyhow!("{e:?}"))
}

/// `(rows, tombstones)` of the channel.
async fn census(w: &World, channel: uuid::Uuid) -> Result<(usize, usize)> {
    let rows = w.messages(channel).await?;
    Ok((rows.len(), rows.iter().filter(|r| r.3).count()))
}

/// The activities of `t` since `after` (kind and detail).
async fn activities(
    w: &World,
    t: Tenant,
    after: usize,
) -> Result<Vec<(String, serde_json::Value)>> {
    let all: Vec<(String, serde_json::Value)> = sqlx::query_as(
        "SELECT activity, detail FROM connection_activity WHERE connection_id = $1 ORDER BY created_at, id",
    )
    .bind(t.connection_id)
    .fetch_all(&w.pool)
    .await?;
    Ok(all.into_iter().skip(after).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_adds_what_events_missed_and_deletes_nothing_under_any_fault() -> Result<()> {
    let w = World::start_with(&["--page-size=5"]).await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    let user = w.user.clone();
    let channel = w.consent(w.a, &general).await?;
    let mut live = Vec::new();
    for i in 0..5 {
        live.push(sim(w
            .sim
            .model(|m| m.post(&general, &user, &format!("live {i}"))))?);
    }
    w.drained().await?;

    // Events stop reaching us: posts, edits, a reply and a deletion happen unseen.
    w.deafen();
    let mut missed = Vec::new();
    for i in 0..20 {
        missed.push(sim(w
            .sim
            .model(|m| m.post(&general, &user, &format!("missed {i}"))))?);
    }
    sim(w.sim.model(|m| m.edit(&general, &live[0], "edited unseen")))?;
    let reply = sim(w
        .sim
        .model(|m| m.reply(&general, &live[1], &user, "unseen reply", false)))?;
    sim(w.sim.model(|m| m.delete(&general, &live[2])))?;
    // Messages Slack writes itself: read by the replay, never kept.
    let mut system = Vec::new();
    for (subtype, text) in [
        ("channel_join", "<@U1> has joined the channel"),
        ("channel_topic", "set the channel topic: launch"),
    ] {
        system.push(sim(w
            .sim
            .model(|m| m.system_message(&general, &user, subtype, text)))?);
    }
    w.sim.settle().await;
    w.listen();

    let before = census(&w, channel.id).await?;
    // Each fault on its own: the replay deletes nothing, and the reason is recorded.
    // A short page with its cursor is an answer Slack may give: the replay follows it.
    w.sim.inject(Fault::nth(
        methods::CONVERSATIONS_HISTORY,
        2,
        SlackFault::ShortPage { keep: 2 },
    ));
    let (status, error) = w.reconcile(w.a).await?;
    w.sim.clear_faults();
    assert_eq!(status, "succeeded", "short page: {error:?}");
    let after = census(&w, channel.id).await?;
    assert!(
        after.0 >= before.0 && after.1 == before.1,
        "short page: {before:?} -> {after:?}"
    );
    // `has_more: false` with more left (and no cursor) cannot be told from the truth: the
    // replay ends early, deleting nothing; every replay reads again from the consent or the
    // lookback, so the next one reads what this one did not.
    w.sim.inject(Fault::nth(
        methods::CONVERSATIONS_HISTORY,
        2,
        SlackFault::HasMore(false),
    ));
    w.reconcile(w.a).await?;
    w.sim.clear_faults();
    let after = census(&w, channel.id).await?;
    assert!(
        after.0 >= before.0 && after.1 == before.1,
        "lying has_more: {before:?} -> {after:?}"
    );
    // The history's pages of five (everything in it is from the consent on).
    let in_history = w.sim.model(|m| {
        m.channel(&general)
            .map_or(0, |c| c.messages().filter(|m| m.in_history()).count())
    });
    let last_page = in_history.div_ceil(5) as u64;
    let faults: Vec<(&str, Fault<SlackFault>)> = vec![
        (
            "has_more without cursor",
            Fault::nth(
                methods::CONVERSATIONS_HISTORY,
                last_page,
                SlackFault::HasMore(true),
            ),
        ),
        (
            "429",
            Fault::always(
                methods::CONVERSATIONS_HISTORY,
                SlackFault::RateLimited { retry_after: 3600 },
            ),
        ),
        (
            "5xx",
            Fault::always(methods::CONVERSATIONS_HISTORY, SlackFault::Status(503)),
        ),
        (
            "ok:false",
            Fault::always(
                methods::CONVERSATIONS_HISTORY,
                SlackFault::error("internal_error"),
            ),
        ),
    ];
    for (name, fault) in faults {
        let seen = activities(&w, w.a, 0).await?.len();
        w.sim.inject(fault);
        let (status, error) = w.reconcile(w.a).await?;
        w.sim.clear_faults();
        let after = census(&w, channel.id).await?;
        assert!(
            after.0 >= before.0,
            "{name}: rows went from {before:?} to {after:?}"
        );
        assert_eq!(
            after.1, before.1,
            "{name}: nothing is tombstoned by a replay"
        );
        // What the replay read and did not keep is said too, but is no fault's reason.
        let recorded: Vec<_> = activities(&w, w.a, seen)
            .await?
            .into_iter()
            .filter(|(kind, _)| kind != "slack_replay_not_kept")
            .collect();
        let said = format!("{status} {error:?} {recorded:?}");
        assert!(
            status == "failed" || !recorded.is_empty(),
            "{name}: the replay says nothing of its fault: {said}"
        );
    }

    // A clean replay: every missed message, the edit and the reply; the unseen deletion is not
    // inferred from absence, and the messages Slack wrote itself are read, not kept, and said.
    let seen = activities(&w, w.a, 0).await?.len();
    let (status, error) = w.reconcile(w.a).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    let rows = w.messages(channel.id).await?;
    let ts: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    for m in missed.iter().chain([&reply]) {
        assert!(ts.contains(&m.as_str()), "{m} missing: {ts:?}");
    }
    for m in &system {
        assert!(
            !ts.contains(&m.as_str()),
            "{m} is a join or topic: not kept"
        );
    }
    let not_kept: Vec<serde_json::Value> = activities(&w, w.a, seen)
        .await?
        .into_iter()
        .filter(|(kind, _)| kind == "slack_replay_not_kept")
        .map(|(_, detail)| detail["subtypes"].clone())
        .collect();
    for subtype in ["channel_join", "channel_topic"] {
        let n: u64 = not_kept.iter().filter_map(|s| s[subtype].as_u64()).sum();
        assert_eq!(n, 1, "{subtype}: {not_kept:?}");
    }
    let edited = rows.iter().find(|r| r.0 == live[0]).expect("kept");
    assert_eq!(edited.1.as_deref(), Some("edited unseen"));
    assert!(edited.2.is_some(), "the edit's ts is kept");
    let unseen_deletion = rows.iter().find(|r| r.0 == live[2]).expect("still kept");
    assert!(!unseen_deletion.3, "absence never deletes");
    assert!(
        w.sim
            .calls_of(methods::CONVERSATIONS_HISTORY)
            .iter()
            .all(|c| c
                .param("oldest")
                .is_some_and(|o| o >= channel.consent_ts.unwrap().to_string().as_str()))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spent_call_budget_stops_the_replay_deleting_nothing() -> Result<()> {
    let w = World::start_with(&["--page-size=2", "--slack-calls-per-job=2"]).await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    let user = w.user.clone();
    let channel = w.consent(w.a, &general).await?;
    w.deafen();
    for i in 0..10 {
        sim(w
            .sim
            .model(|m| m.post(&general, &user, &format!("missed {i}"))))?;
    }
    w.sim.settle().await;
    w.listen();
    let before = census(&w, channel.id).await?;
    let calls_before = w.sim.calls(methods::CONVERSATIONS_HISTORY);
    let (status, error) = w.reconcile(w.a).await?;
    assert_eq!(status, "failed", "{error:?}");
    assert!(
        error.as_deref().is_some_and(|e| e.contains("budget")),
        "{error:?}"
    );
    assert_eq!(
        w.sim.calls(methods::CONVERSATIONS_HISTORY) - calls_before,
        2
    );
    let after = census(&w, channel.id).await?;
    assert!(
        after.0 >= before.0 && after.1 == before.1,
        "{before:?} -> {after:?}"
    );
    Ok(())
}
