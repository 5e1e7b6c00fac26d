//! A vendor of the second shape, channel-like, that exists only in tests: a connection is granted
//! channels one by one (consent: nothing of a channel is kept before its members were told),
//! messages are read newest first and only forward from consent or from the last clean read
//! (the engine's watermark), nothing is ever inferred from absence (it never sweeps), nothing
//! runs on activation but the subscription the vendor assigns an id to, and a channel the bot
//! was removed from pauses alone.
//!
//! Everything it needs is declared here, as a new vendor declares it: its admission rule
//! ([`Consented`]), its erasable tables and content columns ([`HOLDER`]), the resource kind it
//! creates at the vendor ([`SUBSCRIPTION`]) and its event contract, all in one
//! [`VendorDeclaration`] ([`DECLARATION`]) that a test hands to `vendors::collect` beside the
//! real ones. It runs as the Slack kind (the connection kinds are a closed list; no Slack vendor
//! declares itself yet). Nothing in `store`, `bus`, `scm-mirror`, the eraser or the engine names
//! it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use bus::Bus;
use bus::consumer::ConsumerSpec;
use lifecycle_core::job::SyncJobType;
use lifecycle_core::listing::ListingPage;
use lifecycle_core::subject::{self, Monitor};
use lifecycle_core::vendor_error::VendorErrorClass;
use serde::Deserialize;
use sqlx::{PgConnection, PgPool};
use store::admission::{AdmissionRule, Delivering, Refusal, VendorRefusal};
use store::declaration::VendorDeclaration;
use store::entity::{ConnectionKind, connection};
use store::erasure::{ContentTable, Erasable, ErasableTable, Selector};
use store::registration::ResourceKind;
use sync_engine::listing_state::{self, ScopeKey};
use sync_engine::subscription::{
    Address, CreateFailure, Registrar, Request, ResourceListing, ResourceState, VendorResource,
    confirm_consumer,
};
use sync_engine::webhook::follow::Monitors;
use sync_engine::webhook::{Outcome, Webhook, WebhookApply, WebhookError, parse};
use sync_engine::{
    Listed, ListingEnd, ListingPlan, Moment, PageCheck, Pass, ReadError, ReadStop, Scopes, Vendor,
};
use time::OffsetDateTime;
use uuid::Uuid;

/// The kind its connections run as.
pub const KIND: ConnectionKind = ConnectionKind::Slack;

/// What the vendor creates at its side: one subscription per connection, whose id the vendor
/// assigns.
pub const SUBSCRIPTION: ResourceKind = ResourceKind::new("test_channel_subscription");

/// The scope kind of its listing state.
const SCOPE_KIND: &str = "test_channel";

/// Its content: messages (their text) and channels (their names), each by connection; the
/// engine's listing state of its channels goes before the channels it names.
pub static HOLDER: Erasable = Erasable {
    holder: "test-channels",
    order: 80,
    kinds: &[KIND],
    tables: &[
        ErasableTable {
            table: "chan_message",
            selector: Selector::Connection("connection_id = $1"),
        },
        ErasableTable {
            table: "listing_state",
            selector: Selector::Connection(
                "scope_kind = 'test_channel'
                 AND scope_id IN (SELECT id FROM chan_channel WHERE connection_id = $1)",
            ),
        },
        ErasableTable {
            table: "chan_channel",
            selector: Selector::Connection("connection_id = $1"),
        },
        ErasableTable {
            table: "chan_team",
            selector: Selector::Connection("connection_id = $1"),
        },
    ],
    content: &[
        ContentTable {
            table: "chan_message",
            columns: &["text"],
        },
        ContentTable {
            table: "chan_channel",
            columns: &["title"],
        },
    ],
    streams: &[],
    repository_streams: &[],
    connection_subjects: store::erasure::no_subjects,
    workspace_subjects: store::erasure::no_workspace_subjects,
};

/// The vendor, as it declares itself.
pub static DECLARATION: VendorDeclaration = VendorDeclaration {
    kind: KIND,
    holders: &[&HOLDER],
    resource_kinds: &[SUBSCRIPTION],
    event_types: &["message.posted"],
};

/// Its tables, as its own migration would create them.
pub const TABLES: &str = "
    CREATE TABLE chan_team (
        connection_id uuid PRIMARY KEY, workspace_id uuid NOT NULL, team text NOT NULL,
        subscription_missing text);
    CREATE TABLE chan_channel (
        id uuid PRIMARY KEY, connection_id uuid NOT NULL, workspace_id uuid NOT NULL,
        team text NOT NULL, native_id text NOT NULL, title text,
        state text NOT NULL CHECK (state IN ('NONE', 'PENDING', 'ACTIVE', 'PAUSED')),
        reason text, consent_at timestamptz,
        UNIQUE (connection_id, native_id));
    CREATE TABLE chan_message (
        connection_id uuid NOT NULL, channel_id uuid NOT NULL REFERENCES chan_channel (id),
        native_id text NOT NULL, posted_at timestamptz NOT NULL, text text,
        version bigint NOT NULL,
        PRIMARY KEY (connection_id, channel_id, native_id));";

/// The one item class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message;

/// A message as the vendor lists and delivers it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Posted {
    pub id: String,
    /// Unix seconds.
    pub ts: i64,
    pub text: String,
    /// Moves forward only (an edit raises it).
    pub version: i64,
}

impl Posted {
    fn at(&self) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(self.ts).expect("a timestamp in range")
    }
}

/// The fake vendor's side: channels of one team, their messages, and the subscriptions created.
#[derive(Default)]
pub struct Team {
    /// Messages by channel, in posting order.
    pub channels: BTreeMap<String, Vec<Posted>>,
    /// Channels the bot was removed from: reading them is refused.
    pub removed: Vec<String>,
    /// Subscriptions created: (vendor-assigned id, url).
    pub subscriptions: Vec<(String, String)>,
    /// History calls served, by channel.
    pub reads: BTreeMap<String, usize>,
}

/// The reader: the team, shared with the test.
#[derive(Clone, Default)]
pub struct TeamSource(pub Arc<Mutex<Team>>);

impl TeamSource {
    pub fn with<T>(&self, f: impl FnOnce(&mut Team) -> T) -> T {
        f(&mut self.0.lock().unwrap())
    }

    /// Posts a message in `channel` at `ts`.
    pub fn post(&self, channel: &str, id: &str, ts: i64, text: &str) -> Posted {
        let posted = Posted {
            id: id.to_owned(),
            ts,
            text: text.to_owned(),
            version: 1,
        };
        self.with(|t| {
            t.channels
                .entry(channel.to_owned())
                .or_default()
                .push(posted.clone())
        });
        posted
    }
}

/// A page of a channel's history, newest first.
pub struct HistoryPage {
    messages: Vec<Posted>,
    next: Option<String>,
}

impl Listed<String> for HistoryPage {
    fn listing(&self) -> ListingPage<String> {
        ListingPage {
            ids: self.messages.iter().map(|m| m.id.clone()).collect(),
            has_next_page: self.next.is_some(),
            end_cursor: self.next.clone(),
            total_count: None,
        }
    }

    fn errored(&self) -> bool {
        false
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelError {
    /// The bot is no longer in the channel.
    NotInChannel(String),
}

impl fmt::Display for ChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChannelError::NotInChannel(c) => write!(f, "not_in_channel: the bot left {c}"),
        }
    }
}

impl ReadError for ChannelError {
    fn class(&self) -> VendorErrorClass {
        VendorErrorClass::ScopeLost
    }

    fn stops(&self) -> ReadStop {
        // Rule: losing one channel pauses that channel; the connection's credentials stand.
        ReadStop::Scope(self.to_string())
    }
}

/// A granted channel as a pass walks it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Channel {
    pub id: Uuid,
    pub native_id: String,
    pub consent_at: OffsetDateTime,
    /// Where this pass's listing stops: consent, or the last clean read.
    #[sqlx(skip)]
    pub horizon: Option<OffsetDateTime>,
    /// The newest message this pass's listing read.
    #[sqlx(skip)]
    pub newest: Option<OffsetDateTime>,
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.native_id)
    }
}

impl Channel {
    fn key(&self) -> ScopeKey {
        ScopeKey {
            kind: SCOPE_KIND,
            id: self.id,
        }
    }
}

/// The channel vendor.
#[derive(Clone)]
pub struct Channels {
    pub pool: PgPool,
    pub bus: Bus,
    pub source: TeamSource,
    pub registrar: Registrar,
    /// The consumer its deliveries arrive on, confirmed before a subscription is created.
    pub consumer: ConsumerSpec,
    /// Where subscriptions deliver.
    pub public_url: String,
}

/// Writes a message forward-only, never one from before the channel's consent. Whether the row
/// changed.
async fn write(
    conn: &mut PgConnection,
    connection_id: Uuid,
    channel: Uuid,
    consent_at: OffsetDateTime,
    m: &Posted,
) -> Result<bool, sqlx::Error> {
    // Rule: nothing older than the channel's consent is kept.
    if m.at() < consent_at {
        return Ok(false);
    }
    let changed = sqlx::query(
        "INSERT INTO chan_message (connection_id, channel_id, native_id, posted_at, text, version)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (connection_id, channel_id, native_id) DO UPDATE
            SET text = EXCLUDED.text, version = EXCLUDED.version
          WHERE chan_message.version < EXCLUDED.version",
    )
    .bind(connection_id)
    .bind(channel)
    .bind(&m.id)
    .bind(m.at())
    .bind(&m.text)
    .bind(m.version)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(changed == 1)
}

#[async_trait::async_trait]
impl Vendor for Channels {
    const KIND: ConnectionKind = KIND;
    const SCOPES: &'static str = "channels";
    const CLASSES: &'static [Message] = &[Message];
    // Absence proves nothing here: a channel's history is only ever read forward.
    const SWEEPS: bool = false;
    // No history read on activation: a channel is read only once it is granted.
    const ON_ACTIVATION: &'static [SyncJobType] = &[];

    type Source = TeamSource;
    type Scope = Channel;
    type Class = Message;
    type Id = String;
    type Page = HistoryPage;
    type Error = ChannelError;

    fn class_name(_: Message) -> &'static str {
        "message"
    }

    fn total_count(_: Message) -> lifecycle_core::listing::TotalCount {
        lifecycle_core::listing::TotalCount::NotOffered
    }

    async fn source(&self, _: &connection::Model) -> anyhow::Result<TeamSource> {
        Ok(self.source.clone())
    }

    async fn scopes(
        &self,
        pass: &Pass<'_>,
        _: &TeamSource,
    ) -> Result<Result<Scopes<Channel>, ChannelError>, sqlx::Error> {
        let scopes = sqlx::query_as(
            "SELECT id, native_id, consent_at FROM chan_channel
              WHERE connection_id = $1 AND state = 'ACTIVE' ORDER BY native_id",
        )
        .bind(pass.job.connection_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(Ok(Scopes {
            scopes,
            unresolved: None,
        }))
    }

    async fn plan_listing(
        &self,
        _: &Pass<'_>,
        channel: &mut Channel,
        _: Message,
        _: bool,
    ) -> Result<ListingPlan, sqlx::Error> {
        let state = listing_state::load(&self.pool, channel.key(), "message").await?;
        channel.horizon = Some(
            state
                .watermark
                .map_or(channel.consent_at, |w| w.max(channel.consent_at)),
        );
        channel.newest = None;
        Ok(ListingPlan::Filtered)
    }

    async fn read_page(
        &self,
        source: &TeamSource,
        channel: &Channel,
        _: Message,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<HistoryPage, ChannelError> {
        source.with(|t| {
            *t.reads.entry(channel.native_id.clone()).or_default() += 1;
            if t.removed.contains(&channel.native_id) {
                return Err(ChannelError::NotInChannel(channel.native_id.clone()));
            }
            let mut newest_first = t
                .channels
                .get(&channel.native_id)
                .cloned()
                .unwrap_or_default();
            newest_first.reverse();
            let start: usize = after.map_or(0, |c| c.parse().expect("our cursor"));
            let end = (start + page_size as usize).min(newest_first.len());
            Ok(HistoryPage {
                messages: newest_first[start..end].to_vec(),
                next: (end < newest_first.len()).then(|| end.to_string()),
            })
        })
    }

    async fn check_page(
        &self,
        _: &Pass<'_>,
        channel: &mut Channel,
        page: &HistoryPage,
    ) -> Result<PageCheck, sqlx::Error> {
        // Newest first: once a page reaches the horizon, everything after it is older still.
        let horizon = channel.horizon.unwrap_or(channel.consent_at);
        Ok(if page.messages.iter().any(|m| m.at() <= horizon) {
            PageCheck::EndHere
        } else {
            PageCheck::Write
        })
    }

    async fn write_page(
        &self,
        pass: &Pass<'_>,
        channel: &mut Channel,
        _: Message,
        page: &HistoryPage,
    ) -> Result<u64, sqlx::Error> {
        let mut txn = self.pool.begin().await?;
        let mut changed = 0;
        for m in &page.messages {
            changed += u64::from(
                write(
                    &mut txn,
                    pass.job.connection_id,
                    channel.id,
                    channel.consent_at,
                    m,
                )
                .await?,
            );
            channel.newest = channel.newest.max(Some(m.at()));
        }
        txn.commit().await?;
        Ok(changed)
    }

    async fn listing_ended(
        &self,
        _: &Pass<'_>,
        channel: &mut Channel,
        _: Message,
        end: &ListingEnd,
    ) -> Result<(), sqlx::Error> {
        // Rule: the watermark moves only after a listing read whole to its horizon.
        if end.complete
            && let Some(newest) = channel.newest
        {
            listing_state::advance_watermark(&self.pool, channel.key(), "message", newest).await?;
        }
        Ok(())
    }

    async fn scope_lost_access(
        &self,
        pass: &Pass<'_>,
        channel: &mut Channel,
        reason: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE chan_channel SET state = 'PAUSED', reason = $3
              WHERE connection_id = $1 AND id = $2",
        )
        .bind(pass.job.connection_id)
        .bind(channel.id)
        .bind(reason)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    fn scope_detail(&self, channel: &Channel) -> serde_json::Map<String, serde_json::Value> {
        let mut detail = serde_json::Map::new();
        detail.insert("channel".into(), channel.native_id.clone().into());
        detail
    }

    async fn activate(&self, conn: &connection::Model, _: Moment) -> anyhow::Result<()> {
        let team: Option<String> =
            sqlx::query_scalar("SELECT team FROM chan_team WHERE connection_id = $1")
                .bind(conn.id)
                .fetch_optional(&self.pool)
                .await?;
        let Some(team) = team else {
            return Ok(());
        };
        // Subscription first: the consumer takes the team's subjects before anything is
        // created at the vendor, so no delivery can arrive before it.
        let filter = format!("slack.{}.?.>", subject::token(&team)?);
        let ready = confirm_consumer(&self.bus, &self.consumer, &filter).await;
        let state = self
            .registrar
            .ensure(
                self,
                Request {
                    conn,
                    target: Ok(team),
                    ready,
                    provider_ref: None,
                },
            )
            .await?;
        let reason = match &state {
            ResourceState::Open(_) => None,
            ResourceState::Missing(why) => Some(why.clone()),
        };
        sqlx::query("UPDATE chan_team SET subscription_missing = $2 WHERE connection_id = $1")
            .bind(conn.id)
            .bind(reason)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

impl Channels {
    /// Grants a channel of the connection's team, as its admin does: when the bot is in it, the
    /// bot tells its members (an announcement posted now) and the channel is kept from that
    /// message on; otherwise it waits, PENDING, with the reason.
    pub async fn grant(&self, conn: &connection::Model, channel: &str) -> anyhow::Result<()> {
        let team: String =
            sqlx::query_scalar("SELECT team FROM chan_team WHERE connection_id = $1")
                .bind(conn.id)
                .fetch_one(&self.pool)
                .await?;
        let announced = self.source.with(|t| {
            if t.removed.iter().any(|c| c == channel) {
                return None;
            }
            let ts = OffsetDateTime::now_utc().unix_timestamp();
            let id = format!("announce-{channel}-{ts}");
            let posted = Posted {
                id,
                ts,
                text: "this channel is now kept by forgesync".into(),
                version: 1,
            };
            t.channels
                .entry(channel.to_owned())
                .or_default()
                .push(posted.clone());
            Some(posted)
        });
        let (state, reason, consent_at) = match &announced {
            Some(posted) => ("ACTIVE", None, Some(posted.at())),
            None => (
                "PENDING",
                Some("not_in_channel: invite the bot first"),
                None,
            ),
        };
        sqlx::query(
            "INSERT INTO chan_channel (id, connection_id, workspace_id, team, native_id, state,
                                       reason, consent_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (connection_id, native_id) DO UPDATE
                SET state = EXCLUDED.state, reason = EXCLUDED.reason,
                    consent_at = EXCLUDED.consent_at",
        )
        .bind(Uuid::now_v7())
        .bind(conn.id)
        .bind(conn.workspace_id)
        .bind(&team)
        .bind(channel)
        .bind(state)
        .bind(reason)
        .bind(consent_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Withdraws a channel's consent: nothing more of it is admitted, and what was kept of it
    /// goes (a withdrawal erases; it is not a tombstone).
    pub async fn withdraw(&self, conn: &connection::Model, channel: &str) -> anyhow::Result<()> {
        let mut txn = self.pool.begin().await?;
        let id: Uuid = sqlx::query_scalar(
            "UPDATE chan_channel SET state = 'NONE', reason = 'consent withdrawn', consent_at = NULL
              WHERE connection_id = $1 AND native_id = $2 RETURNING id",
        )
        .bind(conn.id)
        .bind(channel)
        .fetch_one(&mut *txn)
        .await?;
        sqlx::query("DELETE FROM chan_message WHERE connection_id = $1 AND channel_id = $2")
            .bind(conn.id)
            .bind(id)
            .execute(&mut *txn)
            .await?;
        sqlx::query("DELETE FROM listing_state WHERE scope_kind = $1 AND scope_id = $2")
            .bind(SCOPE_KIND)
            .bind(id)
            .execute(&mut *txn)
            .await?;
        txn.commit().await?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl VendorResource for Channels {
    type Listed = (String, String);
    const NOUN: &'static str = "subscription";
    const ACTIVITY: &'static str = "test_subscription";

    fn kind(&self) -> ResourceKind {
        SUBSCRIPTION
    }

    fn configured(&self) -> Result<(), String> {
        Ok(())
    }

    fn url(&self, _: &connection::Model, address: &Address<'_>) -> String {
        format!(
            "{}/webhooks/test-channels/{}",
            self.public_url, address.marker
        )
    }

    async fn create(
        &self,
        _: &connection::Model,
        _: &str,
        _: &str,
        url: &str,
        _: &str,
    ) -> Result<String, CreateFailure> {
        // The vendor assigns the id; we learn it only from the answer.
        let id = format!("sub-{}", Uuid::now_v7().simple());
        self.source
            .with(|t| t.subscriptions.push((id.clone(), url.to_owned())));
        Ok(id)
    }

    async fn list(&self, _: &str) -> ResourceListing<(String, String)> {
        ResourceListing::Whole(self.source.with(|t| t.subscriptions.clone()))
    }

    fn marked(&self, (id, url): &(String, String), _: Uuid, marker: &str) -> Option<String> {
        url.ends_with(marker).then(|| id.clone())
    }
}

/// A channel the delivering connection was granted, by the id its payload names.
pub struct Consented<'a> {
    pub channel: &'a str,
}

/// The refusal of a channel whose members were not told (or no longer consent).
pub const NO_CONSENT: VendorRefusal = VendorRefusal {
    label: "no_consent",
    reason: "the channel has not consented to be kept",
};

impl AdmissionRule for Consented<'_> {
    const KIND: ConnectionKind = KIND;

    // Rule: a channel's content is kept only while its consent stands.
    async fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> Result<Result<(), Refusal>, sqlx::Error> {
        let state: Option<String> = sqlx::query_scalar(
            "SELECT state FROM chan_channel
              WHERE connection_id = $1 AND workspace_id = $2 AND native_id = $3 FOR SHARE",
        )
        .bind(delivering.admitted.connection_id)
        .bind(delivering.admitted.workspace_id)
        .bind(self.channel)
        .fetch_optional(&mut *conn)
        .await?;
        Ok(match state.as_deref() {
            Some("ACTIVE") => Ok(()),
            Some(_) => Err(Refusal::Vendor(NO_CONSENT)),
            None => Err(Refusal::NotMonitored),
        })
    }
}

/// A `message` delivery.
#[derive(Debug, Deserialize)]
pub struct MessageEvent {
    pub channel: String,
    #[serde(flatten)]
    pub message: Posted,
}

/// A `message` delivery's body.
pub fn message_event(channel: &str, m: &Posted) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "channel": channel, "id": m.id, "ts": m.ts, "text": m.text, "version": m.version,
    }))
    .expect("JSON")
}

impl WebhookApply for Channels {
    const KIND: ConnectionKind = KIND;
    type Payload = MessageEvent;

    fn decode(&self, hook: &Webhook<'_>) -> Result<Option<MessageEvent>, WebhookError> {
        match hook.event {
            "message" => parse(hook).map(Some),
            _ => Ok(None),
        }
    }

    async fn apply(
        &self,
        hook: &Webhook<'_>,
        event: MessageEvent,
    ) -> Result<Outcome, WebhookError> {
        let mut txn = self.pool.begin().await?;
        let admitted = hook
            .admit(
                &mut txn,
                Consented {
                    channel: &event.channel,
                },
            )
            .await;
        if let Err(WebhookError::OutOfScope(Refusal::Vendor(NO_CONSENT))) = &admitted {
            txn.rollback().await?;
            // Rule: what arrives from a channel without consent is not kept, not even raw.
            hook.erase().await?;
            return Err(WebhookError::OutOfScope(Refusal::Vendor(NO_CONSENT)));
        }
        admitted?;
        let (channel, consent_at): (Uuid, OffsetDateTime) = sqlx::query_as(
            "SELECT id, consent_at FROM chan_channel WHERE connection_id = $1 AND native_id = $2",
        )
        .bind(hook.connection_id)
        .bind(&event.channel)
        .fetch_one(&mut *txn)
        .await?;
        let changed = write(
            &mut txn,
            hook.connection_id,
            channel,
            consent_at,
            &event.message,
        )
        .await?;
        txn.commit().await?;
        Ok(Outcome::of_change(changed))
    }
}

impl Monitors for Channels {
    async fn monitors(&self) -> Result<Vec<Monitor>, sqlx::Error> {
        // Every channel a connection knows, granted or not: a delivery from a channel without
        // consent must reach the consumer to be erased.
        let channels: Vec<(String, String)> = sqlx::query_as(
            "SELECT DISTINCT ch.team, ch.native_id FROM chan_channel ch
               JOIN connection c ON c.id = ch.connection_id
              WHERE c.kind = $1 AND c.status = 'active'",
        )
        .bind(KIND.as_str())
        .fetch_all(&self.pool)
        .await?;
        Ok(channels
            .into_iter()
            .map(|(team, channel)| Monitor::SlackChannel { team, channel })
            .collect())
    }
}
