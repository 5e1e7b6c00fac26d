//! A channel's life after its consent: archive and resume (nothing from the pause is kept or
//! ever fetched), rename, Slack deleting it, the consent withdrawn, and the bot removed from one
//! of two channels (the other goes on; the token is not flagged).

mod common;

use anyhow::{Result, anyhow};
use common::{World, eventually};
use lifecycle_core::forward::SlackTs;
use lifecycle_core::slack::{ChannelCommand, ChannelStatus};
use vendor_sim::slack::methods;

fn sim<T>(r: Result<T, vendor_sim::slack::SlackError>) -> Result<T> {
    r.map_err(|e| anyhow!("{e:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn archive_then_resume_keeps_nothing_from_the_pause_and_never_reads_before_consent()
-> Result<()> {
    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    let user = w.user.clone();
    let first = w.consent(w.a, &general).await?;
    let kept = sim(w.sim.model(|m| m.post(&general, &user, "kept")))?;
    sim(w.sim.model(|m| m.archive(&general)))?;
    let paused = w.until_status(w.a, &general, ChannelStatus::Paused).await?;
    assert_eq!(paused.reason.as_deref(), Some("the channel was archived"));
    sim(w.sim.model(|m| m.unarchive(&general)))?;
    let gap = sim(w
        .sim
        .model(|m| m.post(&general, &user, "said while paused")))?;
    w.drained().await?;
    assert_eq!(
        w.until_status(w.a, &general, ChannelStatus::Paused)
            .await?
            .status,
        ChannelStatus::Paused,
        "unarchiving resumes nothing"
    );

    w.command(w.a, &general, ChannelCommand::Resume).await?;
    let resumed = w.until_status(w.a, &general, ChannelStatus::Active).await?;
    let consent = resumed.consent_ts.expect("resumed at an instant");
    assert!(consent > gap.parse::<SlackTs>()?, "the gap stays outside");
    let after = sim(w.sim.model(|m| m.post(&general, &user, "after the resume")))?;
    w.drained().await?;

    let (status, error) = w.reconcile(w.a).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    let stored: Vec<String> = w
        .messages(first.id)
        .await?
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert!(stored.contains(&kept), "{stored:?}");
    assert!(stored.contains(&after), "{stored:?}");
    assert!(!stored.contains(&gap), "nothing from the pause: {stored:?}");
    assert!(w.stored_bodies(w.a, &general).await? > 0);
    let gap_bodies: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM inbound_message_body b JOIN inbound_message m ON m.id = b.message_id
          WHERE m.connection_id = $1 AND convert_from(b.body, 'UTF8') LIKE '%said while paused%'",
    )
    .bind(w.a.connection_id)
    .fetch_one(&w.pool)
    .await?;
    assert_eq!(gap_bodies, 0, "the gap's delivery is erased");
    // No history read ever reached before the consent in force.
    let reads = w.sim.calls_of(methods::CONVERSATIONS_HISTORY);
    assert!(!reads.is_empty());
    for call in reads {
        let oldest: SlackTs = call
            .param("oldest")
            .expect("every replay names its oldest")
            .parse()?;
        assert!(
            oldest >= consent,
            "{call:?} read before the consent {consent}"
        );
    }
    assert_eq!(w.events(w.a, "slack.channel.paused").await?, 1);
    assert_eq!(w.events(w.a, "slack.channel.resumed").await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rename_deletion_withdrawal_and_a_removed_bot() -> Result<()> {
    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let [general, random, ops] = w.channels.clone();
    let user = w.user.clone();
    for c in [&general, &random, &ops] {
        w.consent(w.a, c).await?;
        sim(w.sim.model(|m| m.post(c, &user, "hello")))?;
    }
    w.drained().await?;

    // Rename: the row follows.
    sim(w.sim.model(|m| m.rename(&general, "town-square")))?;
    w.drained().await?;
    let renamed = w.channel(w.a, &general).await?.expect("kept");
    assert_eq!(renamed.name.as_deref(), Some("town-square"));

    // Slack deletes `ops`: our copy goes, its stored deliveries too.
    let ops_row = w.channel(w.a, &ops).await?.expect("kept");
    assert!(!w.messages(ops_row.id).await?.is_empty());
    sim(w.sim.model(|m| m.delete_channel(&ops)))?;
    w.drained().await?;
    assert!(w.channel(w.a, &ops).await?.is_none());
    assert!(w.messages(ops_row.id).await?.is_empty());
    assert_eq!(w.stored_bodies(w.a, &ops).await?, 0);
    assert_eq!(w.events(w.a, "slack.channel.erased").await?, 1);

    // Withdrawal: NONE, everything kept erased; a new grant posts a new announcement.
    let random_row = w.channel(w.a, &random).await?.expect("kept");
    w.command(w.a, &random, ChannelCommand::Withdraw).await?;
    w.until_status(w.a, &random, ChannelStatus::None).await?;
    w.drained().await?;
    assert!(w.messages(random_row.id).await?.is_empty());
    assert_eq!(w.stored_bodies(w.a, &random).await?, 0);
    let said_by_bot = |w: &World| {
        w.sim.model(|m| {
            m.channel(&random).map_or(0, |c| {
                c.messages()
                    .filter(|m| m.text.contains("mirrored by forgesync"))
                    .count()
            })
        })
    };
    assert_eq!(said_by_bot(&w), 1);
    let again = w.consent(w.a, &random).await?;
    assert!(again.consent_ts > random_row.consent_ts);
    assert_eq!(said_by_bot(&w), 2, "a new grant, a new announcement");

    // The bot is removed from `general` while events do not reach us: the replay finds out,
    // pauses it, and goes on with `random`; the token is not flagged.
    w.deafen();
    sim(w.sim.model(|m| m.remove_bot(&general)))?;
    let missed = sim(w.sim.model(|m| m.post(&random, &user, "missed by events")))?;
    w.sim.settle().await;
    w.listen();
    let (status, error) = w.reconcile(w.a).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    let general_row = w.until_status(w.a, &general, ChannelStatus::Paused).await?;
    assert!(
        general_row
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("not_in_channel")),
        "{general_row:?}"
    );
    let stored: Vec<String> = w
        .messages(again.id)
        .await?
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert!(
        stored.contains(&missed),
        "the other channel replayed: {stored:?}"
    );
    let refused: Option<time::OffsetDateTime> =
        sqlx::query_scalar("SELECT credentials_refused_at FROM connection WHERE id = $1")
            .bind(w.a.connection_id)
            .fetch_one(&w.pool)
            .await?;
    assert_eq!(refused, None, "losing one channel is not a refused token");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_withdrawal_redelivered_after_its_erasure_failed_erases_the_deliveries() -> Result<()> {
    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let general = w.channels[0].clone();
    let user = w.user.clone();
    let row = w.consent(w.a, &general).await?;
    for i in 0..3 {
        sim(w
            .sim
            .model(|m| m.post(&general, &user, &format!("kept {i}"))))?;
    }
    w.drained().await?;
    assert!(w.stored_bodies(w.a, &general).await? >= 3);

    // The withdrawal committed (the channel NONE, its messages gone) but erasing its stored
    // deliveries after the commit failed: the state a crash or a NATS outage leaves.
    sqlx::query("DELETE FROM slack_message WHERE channel_id = $1")
        .bind(row.id)
        .execute(&w.pool)
        .await?;
    sqlx::query(
        "UPDATE slack_channel SET status = 'none', consent_ts = NULL, reason = 'consent withdrawn' WHERE id = $1",
    )
    .bind(row.id)
    .execute(&w.pool)
    .await?;
    assert!(w.stored_bodies(w.a, &general).await? >= 3);

    // The command is redelivered: the channel's status no longer allows it, and the erasure
    // runs again all the same.
    w.command(w.a, &general, ChannelCommand::Withdraw).await?;
    eventually("the stored deliveries were not erased", || async {
        Ok((w.stored_bodies(w.a, &general).await? == 0).then_some(()))
    })
    .await?;
    Ok(())
}
