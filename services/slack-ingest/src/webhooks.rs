//! Events API deliveries, on the fixed consumer `slack-ingest-events` (every `slack.>` subject).
//! A message is kept only when the delivering connection's team sent it and the channel's
//! consent covers its ts, decided under the channel's lock (`slack_mirror::admission`); a
//! message consent does not cover is erased with every copy of its delivery and counted in
//! `slack_messages_dropped_total{reason}`. Channel events rename, pause or erase the channel.
//!
//! A delivery signed with a secret a tenant chose (a workspace's own Slack app on a
//! token-addressed endpoint) is a claim, never a fact: nothing of it is written. A message it
//! names is read from Slack with the connection's token and what Slack shows goes through the
//! same admission and forward-only write (`sync_engine::webhook::hint`); a deletion or channel
//! change it claims cannot be confirmed by a read (absence deletes nothing) and is left to the
//! app's own deliveries and to replays. A hint's stored delivery is erased either way.

use lifecycle_core::forward::{SlackTs, TimeBound};
use lifecycle_core::slack::{ChannelStatus, MessageKind, message_kind};
use sea_orm::EntityTrait;
use serde_json::Value;
use slack_mirror::admission::{self, ChannelEvent, Message};
use slack_mirror::channel::{self, Seen};
use slack_mirror::events;
use slack_mirror::message::{self, FileRef, Incoming};
use slack_morphism::prelude::{SlackEventCallbackBody, SlackMessageEvent, SlackPushEvent};
use sqlx::PgPool;
use store::admission::Refusal;
use store::entity::ConnectionKind;
use store::entity::connection;
use sync_engine::webhook::hint::{self, Confirmation};
use sync_engine::webhook::{Outcome, Webhook, WebhookApply, WebhookError};
use time::OffsetDateTime;

use crate::erase;
use crate::source::ClientFactory;

/// What a channel event does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelChange {
    /// `channel_created`: a new channel in the directory (NONE).
    Created { name: Option<String>, private: bool },
    /// `channel_rename`, `group_rename`.
    Renamed(String),
    /// `channel_archive`, `channel_left`, `group_archive`, `group_left`, `group_close`: paused
    /// with the reason.
    Paused(&'static str),
    /// `channel_deleted`, `group_deleted`: our copy erased.
    Deleted,
}

/// A decoded delivery.
#[derive(Debug)]
pub enum Payload {
    /// A `message` event: `ts` is the message's own (the edited or deleted one for a change).
    Message {
        team: String,
        channel: String,
        ts: String,
        kind: MessageKind,
        message: Box<Incoming>,
    },
    Channel {
        team: String,
        channel: String,
        change: ChannelChange,
    },
}

/// A message admitted under its channel's consent: the transaction holding the channel's lock.
struct Admitted {
    txn: sqlx::Transaction<'static, sqlx::Postgres>,
    locked: channel::Channel,
    ts: SlackTs,
}

/// Slack's webhook side.
pub struct SlackWebhooks {
    pub pool: PgPool,
    pub bus: bus::Bus,
    pub clock_skew: std::time::Duration,
    /// Reads what a hint names, with the delivering connection's token.
    pub factory: ClientFactory,
    /// Confirming reads of hints, coalesced per message.
    pub confirmations: hint::Confirmations,
}

fn invalid(e: impl std::fmt::Display) -> WebhookError {
    WebhookError::Invalid(format!("malformed Slack event: {e}"))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// A message event as the mirror stores it.
fn from_event(m: &SlackMessageEvent) -> (Option<String>, Incoming) {
    let ts = |t: Option<&slack_morphism::prelude::SlackTs>| t.and_then(|t| t.0.parse().ok());
    let files = |content: Option<&slack_morphism::prelude::SlackMessageContent>| {
        content
            .and_then(|c| c.files.as_ref())
            .map(|files| {
                files
                    .iter()
                    .map(|f| FileRef {
                        id: f.id.0.clone(),
                        name: f.name.clone(),
                        mimetype: f.mimetype.as_ref().map(|m| m.0.clone()),
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let subtype = m
        .subtype
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .and_then(|v| v.as_str().map(str::to_owned));
    match message_kind(subtype.as_deref()) {
        MessageKind::Changed => {
            let Some(edited) = &m.message else {
                return (None, Incoming::default());
            };
            let incoming = Incoming {
                thread_ts: None,
                user: edited.sender.user.as_ref().map(|u| u.0.clone()),
                subtype: None,
                text: edited.content.as_ref().and_then(|c| c.text.clone()),
                files: files(edited.content.as_ref()),
                edited_ts: ts(edited.edited.as_ref().map(|e| &e.ts)),
                latest_reply: None,
            };
            (Some(edited.ts.0.clone()), incoming)
        }
        MessageKind::Deleted => (
            m.deleted_ts.as_ref().map(|t| t.0.clone()),
            Incoming::default(),
        ),
        MessageKind::Kept | MessageKind::Other => {
            let incoming = Incoming {
                thread_ts: ts(m.origin.thread_ts.as_ref()),
                user: m.sender.user.as_ref().map(|u| u.0.clone()),
                subtype,
                text: m.content.as_ref().and_then(|c| c.text.clone()),
                files: files(m.content.as_ref()),
                edited_ts: None,
                latest_reply: None,
            };
            (Some(m.origin.ts.0.clone()), incoming)
        }
    }
}

/// A channel event's change, from its raw JSON (private channels' `group_*` events are not in
/// slack-morphism's model; its channel events are read the same way for one path).
fn channel_change(event_type: &str, event: &Value) -> Option<(String, ChannelChange)> {
    let id = str_at(event, "/channel/id")
        .or_else(|| str_at(event, "/channel"))?
        .to_owned();
    let change = match event_type {
        "channel_created" => ChannelChange::Created {
            name: str_at(event, "/channel/name").map(str::to_owned),
            private: false,
        },
        "channel_rename" | "group_rename" => {
            ChannelChange::Renamed(str_at(event, "/channel/name")?.to_owned())
        }
        "channel_archive" | "group_archive" => ChannelChange::Paused("the channel was archived"),
        "channel_left" | "group_left" | "group_close" => {
            ChannelChange::Paused("the bot was removed from the channel")
        }
        "channel_deleted" | "group_deleted" => ChannelChange::Deleted,
        _ => return None,
    };
    Some((id, change))
}

impl WebhookApply for SlackWebhooks {
    const KIND: ConnectionKind = ConnectionKind::Slack;
    type Payload = Payload;

    fn decode(&self, hook: &Webhook<'_>) -> Result<Option<Payload>, WebhookError> {
        let raw: Value = serde_json::from_slice(hook.body).map_err(invalid)?;
        let team = str_at(&raw, "/team_id")
            .ok_or_else(|| invalid("no team_id"))?
            .to_owned();
        let event_type = str_at(&raw, "/event/type").unwrap_or_default();
        let event = raw.get("event").cloned().unwrap_or(Value::Null);
        if event_type != "message" {
            return Ok(channel_change(event_type, &event).map(|(channel, change)| {
                Payload::Channel {
                    team,
                    channel,
                    change,
                }
            }));
        }
        let channel = str_at(&event, "/channel")
            .ok_or_else(|| invalid("a message event without its channel"))?
            .to_owned();
        let typed = match serde_json::from_value::<SlackPushEvent>(raw.clone()) {
            Ok(SlackPushEvent::EventCallback(cb)) => match cb.event {
                SlackEventCallbackBody::Message(m) => Some(m),
                _ => None,
            },
            _ => None,
        };
        let (ts, kind, message) = match typed {
            Some(m) => {
                let (ts, incoming) = from_event(&m);
                let kind = match message_kind(incoming.subtype.as_deref().or(
                    // A change or deletion names its subtype only on the event.
                    str_at(&event, "/subtype"),
                )) {
                    // A thread's root deleted while its replies stay becomes a tombstone.
                    MessageKind::Changed
                        if str_at(&event, "/message/subtype") == Some("tombstone") =>
                    {
                        MessageKind::Deleted
                    }
                    kind => kind,
                };
                (ts, kind, incoming)
            }
            // A subtype outside slack-morphism's model (or a shape it refuses): kept nowhere,
            // but still under consent (its delivery is erased if consent does not cover it).
            None => (
                str_at(&event, "/ts").map(str::to_owned),
                MessageKind::Other,
                Incoming::default(),
            ),
        };
        let ts = ts.ok_or_else(|| invalid("a message event without the message's ts"))?;
        Ok(Some(Payload::Message {
            team,
            channel,
            ts,
            kind,
            message: Box::new(message),
        }))
    }

    async fn apply(&self, hook: &Webhook<'_>, payload: Payload) -> Result<Outcome, WebhookError> {
        if hook.is_hint() {
            let outcome = self.confirm(hook, payload).await;
            // What a tenant claimed is never kept, whatever Slack confirmed of it; a hint
            // handed back to be tried again keeps its body until then.
            if matches!(
                outcome,
                Ok(_) | Err(WebhookError::OutOfScope(_) | WebhookError::Invalid(_))
            ) {
                hook.erase().await?;
            }
            return outcome;
        }
        match payload {
            Payload::Message {
                team,
                channel,
                ts,
                kind,
                message,
            } => {
                self.message(hook, &team, &channel, &ts, kind, &message)
                    .await
            }
            Payload::Channel {
                team,
                channel,
                change,
            } => self.channel(hook, &team, &channel, change).await,
        }
    }
}

impl SlackWebhooks {
    /// A hint: the message it names as Slack shows it, written as a delivery from Slack would
    /// be; anything else it claims is unconfirmed.
    async fn confirm(&self, hook: &Webhook<'_>, payload: Payload) -> Result<Outcome, WebhookError> {
        let Payload::Message {
            team,
            channel,
            ts,
            kind: MessageKind::Kept | MessageKind::Changed,
            message,
        } = payload
        else {
            return hint::unconfirmed(
                &self.pool,
                hook,
                "Slack",
                "only a message can be confirmed by a read; a deletion or a channel change \
                 claimed by a tenant's own signature is left to the Slack app's deliveries",
            )
            .await;
        };
        // What needs no read is checked first: the ts, the team, the channel's consent. Nothing
        // is held while Slack is read; the write admits again.
        match self.admit_message(hook, &team, &channel, &ts).await? {
            Ok(admitted) => admitted.txn.rollback().await?,
            Err(outcome) => return Ok(outcome),
        }
        let key = format!("{}:{channel}:{ts}", hook.connection_id);
        self.confirmations
            .confirm(&self.pool, hook, key, || async {
                let shown = match self.read_message(hook, &channel, &ts, &message).await {
                    Ok(Some(shown)) => shown,
                    Ok(None) => {
                        return Ok(Confirmation::Unconfirmed(format!(
                            "Slack shows no message {ts} in {channel}"
                        )));
                    }
                    Err(reason) => return Ok(Confirmation::Unconfirmed(reason)),
                };
                let kind = message_kind(shown.subtype.as_deref());
                let incoming = crate::sync::incoming(&shown);
                let outcome = self
                    .message(hook, &team, &channel, &shown.ts, kind, &incoming)
                    .await?;
                Ok(Confirmation::Written(outcome))
            })
            .await
    }

    /// Message `ts` of `channel` as Slack shows it now (`None`: not shown), read with the
    /// delivering connection's token; a failed read is its reason.
    async fn read_message(
        &self,
        hook: &Webhook<'_>,
        channel: &str,
        ts: &str,
        claimed: &Incoming,
    ) -> Result<Option<slack_client::Message>, String> {
        let conn = connection::Entity::find_by_id(hook.connection_id)
            .one(&self.factory.db)
            .await
            .map_err(|e| format!("loading the connection: {e}"))?
            .ok_or_else(|| "the connection is gone".to_owned())?;
        let source = self
            .factory
            .source(&conn)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let page = source
            .client
            .conversations_history(&slack_client::HistoryQuery {
                channel,
                oldest: Some(ts),
                latest: Some(ts),
                inclusive: true,
                cursor: None,
                limit: 1,
            })
            .await
            .map_err(|e| e.to_string())?;
        if let Some(m) = page.items.into_iter().find(|m| m.ts == ts) {
            return Ok(Some(m));
        }
        // A reply is shown only in its thread.
        let Some(thread) = claimed.thread_ts.map(|t| t.to_string()) else {
            return Ok(None);
        };
        let page = source
            .client
            .conversations_replies(&slack_client::RepliesQuery {
                channel,
                ts: &thread,
                oldest: Some(ts),
                cursor: None,
                limit: 2,
            })
            .await
            .map_err(|e| e.to_string())?;
        Ok(page.items.into_iter().find(|m| m.ts == ts))
    }

    /// Erases every stored delivery of the channel (its raw bodies and stream copies).
    async fn erase_deliveries(
        &self,
        hook: &Webhook<'_>,
        team: &str,
        slack_id: &str,
    ) -> Result<(), WebhookError> {
        erase::channel_deliveries(&self.bus, &self.pool, hook.connection_id, team, slack_id)
            .await
            .map(|_| ())
            .map_err(|e| {
                WebhookError::Unavailable(format!("erasing the channel's deliveries: {e:#}"))
            })
    }

    /// Refuses a message that cannot be placed under consent: its delivery is erased, the
    /// reason counted and recorded.
    async fn refuse(
        &self,
        hook: &Webhook<'_>,
        channel: &str,
        reason: &'static str,
        detail: String,
    ) -> Result<Outcome, WebhookError> {
        hook.erase().await?;
        crate::metrics::dropped(reason);
        store::activity::record_for_connection(
            &self.pool,
            hook.connection_id,
            "slack_event_refused",
            serde_json::json!({"channel": channel, "reason": reason, "detail": detail}),
        )
        .await?;
        Ok(Outcome::Refused)
    }

    /// Checks a message's ts and admits it under its channel's consent: the transaction that
    /// holds the locked channel, or the outcome of a refusal (recorded, its delivery erased).
    async fn admit_message(
        &self,
        hook: &Webhook<'_>,
        team: &str,
        channel_id: &str,
        ts: &str,
    ) -> Result<Result<Admitted, Outcome>, WebhookError> {
        let Ok(ts) = ts.parse::<SlackTs>() else {
            return self
                .refuse(hook, channel_id, "malformed_ts", format!("ts {ts:?}"))
                .await
                .map(Err);
        };
        let bound = TimeBound::after(hook.received_at, self.clock_skew);
        if let Err(future) = bound.check(ts.time()) {
            return self
                .refuse(hook, channel_id, "future_ts", future.to_string())
                .await
                .map(Err);
        }
        let mut txn = self.pool.begin().await?;
        let mut locked = None;
        let admitted = hook
            .admit(
                &mut txn,
                Message {
                    team,
                    channel: channel_id,
                    ts,
                    locked: &mut locked,
                },
            )
            .await;
        if let Err(WebhookError::OutOfScope(refusal)) = &admitted {
            // Consent does not cover it: nothing of it may stay, its stored copies included.
            txn.rollback().await?;
            hook.erase().await?;
            let reason = admission::drop_of(refusal).unwrap_or(refusal.as_str());
            crate::metrics::dropped(reason);
            if matches!(refusal, Refusal::Vendor(v) if v.label != admission::OTHER_TEAM.label) {
                channel::count_drop(&self.pool, hook.connection_id, channel_id).await?;
            } else if matches!(refusal, Refusal::Vendor(_)) {
                // Another team's event on this connection's endpoint: a setup to look at.
                store::activity::record_for_connection(
                    &self.pool,
                    hook.connection_id,
                    "slack_event_refused",
                    serde_json::json!({"team": team, "channel": channel_id, "reason": reason}),
                )
                .await?;
            }
            return Err(WebhookError::OutOfScope(*refusal));
        }
        admitted?;
        // Admission locked the channel row; the transaction holds it until the write commits.
        Ok(match locked {
            Some(locked) => Ok(Admitted { txn, locked, ts }),
            None => Err(Outcome::Unchanged),
        })
    }

    async fn message(
        &self,
        hook: &Webhook<'_>,
        team: &str,
        channel_id: &str,
        ts: &str,
        kind: MessageKind,
        m: &Incoming,
    ) -> Result<Outcome, WebhookError> {
        let Admitted {
            mut txn,
            locked,
            ts,
        } = match self.admit_message(hook, team, channel_id, ts).await? {
            Ok(admitted) => admitted,
            Err(outcome) => return Ok(outcome),
        };
        let written = match kind {
            MessageKind::Kept => message::put(&mut txn, &locked, ts, m).await?,
            // A change without a later edited.ts (a reply count, an unfurl) changes nothing.
            MessageKind::Changed if m.edited_ts.is_none() => return Ok(Outcome::Unchanged),
            MessageKind::Changed => message::put(&mut txn, &locked, ts, m).await?,
            MessageKind::Deleted => {
                message::tombstone(&mut txn, &locked, ts, hook.received_at).await?
            }
            MessageKind::Other => {
                crate::metrics::other(m.subtype.as_deref());
                return Ok(Outcome::Ignored);
            }
        };
        let changed = crate::record_written(&mut txn, &locked, ts, written, m.edited_ts).await?;
        txn.commit().await?;
        Ok(Outcome::of_change(changed))
    }

    async fn channel(
        &self,
        hook: &Webhook<'_>,
        team: &str,
        slack_id: &str,
        change: ChannelChange,
    ) -> Result<Outcome, WebhookError> {
        let mut txn = self.pool.begin().await?;
        let admitted = hook.admit(&mut txn, ChannelEvent { team }).await?;
        if let ChannelChange::Created { name, private } = &change {
            let (_, new) = channel::upsert_seen(
                &mut txn,
                hook.connection_id,
                admitted.workspace_id,
                &Seen {
                    slack_id,
                    name: name.as_deref(),
                    is_private: *private,
                },
            )
            .await?;
            txn.commit().await?;
            return Ok(Outcome::of_change(new));
        }
        let Some(locked) = channel::lock(&mut txn, hook.connection_id, slack_id).await? else {
            txn.rollback().await?;
            // Not in the directory (or already erased: a redelivery after the erasure of the
            // stored copies failed), so nothing else of it is kept.
            if change == ChannelChange::Deleted {
                self.erase_deliveries(hook, team, slack_id).await?;
            }
            return Ok(Outcome::Unchanged);
        };
        let now = OffsetDateTime::now_utc();
        let outcome = match change {
            ChannelChange::Created { .. } => Outcome::Unchanged,
            ChannelChange::Renamed(name) => {
                let changed = locked.name.as_deref() != Some(name.as_str());
                channel::rename(&mut txn, hook.connection_id, slack_id, &name).await?;
                Outcome::of_change(changed)
            }
            ChannelChange::Paused(reason) => match locked.status {
                ChannelStatus::Active => {
                    // Paused as of the event's receipt: what was said before it is still kept.
                    channel::pause(&mut txn, locked.id, reason, SlackTs::at(hook.received_at))
                        .await?;
                    events::channel(&mut txn, &locked, events::PAUSED, now, None).await?;
                    Outcome::Applied
                }
                ChannelStatus::Pending => {
                    channel::set_reason(&mut txn, locked.id, Some(reason)).await?;
                    Outcome::Applied
                }
                ChannelStatus::None | ChannelStatus::Paused => Outcome::Unchanged,
            },
            ChannelChange::Deleted => {
                let erased = channel::delete(&mut txn, locked.id).await?;
                events::channel(&mut txn, &locked, events::ERASED, now, None).await?;
                txn.commit().await?;
                tracing::info!(connection_id = %hook.connection_id, channel = slack_id, messages = erased, "Slack channel deleted; our copy erased");
                self.erase_deliveries(hook, team, slack_id).await?;
                return Ok(Outcome::Applied);
            }
        };
        txn.commit().await?;
        Ok(outcome)
    }
}
