//! The fixed consumer `slack-ingest-channels`: operators' channel commands
//! (`lifecycle.slack.<connectionId>.channel`) and connection resumes
//! (`lifecycle.slack.<connectionId>.resumed`). Every status change happens under the channel's
//! lock; the Slack calls of a consent (read the channel, post the announcement) run outside any
//! transaction, and the channel turns ACTIVE only if it is still PENDING when they return.

use bus::consumer::{Delivery, Handler, HandlerError, Settle};
use bus::contracts::LifecycleTransition;
use lifecycle_core::forward::SlackTs;
use lifecycle_core::slack::{ChannelCommand, ChannelStatus};
use lifecycle_core::vendor_error::VendorErrorClass;
use sea_orm::{DatabaseConnection, EntityTrait};
use serde::Deserialize;
use slack_mirror::channel::{self, Channel};
use slack_mirror::command::ChannelCommandMessage;
use slack_mirror::events;
use sqlx::PgPool;
use store::contracts::Incoming;
use store::entity::{ConnectionStatus, connection};
use time::OffsetDateTime;

use crate::erase;
use crate::source::ClientFactory;

/// What the bot posts in a channel when it is consented to: its members are told before
/// anything of it is kept.
pub const ANNOUNCEMENT: &str = "This channel is now mirrored by forgesync: messages from this \
    one on are kept until the channel is paused or its consent withdrawn. Nothing older is read.";

/// A PENDING channel's reason while its announcement is being posted.
const ANNOUNCING: &str = "announcing";

/// A message on the channels consumer.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ChannelWork {
    Command(ChannelCommandMessage),
    Transition(LifecycleTransition),
}

impl Incoming for ChannelWork {
    fn decode(
        subject: &str,
        _header: &dyn Fn(&str) -> Option<String>,
        payload: &[u8],
    ) -> Result<Self, String> {
        serde_json::from_slice(payload).map_err(|e| {
            format!("message on {subject} is not a channel command or transition: {e}")
        })
    }
}

/// Carries out channel commands and connection resumes.
pub struct Channels {
    pub pool: PgPool,
    pub db: DatabaseConnection,
    pub bus: bus::Bus,
    pub factory: ClientFactory,
}

impl Handler for Channels {
    type Message = ChannelWork;

    async fn handle(&self, msg: ChannelWork, _: &Delivery) -> Result<Settle, HandlerError> {
        let result = match msg {
            ChannelWork::Command(cmd) => self.command(&cmd).await,
            ChannelWork::Transition(t) if t.transition == "resumed" => self.resumed(&t).await,
            ChannelWork::Transition(_) => {
                Ok(Settle::Ignored("not a transition slack-ingest acts on"))
            }
        };
        result.map_err(|e| HandlerError::transient(format!("{e:#}")))
    }
}

type Handled = anyhow::Result<Settle>;

impl Channels {
    async fn command(&self, cmd: &ChannelCommandMessage) -> Handled {
        let mut txn = self.pool.begin().await?;
        let Some(ch) = channel::lock_by_id(&mut txn, cmd.connection_id, cmd.channel_id).await?
        else {
            return Ok(Settle::Ignored("no such channel of the connection"));
        };
        let Ok(next) = cmd.command.next(ch.status) else {
            txn.rollback().await?;
            // A redelivered withdrawal whose rows went but whose stored deliveries may not have
            // (erasing them failed after the commit): erase them again, idempotently.
            if cmd.command == ChannelCommand::Withdraw && ch.status == ChannelStatus::None {
                let team = self.team(cmd).await?;
                erase::channel_deliveries(
                    &self.bus,
                    &self.pool,
                    cmd.connection_id,
                    &team,
                    &ch.slack_id,
                )
                .await?;
            }
            // Checked when it was asked; the channel moved since (or this is a redelivery of a
            // command that took effect).
            return Ok(Settle::Unchanged(
                "the command does not apply to the channel's status now",
            ));
        };
        let now = OffsetDateTime::now_utc();
        match cmd.command {
            ChannelCommand::Consent => {
                // A consent redelivered while its announcement was under way (the answer to the
                // post lost, or we stopped before recording it) keeps the time it started: only
                // what the bot posted since then can be this consent's announcement.
                let since = if ch.status == ChannelStatus::Pending
                    && ch.reason.as_deref() == Some(ANNOUNCING)
                {
                    Some(ch.status_at)
                } else {
                    channel::set_status(&mut txn, ch.id, next, Some(ANNOUNCING), None).await?;
                    None
                };
                txn.commit().await?;
                return self.announce(cmd, &ch, since).await;
            }
            ChannelCommand::Pause => {
                let reason = format!("paused by {}", cmd.actor);
                channel::pause(&mut txn, ch.id, &reason, SlackTs::at(now)).await?;
                events::channel(&mut txn, &ch, events::PAUSED, now, None).await?;
            }
            ChannelCommand::Resume => {
                // The gap is never fetched: consent restarts now.
                let consent = SlackTs::at(now);
                channel::set_status(&mut txn, ch.id, next, None, consent).await?;
                events::channel(&mut txn, &ch, events::RESUMED, now, consent).await?;
            }
            ChannelCommand::Withdraw => {
                let erased = channel::erase_messages(&mut txn, ch.id).await?;
                channel::set_status(&mut txn, ch.id, next, Some("consent withdrawn"), None).await?;
                events::channel(&mut txn, &ch, events::ERASED, now, None).await?;
                txn.commit().await?;
                let team = self.team(cmd).await?;
                let deliveries = erase::channel_deliveries(
                    &self.bus,
                    &self.pool,
                    cmd.connection_id,
                    &team,
                    &ch.slack_id,
                )
                .await?;
                tracing::info!(channel_id = %ch.id, messages = erased, deliveries, "Slack consent withdrawn; the channel's copy erased");
                return Ok(Settle::Applied("consent withdrawn"));
            }
        }
        txn.commit().await?;
        Ok(Settle::Applied("channel command applied"))
    }

    async fn team(&self, cmd: &ChannelCommandMessage) -> anyhow::Result<String> {
        let conn = connection::Entity::find_by_id(cmd.connection_id)
            .one(&self.db)
            .await?
            .ok_or_else(|| anyhow::anyhow!("the connection is gone"))?;
        Ok(slack_mirror::Settings::from_settings(&conn.settings)
            .map_err(|e| anyhow::anyhow!(e))?
            .team_id)
    }

    /// Reads the channel and, if the bot is in it and it is not archived, posts the
    /// announcement (or adopts the one an earlier attempt of this consent posted); its ts
    /// becomes the consent. Otherwise the channel stays PENDING with why.
    async fn announce(
        &self,
        cmd: &ChannelCommandMessage,
        ch: &Channel,
        since: Option<OffsetDateTime>,
    ) -> Handled {
        let Some(conn) = connection::Entity::find_by_id(cmd.connection_id)
            .one(&self.db)
            .await?
        else {
            return Ok(Settle::Ignored("the connection is gone"));
        };
        if conn.status != ConnectionStatus::Active {
            self.pending(ch, "the connection is not active").await?;
            return Ok(Settle::Applied("consent pending"));
        }
        let source = match self.factory.source(&conn).await {
            Ok(source) => source,
            Err(e) => {
                self.pending(
                    ch,
                    &format!("cannot reach Slack with this connection: {e:#}"),
                )
                .await?;
                return Ok(Settle::Applied("consent pending"));
            }
        };
        let info = match source.client.conversations_info(&ch.slack_id).await {
            Ok(info) => info,
            Err(e) if transient(e.class()) => anyhow::bail!("conversations.info: {e}"),
            Err(e) => {
                self.pending(ch, &format!("Slack refused to show the channel: {e}"))
                    .await?;
                return Ok(Settle::Applied("consent pending"));
            }
        };
        let blocked = if info.is_archived {
            Some("the channel is archived")
        } else if !info.is_member {
            Some("the bot is not in the channel; invite it, then consent again")
        } else {
            None
        };
        if let Some(reason) = blocked {
            self.pending(ch, reason).await?;
            return Ok(Settle::Applied("consent pending"));
        }
        // Members are told once: when an earlier attempt of this consent may have posted, its
        // announcement is looked for and adopted.
        let earlier = match since {
            None => Ok(None),
            Some(since) => self.posted_since(&source, ch, since).await,
        };
        let earlier = match earlier {
            Ok(found) => found,
            Err(e) if transient(e.class()) => anyhow::bail!("looking for the announcement: {e}"),
            Err(e) => {
                self.pending(
                    ch,
                    &format!("Slack refused to show the channel's history: {e}"),
                )
                .await?;
                return Ok(Settle::Applied("consent pending"));
            }
        };
        let posted = match earlier {
            Some(ts) => ts,
            None => match source
                .client
                .chat_post_message(&ch.slack_id, ANNOUNCEMENT)
                .await
            {
                Ok(ts) => ts,
                Err(e) if transient(e.class()) => anyhow::bail!("chat.postMessage: {e}"),
                Err(e) => {
                    self.pending(ch, &format!("Slack refused the announcement: {e}"))
                        .await?;
                    return Ok(Settle::Applied("consent pending"));
                }
            },
        };
        let Ok(consent) = posted.parse::<SlackTs>() else {
            self.pending(
                ch,
                &format!("Slack answered the announcement with ts {posted:?}"),
            )
            .await?;
            return Ok(Settle::Applied("consent pending"));
        };
        let mut txn = self.pool.begin().await?;
        let Some(now) = channel::lock_by_id(&mut txn, ch.connection_id, ch.id).await? else {
            return Ok(Settle::Ignored("the channel was deleted meanwhile"));
        };
        if now.status != ChannelStatus::Pending {
            // Withdrawn or deleted while we announced: the announcement stands, nothing is kept.
            return Ok(Settle::Unchanged(
                "the channel left PENDING while it was announced",
            ));
        }
        channel::set_status(&mut txn, ch.id, ChannelStatus::Active, None, Some(consent)).await?;
        events::channel(
            &mut txn,
            &now,
            events::ACTIVATED,
            consent.time(),
            Some(consent),
        )
        .await?;
        txn.commit().await?;
        Ok(Settle::Applied("channel consented and announced"))
    }

    /// The ts of the bot's announcement in the channel at or after `since`, if an earlier
    /// attempt of this consent posted it. Nothing earlier counts: an announcement from before
    /// `since` told the members of an earlier consent (a withdrawal came between). A clock
    /// skew that puts ours ahead of Slack's can only miss it (the members are told twice),
    /// never adopt another consent's.
    async fn posted_since(
        &self,
        source: &crate::source::SlackSource,
        ch: &Channel,
        since: OffsetDateTime,
    ) -> Result<Option<String>, slack_client::SlackError> {
        let Some(oldest) = SlackTs::at(since) else {
            return Ok(None);
        };
        let bot = source.client.auth_test().await?;
        let oldest = oldest.to_string();
        let mut cursor: Option<String> = None;
        loop {
            let page = source
                .client
                .conversations_history(&slack_client::HistoryQuery {
                    channel: &ch.slack_id,
                    oldest: Some(&oldest),
                    latest: None,
                    inclusive: true,
                    cursor: cursor.as_deref(),
                    limit: 200,
                })
                .await?;
            let ours = page.items.iter().find(|m| {
                m.user.as_deref() == Some(bot.user_id.as_str())
                    && m.text.as_deref() == Some(ANNOUNCEMENT)
            });
            if let Some(m) = ours {
                return Ok(Some(m.ts.clone()));
            }
            match (page.has_more, page.next_cursor) {
                (true, Some(next)) => cursor = Some(next),
                _ => return Ok(None),
            }
        }
    }

    async fn pending(&self, ch: &Channel, reason: &str) -> Result<(), sqlx::Error> {
        let mut txn = self.pool.begin().await?;
        if let Some(now) = channel::lock_by_id(&mut txn, ch.connection_id, ch.id).await?
            && now.status == ChannelStatus::Pending
        {
            channel::set_reason(&mut txn, ch.id, Some(reason)).await?;
        }
        txn.commit().await
    }

    /// A connection resumed after a suspension: its ACTIVE channels' consent restarts now, so
    /// nothing from the suspension is kept (its late events are dropped and erased).
    async fn resumed(&self, t: &LifecycleTransition) -> Handled {
        // The transition's own instant, so a redelivery moves nothing further.
        let now = OffsetDateTime::parse(&t.at, &time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|_| OffsetDateTime::now_utc());
        let Some(at) = SlackTs::at(now) else {
            anyhow::bail!("the clock is before 1970");
        };
        let mut txn = self.pool.begin().await?;
        let moved = channel::restart_consent(&mut txn, t.connection_id, at).await?;
        for ch in &moved {
            events::channel(&mut txn, ch, events::RESUMED, now, ch.consent_ts).await?;
        }
        txn.commit().await?;
        Ok(if moved.is_empty() {
            Settle::Unchanged("no active channel")
        } else {
            Settle::Applied("active channels' consent restarted")
        })
    }
}

/// Whether a failed call may succeed if retried (the command is redelivered).
fn transient(class: VendorErrorClass) -> bool {
    matches!(
        class,
        VendorErrorClass::RateLimited
            | VendorErrorClass::SecondaryRateLimit
            | VendorErrorClass::ServerError
            | VendorErrorClass::Timeout
            | VendorErrorClass::Unreachable
    )
}
