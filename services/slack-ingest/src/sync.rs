//! Slack as the sync engine's vendor. Slack never sweeps and runs no INITIAL: a RECONCILIATION
//! replays each ACTIVE channel's history from max(`consent_ts`, now - lookback) (a
//! `ListingPlan::Filtered` listing), adding what webhooks missed and applying later edits, then
//! reads the threads whose newest reply it has not read. Absence deletes nothing: a message
//! missing from a page is truncated paging, a filtered subtype or a reply, never a deletion.
//! Activation checks the token's team and records the directory of channels.

use std::collections::BTreeMap;
use std::time::Duration;

use lifecycle_core::forward::SlackTs;
use lifecycle_core::listing::{ListingPage, TotalCount};
use lifecycle_core::slack::{ChannelStatus, MessageKind, admit_message, message_kind};
use slack_client::{HistoryQuery, RepliesQuery};
use slack_mirror::channel::{self, Channel};
use slack_mirror::events;
use slack_mirror::message::{self, Incoming};
use sqlx::PgPool;
use store::entity::{ConnectionKind, connection};
use sync_engine::{
    JobControl, Listed, ListingEnd, ListingPlan, Moment, PageCheck, Pass, Scopes, Vendor,
};
use time::OffsetDateTime;

use crate::directory;
use crate::source::{ClientFactory, ReadFailure, SlackSource};

/// The one class a channel holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Messages;

/// A page of a channel's history as read.
#[derive(Debug)]
pub struct HistoryPage {
    pub messages: Vec<slack_client::Message>,
    pub next_cursor: Option<String>,
    pub has_more: bool,
    /// When we asked (our clock): the bound of the ts it may carry.
    pub read_at: OffsetDateTime,
}

impl Listed<SlackTs> for HistoryPage {
    fn listing(&self) -> ListingPage<SlackTs> {
        ListingPage {
            ids: self
                .messages
                .iter()
                .filter_map(|m| m.ts.parse().ok())
                .collect(),
            has_next_page: self.has_more,
            end_cursor: self.next_cursor.clone(),
            total_count: None,
        }
    }

    fn errored(&self) -> bool {
        false
    }
}

/// A message as the mirror stores it.
pub fn incoming(m: &slack_client::Message) -> Incoming {
    let ts = |t: &Option<String>| t.as_deref().and_then(|t| t.parse().ok());
    Incoming {
        thread_ts: ts(&m.thread_ts),
        user: m.user.clone(),
        subtype: m.subtype.clone(),
        text: m.text.clone(),
        files: m
            .files
            .iter()
            .map(|f| message::FileRef {
                id: f.id.clone(),
                name: f.name.clone(),
                mimetype: f.mimetype.clone(),
            })
            .collect(),
        edited_ts: ts(&m.edited_ts),
        latest_reply: ts(&m.latest_reply),
    }
}

/// How replays run.
#[derive(Debug, Clone, Copy)]
pub struct Replay {
    /// How far back a replay reads, at most (never before a channel's consent).
    pub lookback: Duration,
}

impl Replay {
    /// Where a replay of `channel` starts: its consent, or the lookback if later.
    pub fn horizon(&self, channel: &Channel, now: OffsetDateTime) -> Option<SlackTs> {
        let consent = channel.consent_ts?;
        let lookback = SlackTs::at(now - self.lookback);
        Some(lookback.map_or(consent, |l| l.max(consent)))
    }
}

/// Slack's sync.
pub struct SlackVendor {
    pub pool: PgPool,
    pub factory: ClientFactory,
    pub replay: Replay,
    /// Messages written per page of a thread's replies.
    pub page_size: u16,
}

/// What writing a page did.
#[derive(Debug, Default)]
struct Written {
    /// Messages that changed the mirror.
    changed: u64,
    /// Messages of subtypes the mirror does not keep (joins, topics, ...), by subtype: read,
    /// and on purpose not stored.
    not_kept: BTreeMap<&'static str, u64>,
}

impl Written {
    /// Records, on the pass, the messages a page held that the mirror does not keep, so a
    /// replay that stored less than it read says why.
    async fn record(
        self,
        pass: &Pass<'_>,
        pool: &PgPool,
        scope: &Channel,
    ) -> Result<u64, sqlx::Error> {
        if !self.not_kept.is_empty() {
            pass.job
                .record_activity(
                    pool,
                    "slack_replay_not_kept",
                    serde_json::json!({
                        "channel_id": scope.id,
                        "slack_id": scope.slack_id,
                        "subtypes": self.not_kept,
                    }),
                )
                .await?;
        }
        Ok(self.changed)
    }
}

/// Writes admitted messages of a page into a channel, under its lock. Nothing is written once
/// the channel is no longer ACTIVE.
async fn write_messages(
    pool: &PgPool,
    scope: &Channel,
    horizon: SlackTs,
    bound: lifecycle_core::forward::TimeBound,
    messages: &[slack_client::Message],
    skip: Option<SlackTs>,
    read_at: OffsetDateTime,
) -> Result<Written, sqlx::Error> {
    let mut txn = pool.begin().await?;
    let Some(locked) = channel::lock(&mut txn, scope.connection_id, &scope.slack_id).await? else {
        return Ok(Written::default());
    };
    let mut written = Written::default();
    for m in messages {
        let Ok(ts) = m.ts.parse::<SlackTs>() else {
            crate::metrics::dropped("malformed_ts");
            continue;
        };
        if Some(ts) == skip || ts < horizon {
            continue;
        }
        if bound.check(ts.time()).is_err() {
            crate::metrics::dropped("future_ts");
            continue;
        }
        // Consent is checked per message, on the locked row.
        if let Err(drop) = admit_message(locked.status, locked.consent_ts, locked.paused_ts, ts) {
            crate::metrics::dropped(drop.as_str());
            continue;
        }
        let put = match message_kind(m.subtype.as_deref()) {
            MessageKind::Kept => message::put(&mut txn, &locked, ts, &incoming(m)).await?,
            // A thread's root Slack keeps as a tombstone: deleted, said explicitly.
            MessageKind::Deleted => message::tombstone(&mut txn, &locked, ts, read_at).await?,
            MessageKind::Changed | MessageKind::Other => {
                let subtype = crate::metrics::other(m.subtype.as_deref());
                *written.not_kept.entry(subtype).or_default() += 1;
                continue;
            }
        };
        if crate::record_written(&mut txn, &locked, ts, put, incoming(m).edited_ts).await? {
            written.changed += 1;
        }
    }
    txn.commit().await?;
    Ok(written)
}

#[async_trait::async_trait]
impl Vendor for SlackVendor {
    const KIND: ConnectionKind = ConnectionKind::Slack;
    const SCOPES: &'static str = "channels";
    const CLASSES: &'static [Messages] = &[Messages];
    // Deletions reach Slack's mirror only as events.
    const SWEEPS: bool = false;
    // Nothing is read at connect: each channel is ingested from its own consent.
    const ON_ACTIVATION: &'static [lifecycle_core::job::SyncJobType] = &[];

    type Source = SlackSource;
    type Scope = Channel;
    type Class = Messages;
    type Id = SlackTs;
    type Page = HistoryPage;
    type Error = ReadFailure;

    fn class_name(_: Messages) -> &'static str {
        "message"
    }

    fn total_count(_: Messages) -> TotalCount {
        TotalCount::NotOffered
    }

    async fn source(&self, conn: &connection::Model) -> anyhow::Result<SlackSource> {
        self.factory.source(conn).await
    }

    async fn scopes(
        &self,
        pass: &Pass<'_>,
        _source: &SlackSource,
    ) -> Result<Result<Scopes<Channel>, ReadFailure>, sqlx::Error> {
        let scopes = channel::active(&self.pool, pass.job.connection_id).await?;
        Ok(Ok(Scopes {
            scopes,
            unresolved: None,
        }))
    }

    async fn plan_listing(
        &self,
        _pass: &Pass<'_>,
        scope: &mut Channel,
        _class: Messages,
        _cooling: bool,
    ) -> Result<ListingPlan, sqlx::Error> {
        // Never a whole listing: a replay reads only what consent covers, and infers nothing.
        Ok(if scope.consent_ts.is_some() {
            ListingPlan::Filtered
        } else {
            ListingPlan::Skip
        })
    }

    async fn read_page(
        &self,
        source: &SlackSource,
        scope: &Channel,
        _class: Messages,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<HistoryPage, ReadFailure> {
        let read_at = OffsetDateTime::now_utc();
        let Some(horizon) = self.replay.horizon(scope, read_at) else {
            return Err(ReadFailure::Anomaly(
                "the channel has no consent time".into(),
            ));
        };
        source.spend()?;
        let oldest = horizon.to_string();
        let page = source
            .client
            .conversations_history(&HistoryQuery {
                channel: &scope.slack_id,
                oldest: Some(&oldest),
                latest: None,
                inclusive: true,
                cursor: after,
                limit: page_size.clamp(1, 1000) as u16,
            })
            .await?;
        Ok(HistoryPage {
            messages: page.items,
            next_cursor: page.next_cursor,
            has_more: page.has_more,
            read_at,
        })
    }

    async fn check_page(
        &self,
        _pass: &Pass<'_>,
        scope: &mut Channel,
        _page: &HistoryPage,
    ) -> Result<PageCheck, sqlx::Error> {
        // Paused or withdrawn mid-replay: nothing more of it is written.
        let now = sqlx::query_as::<_, (String,)>("SELECT status FROM slack_channel WHERE id = $1")
            .bind(scope.id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match now {
            Some((status,)) if status == ChannelStatus::Active.as_str() => PageCheck::Write,
            _ => PageCheck::SkipScope,
        })
    }

    async fn write_page(
        &self,
        pass: &Pass<'_>,
        scope: &mut Channel,
        _class: Messages,
        page: &HistoryPage,
    ) -> Result<u64, sqlx::Error> {
        let Some(horizon) = self.replay.horizon(scope, page.read_at) else {
            return Ok(0);
        };
        write_messages(
            &self.pool,
            scope,
            horizon,
            pass.time_bound(page.read_at),
            &page.messages,
            None,
            page.read_at,
        )
        .await?
        .record(pass, &self.pool, scope)
        .await
    }

    fn scope_detail(&self, scope: &Channel) -> serde_json::Map<String, serde_json::Value> {
        let mut detail = serde_json::Map::new();
        detail.insert("channel_id".into(), scope.id.to_string().into());
        detail.insert("slack_id".into(), scope.slack_id.clone().into());
        detail
    }

    async fn scope_lost_access(
        &self,
        pass: &Pass<'_>,
        scope: &mut Channel,
        reason: &str,
    ) -> Result<(), sqlx::Error> {
        let mut txn = self.pool.begin().await?;
        if let Some(locked) = channel::lock(&mut txn, scope.connection_id, &scope.slack_id).await?
            && locked.status == ChannelStatus::Active
        {
            // The bot lost the channel at some point before this read: nothing more is kept.
            channel::pause(&mut txn, locked.id, reason, None).await?;
            events::channel(
                &mut txn,
                &locked,
                events::PAUSED,
                OffsetDateTime::now_utc(),
                None,
            )
            .await?;
            pass.job
                .record_activity(
                    &mut *txn,
                    "slack_channel_paused",
                    serde_json::json!({"channel_id": locked.id, "slack_id": locked.slack_id, "reason": reason}),
                )
                .await?;
        }
        txn.commit().await
    }

    async fn listing_ended(
        &self,
        _pass: &Pass<'_>,
        scope: &mut Channel,
        _class: Messages,
        end: &ListingEnd,
    ) -> Result<(), sqlx::Error> {
        if end.complete {
            channel::mark_replayed(&self.pool, scope.id, OffsetDateTime::now_utc()).await?;
        }
        Ok(())
    }

    async fn after_scope(
        &self,
        pass: &Pass<'_>,
        source: &SlackSource,
        scope: &mut Channel,
        _cooling: bool,
    ) -> Result<JobControl, sqlx::Error> {
        let now = OffsetDateTime::now_utc();
        let Some(horizon) = self.replay.horizon(scope, now) else {
            return Ok(JobControl::Continue);
        };
        let threads = message::threads_to_read(&self.pool, scope.id, horizon).await?;
        for (parent, latest) in threads {
            let control = pass.heartbeat().await?;
            if control != JobControl::Continue {
                return Ok(control);
            }
            match self
                .read_thread(pass, source, scope, horizon, parent)
                .await?
            {
                Ok(()) => message::mark_thread_read(&self.pool, scope.id, parent, latest).await?,
                Err(e) => {
                    // The thread stays unread to its latest reply: the next replay reads it again.
                    pass.job
                        .record_activity(
                            &self.pool,
                            "slack_thread_incomplete",
                            serde_json::json!({
                                "channel_id": scope.id,
                                "thread_ts": parent.to_string(),
                                "reason": e.to_string(),
                            }),
                        )
                        .await?;
                    if matches!(e, ReadFailure::BudgetExhausted) {
                        return Ok(JobControl::Continue);
                    }
                }
            }
        }
        Ok(JobControl::Continue)
    }

    async fn activate(&self, conn: &connection::Model, _moment: Moment) -> anyhow::Result<()> {
        directory::activate(&self.pool, &self.factory, conn).await
    }
}

impl SlackVendor {
    /// Reads one thread's replies from `horizon`, writing them; a failed read stops it.
    async fn read_thread(
        &self,
        pass: &Pass<'_>,
        source: &SlackSource,
        scope: &Channel,
        horizon: SlackTs,
        parent: SlackTs,
    ) -> Result<Result<(), ReadFailure>, sqlx::Error> {
        let (parent_ts, oldest) = (parent.to_string(), horizon.to_string());
        let mut cursor: Option<String> = None;
        loop {
            if let Err(e) = source.spend() {
                return Ok(Err(e));
            }
            let read_at = OffsetDateTime::now_utc();
            let page = match source
                .client
                .conversations_replies(&RepliesQuery {
                    channel: &scope.slack_id,
                    ts: &parent_ts,
                    oldest: Some(&oldest),
                    cursor: cursor.as_deref(),
                    limit: self.page_size,
                })
                .await
            {
                Ok(page) => page,
                Err(e) => return Ok(Err(e.into())),
            };
            write_messages(
                &self.pool,
                scope,
                horizon,
                pass.time_bound(read_at),
                &page.items,
                Some(parent),
                read_at,
            )
            .await?
            .record(pass, &self.pool, scope)
            .await?;
            match (page.has_more, page.next_cursor) {
                (true, Some(next)) => cursor = Some(next),
                (false, None) => return Ok(Ok(())),
                (more, next) => {
                    return Ok(Err(ReadFailure::Anomaly(format!(
                        "replies page says has_more={more} with cursor {next:?}"
                    ))));
                }
            }
        }
    }
}
