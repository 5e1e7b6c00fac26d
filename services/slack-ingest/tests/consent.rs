//! Consent end to end: only a consented channel's messages are kept, and only from the
//! announcement that told its members; everything else a delivery carried is erased.

mod common;

use anyhow::Result;
use common::World;
use lifecycle_core::slack::ChannelStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_consented_channel_is_kept_from_its_announcement_on() -> Result<()> {
    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let [general, random, ops] = w.channels.clone();
    let user = w.user.clone();
    for c in [&general, &random, &ops] {
        w.sim
            .model(|m| m.post(c, &user, "before consent"))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    w.drained().await?;

    let consented = w.consent(w.a, &general).await?;
    let consent_ts = consented
        .consent_ts
        .expect("an ACTIVE channel has its consent")
        .to_string();
    // The announcement is the bot's message at the consent.
    let announced = w.sim.model(|m| {
        m.channel(&general)
            .and_then(|c| c.message(&consent_ts).map(|m| m.text.clone()))
    });
    assert!(
        announced
            .as_deref()
            .is_some_and(|t| t.contains("mirrored by forgesync")),
        "{announced:?}"
    );
    let mut kept = Vec::new();
    for c in [&general, &random, &ops] {
        let ts = w
            .sim
            .model(|m| m.post(c, &user, "after consent"))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        if c == &general {
            kept.push(ts.clone());
            let reply = w
                .sim
                .model(|m| m.reply(c, &ts, &user, "a reply", false))
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            kept.push(reply);
        }
    }
    w.drained().await?;

    let rows = w.messages(consented.id).await?;
    let stored: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    let mut expected = vec![consent_ts.as_str()];
    expected.extend(kept.iter().map(String::as_str));
    assert_eq!(stored, expected, "{rows:?}");
    assert!(rows.iter().all(|r| r.1.is_some() && !r.3));
    assert_eq!(w.events(w.a, "slack.message.posted").await?, 3);
    assert_eq!(w.events(w.a, "slack.channel.activated").await?, 1);

    for c in [&random, &ops] {
        let ch = w.channel(w.a, c).await?.expect("listed");
        assert_eq!(ch.status, ChannelStatus::None);
        assert_eq!(w.messages(ch.id).await?.len(), 0, "{c}");
        assert!(ch.dropped >= 2, "{c}: {ch:?}");
        assert_eq!(
            w.stored_bodies(w.a, c).await?,
            0,
            "{c}: its deliveries are erased"
        );
    }
    // What was said in general before its consent is gone too.
    assert!(w.stored_bodies(w.a, &general).await? >= 3);
    let before: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM inbound_message_body b JOIN inbound_message m ON m.id = b.message_id
          WHERE m.connection_id = $1 AND convert_from(b.body, 'UTF8') LIKE '%before consent%'",
    )
    .bind(w.a.connection_id)
    .fetch_one(&w.pool)
    .await?;
    assert_eq!(before, 0, "no body from before a consent stays");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_answer_to_the_announcement_is_adopted_never_posted_twice() -> Result<()> {
    use vendor_sim::slack::{Fault, SlackFault, methods};

    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    // The announcement is posted, but its answer never reaches slack-ingest: the consent is
    // redelivered and finds it in the channel instead of telling the members again.
    let posts_before = w.sim.calls(methods::CHAT_POST_MESSAGE);
    w.sim.inject(Fault::nth(
        methods::CHAT_POST_MESSAGE,
        posts_before + 1,
        SlackFault::Lost(503),
    ));
    let consented = w.consent(w.a, &general).await?;
    let announcements: Vec<String> = w.sim.model(|m| {
        m.channel(&general).map_or(Vec::new(), |c| {
            c.messages()
                .filter(|m| m.text.contains("mirrored by forgesync"))
                .map(|m| m.ts.to_string())
                .collect()
        })
    });
    assert_eq!(announcements.len(), 1, "{announcements:?}");
    assert_eq!(
        consented.consent_ts.map(|t| t.to_string()),
        Some(announcements[0].clone()),
        "the consent is the announcement the members saw"
    );
    assert_eq!(w.sim.calls(methods::CHAT_POST_MESSAGE) - posts_before, 1);
    assert_eq!(w.events(w.a, "slack.channel.activated").await?, 1);
    Ok(())
}
