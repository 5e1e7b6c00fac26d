//! What the simulated Slack knows: teams with their bot, bot tokens, channels and their
//! messages and threads, the clock that stamps `ts`, and whether rate-limit tiers apply. A change
//! made through the model's methods queues the Events API deliveries Slack would make for it
//! (see [`super::events`]); they are sent when the simulator runs.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value as Json, json};

use super::wire;

/// A Slack API error code (`channel_not_found`, `not_in_channel`, ...): what `ok:false`
/// answers carry, and what the model's methods refuse with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlackError(pub &'static str);

impl fmt::Display for SlackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for SlackError {}

/// A message timestamp: microseconds since the Unix epoch, written `<seconds>.<6 digits>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ts(pub u64);

impl Ts {
    /// Whole seconds.
    pub fn secs(self) -> i64 {
        (self.0 / 1_000_000) as i64
    }
}

impl fmt::Display for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

impl FromStr for Ts {
    type Err = SlackError;

    /// Accepts what Slack accepts for `oldest`/`latest`: `1700000000`, `1700000000.5`,
    /// `1700000000.000100`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = SlackError("invalid_ts");
        let (secs, frac) = s.trim().split_once('.').unwrap_or((s.trim(), ""));
        let secs: u64 = secs.parse().map_err(|_| bad)?;
        if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad);
        }
        let micros: u64 = format!("{frac:0<6}").parse().map_err(|_| bad)?;
        Ok(Ts(secs * 1_000_000 + micros))
    }
}

/// A workspace, with the bot user the app's tokens act as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Team {
    /// `T...`
    pub id: String,
    /// The workspace's domain (`<domain>.slack.com`).
    pub domain: String,
    /// The bot's user id (`U...`).
    pub bot_user: String,
    /// The bot's id (`B...`).
    pub bot_id: String,
}

/// A bot token of a team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The team it acts in.
    pub team: String,
    /// Revoked tokens answer `token_revoked`.
    pub revoked: bool,
}

/// A public or private channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Channel {
    /// `C...` (private channels too, as Slack ids them today).
    pub id: String,
    /// The team.
    pub team: String,
    /// Name without `#`.
    pub name: String,
    /// Names it had before, oldest first.
    pub previous_names: Vec<String>,
    /// Private channel (`group_*` events, invisible to a bot that is not a member).
    pub is_private: bool,
    /// Archived: readable, not writable.
    pub is_archived: bool,
    /// Whether the team's bot is a member.
    pub bot_member: bool,
    /// Unix seconds.
    pub created: i64,
    pub(crate) messages: BTreeMap<Ts, Message>,
}

impl Channel {
    /// The messages, thread replies included, oldest first.
    pub fn messages(&self) -> impl DoubleEndedIterator<Item = &Message> {
        self.messages.values()
    }

    /// One message.
    pub fn message(&self, ts: &str) -> Option<&Message> {
        self.messages.get(&ts.parse().ok()?)
    }

    /// The replies of a thread, oldest first.
    pub(crate) fn replies(&self, root: Ts) -> impl Iterator<Item = &Message> {
        self.messages
            .values()
            .filter(move |m| m.thread_ts == Some(root) && m.ts != root)
    }
}

/// A file attached to a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// `F...`
    pub id: String,
    /// File name.
    pub name: String,
    /// Guessed from the name's extension.
    pub mimetype: String,
}

/// A message in a channel or a thread.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Its id within the channel.
    pub ts: Ts,
    /// The author; `None` for a `bot_message`.
    pub user: Option<String>,
    /// The bot that posted it (the app's bot, or a `bot_message` integration).
    pub bot_id: Option<String>,
    /// A `bot_message`'s display name.
    pub username: Option<String>,
    /// Text.
    pub text: String,
    /// `bot_message`, `thread_broadcast`, `file_share`, `tombstone`; `None` for a plain one.
    pub subtype: Option<String>,
    /// The thread's root `ts`: on a root with replies (equal to `ts`) and on every reply.
    pub thread_ts: Option<Ts>,
    /// Last edit: who and when.
    pub edited: Option<(String, Ts)>,
    /// Shared files.
    pub files: Vec<File>,
    /// Link previews added by unfurling.
    pub attachments: Vec<Json>,
}

impl Message {
    /// Whether `conversations.history` lists it: top-level messages and broadcast replies.
    pub fn in_history(&self) -> bool {
        self.thread_ts.is_none_or(|t| t == self.ts)
            || self.subtype.as_deref() == Some("thread_broadcast")
    }

    /// A reply in a thread (broadcast or not).
    pub fn is_reply(&self) -> bool {
        self.thread_ts.is_some_and(|t| t != self.ts)
    }

    /// The author as an edit names them.
    fn author(&self) -> String {
        self.user
            .clone()
            .or_else(|| self.bot_id.clone())
            .unwrap_or_default()
    }
}

/// Slack's rate-limit tier of a Web API method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// 1+ per minute.
    Tier1,
    /// 20+ per minute.
    Tier2,
    /// 50+ per minute.
    Tier3,
    /// 100+ per minute.
    Tier4,
    /// Method-specific; `chat.postMessage` is about one per second per channel.
    Special(u32),
}

impl Tier {
    /// Slack's documented tier of a method we serve.
    pub fn of(method: &str) -> Option<Tier> {
        Some(match method {
            "conversations.list" => Tier::Tier2,
            "conversations.info" | "conversations.history" | "conversations.replies" => Tier::Tier3,
            "auth.test" => Tier::Special(100),
            "chat.postMessage" => Tier::Special(60),
            _ => return None,
        })
    }

    /// Calls allowed per window (a minute, unless compressed).
    pub fn per_window(self) -> u32 {
        match self {
            Tier::Tier1 => 1,
            Tier::Tier2 => 20,
            Tier::Tier3 => 50,
            Tier::Tier4 => 100,
            Tier::Special(n) => n,
        }
    }
}

/// The page size cap of `conversations.history` and `.replies` for a non-Marketplace app.
pub const NON_MARKETPLACE_PAGE: usize = 15;

/// Per-method rate limits per token, as Slack enforces them: each [`Tier`]'s allowance per
/// `window`. `chat.postMessage` is counted per channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimits {
    /// A minute at Slack; shorter to make a test's wait short.
    pub window: Duration,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(60),
        }
    }
}

/// An event queued for the Events API: the whole `event_callback` envelope.
#[derive(Debug, Clone)]
pub(crate) struct QueuedEvent {
    pub team_id: String,
    pub event_id: String,
    pub event_type: String,
    pub envelope: Json,
}

/// The simulated Slack's state. Change it through its methods: they keep `ts` unique and queue
/// the events Slack would send.
#[derive(Debug, Clone)]
pub struct Model {
    /// The app's id (`A...`), `api_app_id` in events.
    pub app_id: String,
    /// The app's legacy verification token, `token` in events.
    pub verification_token: String,
    /// Rate-limit tiers; off (`None`) by default.
    pub rate_limits: Option<RateLimits>,
    /// The app is commercially distributed outside the Marketplace (Slack's 2025 limits):
    /// `conversations.history` and `.replies` answer at most [`NON_MARKETPLACE_PAGE`] messages
    /// a page and, with tiers on, one call a window.
    pub non_marketplace: bool,
    pub(crate) teams: BTreeMap<String, Team>,
    pub(crate) tokens: BTreeMap<String, Token>,
    pub(crate) channels: BTreeMap<String, Channel>,
    pub(crate) users: BTreeMap<String, String>,
    /// The app's OAuth credentials (`client_id`, `client_secret`).
    pub oauth_client: (String, String),
    /// The team an installation through `/oauth/v2/authorize` is made in (the person who
    /// approves it is a member of this team); the first team when unset.
    pub installing_team: Option<String>,
    /// Authorization codes not yet exchanged: code → (team, redirect URI asked with).
    pub(crate) codes: BTreeMap<String, (String, Option<String>)>,
    clock: Option<u64>,
    last_ts: u64,
    next_id: u64,
    pub(crate) events: Vec<QueuedEvent>,
}

impl Default for Model {
    fn default() -> Self {
        Self {
            app_id: "A0SIMAPP01".to_owned(),
            verification_token: "sim-verification-token".to_owned(),
            rate_limits: None,
            non_marketplace: false,
            teams: BTreeMap::new(),
            tokens: BTreeMap::new(),
            channels: BTreeMap::new(),
            users: BTreeMap::new(),
            oauth_client: ("sim-client-id".to_owned(), "sim-client-secret".to_owned()),
            installing_team: None,
            codes: BTreeMap::new(),
            clock: None,
            last_ts: 0,
            next_id: 0,
            events: Vec::new(),
        }
    }
}

/// Who the events of a channel change name as acting: the model does not say, and Slackbot
/// stands in (never the app's bot, whose own actions a receiver may skip).
const SOMEONE: &str = "USLACKBOT";

fn channel_not_found() -> SlackError {
    SlackError("channel_not_found")
}

fn mimetype(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()) {
        Some(e) if e == "png" => "image/png",
        Some(e) if e == "jpg" || e == "jpeg" => "image/jpeg",
        Some(e) if e == "gif" => "image/gif",
        Some(e) if e == "txt" || e == "log" => "text/plain",
        Some(e) if e == "pdf" => "application/pdf",
        Some(e) if e == "json" => "application/json",
        _ => "application/octet-stream",
    }
}

impl Model {
    /// The tier of a method for this app.
    pub fn tier(&self, method: &str) -> Option<Tier> {
        match method {
            "conversations.history" | "conversations.replies" if self.non_marketplace => {
                Some(Tier::Special(1))
            }
            _ => Tier::of(method),
        }
    }

    /// `limit`'s default and maximum for a message listing, after the app's cap.
    pub(crate) fn page_limits(&self, default: usize, max: usize) -> (usize, usize) {
        if self.non_marketplace {
            (
                default.min(NON_MARKETPLACE_PAGE),
                max.min(NON_MARKETPLACE_PAGE),
            )
        } else {
            (default, max)
        }
    }

    /// Turns Slack's rate-limit tiers on (a minute's window) or off.
    pub fn set_tiers(&mut self, on: bool) {
        self.rate_limits = on.then(RateLimits::default);
    }

    /// Fixes the clock at `unix_secs`: new `ts` values are taken from it (each one past the last
    /// one issued). Without it the clock is the system's.
    pub fn set_clock(&mut self, unix_secs: i64) {
        self.clock = Some(unix_secs.max(0) as u64 * 1_000_000);
    }

    /// Moves a fixed clock forward (fixing it at the system time first if it was not).
    pub fn advance_clock(&mut self, by: Duration) {
        let now = self.now();
        self.clock = Some(now.0 + by.as_micros() as u64);
    }

    /// The clock's reading.
    pub fn now(&self) -> Ts {
        Ts(self.clock.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_micros() as u64
        }))
    }

    /// A fresh `ts`: the clock's reading, or just past the last one issued.
    fn next_ts(&mut self) -> Ts {
        let ts = self.now().0.max(self.last_ts + 1);
        self.last_ts = ts;
        Ts(ts)
    }

    fn id(&mut self, prefix: char) -> String {
        self.next_id += 1;
        format!("{prefix}0{:08X}", self.next_id)
    }

    /// Adds a workspace with its bot user; its id (`T...`).
    pub fn add_team(&mut self, domain: &str) -> String {
        let id = self.id('T');
        let team = Team {
            id: id.clone(),
            domain: domain.to_owned(),
            bot_user: self.id('U'),
            bot_id: self.id('B'),
        };
        self.users.insert(team.bot_user.clone(), id.clone());
        self.teams.insert(id.clone(), team);
        id
    }

    /// A team.
    pub fn team(&self, id: &str) -> Option<&Team> {
        self.teams.get(id)
    }

    /// An installation approved in the installing team: a single-use authorization code bound
    /// to the redirect URI it was asked with; `None` without a team.
    pub fn authorize(&mut self, redirect_uri: Option<&str>) -> Option<String> {
        let team = match &self.installing_team {
            Some(t) => t.clone(),
            None => self.teams.keys().next()?.clone(),
        };
        self.next_id += 1;
        let code = format!("sim-code-{:08x}", self.next_id);
        self.codes
            .insert(code.clone(), (team, redirect_uri.map(str::to_owned)));
        Some(code)
    }

    /// `oauth.v2.access`: the code (once) for a fresh bot token of its team: (token, team).
    pub(crate) fn exchange(
        &mut self,
        code: &str,
        redirect_uri: Option<&str>,
    ) -> Result<(String, Team), SlackError> {
        let Some((team, asked)) = self.codes.remove(code) else {
            return Err(SlackError("invalid_code"));
        };
        if asked.is_some() && asked.as_deref() != redirect_uri {
            return Err(SlackError("bad_redirect_uri"));
        }
        let team = self
            .teams
            .get(&team)
            .cloned()
            .ok_or(SlackError("invalid_code"))?;
        self.next_id += 1;
        let token = format!("xoxb-sim-{:08x}", self.next_id);
        self.add_token(&token, &team.id);
        Ok((token, team))
    }

    /// Accepts `token` as the bot token of `team`.
    pub fn add_token(&mut self, token: &str, team: &str) {
        self.tokens.insert(
            token.to_owned(),
            Token {
                team: team.to_owned(),
                revoked: false,
            },
        );
    }

    /// From now on `token` answers `token_revoked`.
    pub fn revoke_token(&mut self, token: &str) {
        if let Some(t) = self.tokens.get_mut(token) {
            t.revoked = true;
        }
    }

    /// Adds a user to a team; its id (`U...`).
    pub fn add_user(&mut self, team: &str) -> String {
        let id = self.id('U');
        self.users.insert(id.clone(), team.to_owned());
        id
    }

    /// A channel.
    pub fn channel(&self, id: &str) -> Option<&Channel> {
        self.channels.get(id)
    }

    /// A team's channel by name.
    pub fn channel_named(&self, team: &str, name: &str) -> Option<&Channel> {
        self.channels
            .values()
            .find(|c| c.team == team && c.name == name)
    }

    /// Every channel of every team, by id.
    pub fn channels(&self) -> impl Iterator<Item = &Channel> {
        self.channels.values()
    }

    fn channel_mut(&mut self, id: &str) -> Result<&mut Channel, SlackError> {
        self.channels.get_mut(id).ok_or_else(channel_not_found)
    }

    /// Adds a channel (the bot is not a member); its id (`C...`).
    pub fn add_channel(
        &mut self,
        team: &str,
        name: &str,
        private: bool,
    ) -> Result<String, SlackError> {
        if !self.teams.contains_key(team) {
            return Err(SlackError("team_not_found"));
        }
        if self.channel_named(team, name).is_some() {
            return Err(SlackError("name_taken"));
        }
        let id = self.id('C');
        let created = self.now().secs();
        let channel = Channel {
            id: id.clone(),
            team: team.to_owned(),
            name: name.to_owned(),
            previous_names: Vec::new(),
            is_private: private,
            is_archived: false,
            bot_member: false,
            created,
            messages: BTreeMap::new(),
        };
        if !private {
            let event = json!({
                "type": "channel_created",
                "channel": { "id": id, "name": name, "created": created, "creator": SOMEONE },
                "event_ts": self.now().to_string(),
            });
            self.emit(&channel, event, true);
        }
        self.channels.insert(id.clone(), channel);
        Ok(id)
    }

    /// The team's bot joins the channel (`member_joined_channel`).
    pub fn join_bot(&mut self, channel: &str) -> Result<(), SlackError> {
        let c = self.channel_mut(channel)?;
        if c.is_archived {
            return Err(SlackError("is_archived"));
        }
        if c.bot_member {
            return Ok(());
        }
        c.bot_member = true;
        let c = c.clone();
        let bot = self.bot_of(&c);
        let event = json!({
            "type": "member_joined_channel",
            "user": bot,
            "channel": c.id,
            "channel_type": if c.is_private { "G" } else { "C" },
            "team": c.team,
            "event_ts": self.now().to_string(),
        });
        self.emit(&c, event, false);
        Ok(())
    }

    /// The team's bot is removed from the channel (`member_left_channel`, then
    /// `channel_left`/`group_left`, the last events it gets from a private one).
    pub fn remove_bot(&mut self, channel: &str) -> Result<(), SlackError> {
        let c = self.channel_mut(channel)?.clone();
        if !c.bot_member {
            return Ok(());
        }
        let bot = self.bot_of(&c);
        let now = self.now().to_string();
        self.emit(
            &c,
            json!({
                "type": "member_left_channel",
                "user": bot,
                "channel": c.id,
                "channel_type": if c.is_private { "G" } else { "C" },
                "team": c.team,
                "event_ts": now,
            }),
            false,
        );
        let kind = if c.is_private {
            "group_left"
        } else {
            "channel_left"
        };
        self.emit(
            &c,
            json!({ "type": kind, "channel": c.id, "actor_id": bot, "event_ts": now }),
            false,
        );
        self.channel_mut(channel)?.bot_member = false;
        Ok(())
    }

    /// Archives the channel (`channel_archive`/`group_archive`).
    pub fn archive(&mut self, channel: &str) -> Result<(), SlackError> {
        self.set_archived(channel, true)
    }

    /// Unarchives the channel (`channel_unarchive`/`group_unarchive`).
    pub fn unarchive(&mut self, channel: &str) -> Result<(), SlackError> {
        self.set_archived(channel, false)
    }

    fn set_archived(&mut self, channel: &str, archived: bool) -> Result<(), SlackError> {
        let c = self.channel_mut(channel)?;
        if c.is_archived == archived {
            return Err(SlackError(if archived {
                "already_archived"
            } else {
                "not_archived"
            }));
        }
        c.is_archived = archived;
        let c = c.clone();
        let kind = match (c.is_private, archived) {
            (false, true) => "channel_archive",
            (false, false) => "channel_unarchive",
            (true, true) => "group_archive",
            (true, false) => "group_unarchive",
        };
        let event = json!({
            "type": kind,
            "channel": c.id,
            "user": SOMEONE,
            "event_ts": self.now().to_string(),
        });
        self.emit(&c, event, !c.is_private);
        Ok(())
    }

    /// Renames the channel (`channel_rename`/`group_rename`).
    pub fn rename(&mut self, channel: &str, name: &str) -> Result<(), SlackError> {
        let team = self.channel_mut(channel)?.team.clone();
        if self
            .channel_named(&team, name)
            .is_some_and(|c| c.id != channel)
        {
            return Err(SlackError("name_taken"));
        }
        let c = self.channel_mut(channel)?;
        let old = std::mem::replace(&mut c.name, name.to_owned());
        c.previous_names.push(old);
        let c = c.clone();
        let kind = if c.is_private {
            "group_rename"
        } else {
            "channel_rename"
        };
        let event = json!({
            "type": kind,
            "channel": {
                "id": c.id,
                "name": c.name,
                "name_normalized": c.name,
                "created": c.created,
                "is_channel": !c.is_private,
                "is_mpim": false,
            },
            "event_ts": self.now().to_string(),
        });
        self.emit(&c, event, !c.is_private);
        Ok(())
    }

    /// Deletes the channel and its messages (`channel_deleted`/`group_deleted`).
    pub fn delete_channel(&mut self, channel: &str) -> Result<(), SlackError> {
        let c = self
            .channels
            .remove(channel)
            .ok_or_else(channel_not_found)?;
        let kind = if c.is_private {
            "group_deleted"
        } else {
            "channel_deleted"
        };
        let event = json!({
            "type": kind,
            "channel": c.id,
            "actor_id": SOMEONE,
            "event_ts": self.now().to_string(),
        });
        self.emit(&c, event, !c.is_private);
        Ok(())
    }

    fn bot_of(&self, c: &Channel) -> String {
        self.teams
            .get(&c.team)
            .map(|t| t.bot_user.clone())
            .unwrap_or_default()
    }

    /// The channel, unless Slack refuses to post to it.
    fn writable(&self, channel: &str) -> Result<&Channel, SlackError> {
        let c = self.channels.get(channel).ok_or_else(channel_not_found)?;
        if c.is_archived {
            return Err(SlackError("is_archived"));
        }
        Ok(c)
    }

    fn insert(&mut self, channel: &str, message: Message) -> Result<String, SlackError> {
        let c = self
            .channels
            .get_mut(channel)
            .ok_or_else(channel_not_found)?;
        if c.messages.contains_key(&message.ts) {
            return Err(SlackError("ts_taken"));
        }
        let ts = message.ts;
        // A root's `thread_ts` appears with its first reply.
        if let Some(root) = message.thread_ts.filter(|r| *r != ts)
            && let Some(parent) = c.messages.get_mut(&root)
        {
            parent.thread_ts = Some(root);
        }
        c.messages.insert(ts, message.clone());
        let c = c.clone();
        let mut event = wire::message_event_base(&c, &message);
        if let Some(root) = message.thread_ts.filter(|r| *r != ts)
            && let Some(parent) = c.messages.get(&root)
        {
            event["parent_user_id"] = json!(parent.author());
            if message.subtype.as_deref() == Some("thread_broadcast") {
                event["root"] = wire::message_json(&c, parent);
            }
        }
        self.emit(&c, event, false);
        Ok(ts.to_string())
    }

    fn new_message(&mut self, user: Option<&str>, text: &str, ts: Option<Ts>) -> Message {
        Message {
            ts: ts.unwrap_or_else(|| self.next_ts()),
            user: user.map(str::to_owned),
            bot_id: None,
            username: None,
            text: text.to_owned(),
            subtype: None,
            thread_ts: None,
            edited: None,
            files: Vec::new(),
            attachments: Vec::new(),
        }
    }

    /// A user posts a message; its `ts`.
    pub fn post(&mut self, channel: &str, user: &str, text: &str) -> Result<String, SlackError> {
        self.writable(channel)?;
        let m = self.new_message(Some(user), text, None);
        self.insert(channel, m)
    }

    /// A user's message with a given `ts` (an old one, for a history to page back into).
    pub fn post_at(
        &mut self,
        channel: &str,
        user: &str,
        text: &str,
        ts: &str,
    ) -> Result<String, SlackError> {
        self.writable(channel)?;
        let ts: Ts = ts.parse()?;
        // Later messages still come after it.
        self.last_ts = self.last_ts.max(ts.0);
        let m = self.new_message(Some(user), text, Some(ts));
        self.insert(channel, m)
    }

    /// A user replies in the thread of `thread_ts` (also sent to the channel when `broadcast`:
    /// a `thread_broadcast`); its `ts`.
    pub fn reply(
        &mut self,
        channel: &str,
        thread_ts: &str,
        user: &str,
        text: &str,
        broadcast: bool,
    ) -> Result<String, SlackError> {
        let root = self.thread_root(channel, thread_ts)?;
        let mut m = self.new_message(Some(user), text, None);
        m.thread_ts = Some(root);
        if broadcast {
            m.subtype = Some("thread_broadcast".to_owned());
        }
        self.insert(channel, m)
    }

    /// The root of the thread `ts` is in.
    fn thread_root(&self, channel: &str, ts: &str) -> Result<Ts, SlackError> {
        let c = self.writable(channel)?;
        let ts: Ts = ts.parse()?;
        let m = c.messages.get(&ts).ok_or(SlackError("thread_not_found"))?;
        Ok(m.thread_ts.unwrap_or(m.ts))
    }

    /// A message Slack writes on a user's behalf (`channel_join`, `channel_topic`,
    /// `channel_purpose`, ...): in the history and sent as an event, never kept by the mirror;
    /// its `ts`.
    pub fn system_message(
        &mut self,
        channel: &str,
        user: &str,
        subtype: &str,
        text: &str,
    ) -> Result<String, SlackError> {
        self.writable(channel)?;
        let mut m = self.new_message(Some(user), text, None);
        m.subtype = Some(subtype.to_owned());
        self.insert(channel, m)
    }

    /// A bot integration (not the app's bot) posts a `bot_message`; its `ts`.
    pub fn bot_message(
        &mut self,
        channel: &str,
        bot_id: &str,
        username: &str,
        text: &str,
    ) -> Result<String, SlackError> {
        self.writable(channel)?;
        let mut m = self.new_message(None, text, None);
        m.subtype = Some("bot_message".to_owned());
        m.bot_id = Some(bot_id.to_owned());
        m.username = Some(username.to_owned());
        self.insert(channel, m)
    }

    /// The team's bot posts (what `chat.postMessage` does), optionally in a thread.
    pub(crate) fn post_as_bot(
        &mut self,
        channel: &str,
        text: &str,
        thread_ts: Option<&str>,
        broadcast: bool,
    ) -> Result<Message, SlackError> {
        let c = self.writable(channel)?;
        if !c.bot_member {
            return Err(SlackError("not_in_channel"));
        }
        let team = self
            .teams
            .get(&c.team)
            .cloned()
            .ok_or_else(channel_not_found)?;
        let root = thread_ts
            .map(|t| self.thread_root(channel, t))
            .transpose()?;
        let mut m = self.new_message(Some(&team.bot_user), text, None);
        m.bot_id = Some(team.bot_id);
        m.thread_ts = root;
        if root.is_some() && broadcast {
            m.subtype = Some("thread_broadcast".to_owned());
        }
        let ts = m.ts;
        self.insert(channel, m)?;
        self.channels
            .get(channel)
            .and_then(|c| c.messages.get(&ts))
            .cloned()
            .ok_or_else(channel_not_found)
    }

    /// A user shares a file (`file_share`); the message's `ts`.
    pub fn share_file(
        &mut self,
        channel: &str,
        user: &str,
        name: &str,
    ) -> Result<String, SlackError> {
        self.writable(channel)?;
        let mut m = self.new_message(Some(user), "", None);
        m.subtype = Some("file_share".to_owned());
        m.files.push(File {
            id: self.id('F'),
            name: name.to_owned(),
            mimetype: mimetype(name).to_owned(),
        });
        self.insert(channel, m)
    }

    /// Changes a message through `change` and queues the `message_changed` event.
    fn change(
        &mut self,
        channel: &str,
        ts: &str,
        change: impl FnOnce(&mut Message),
    ) -> Result<(), SlackError> {
        let ts: Ts = ts.parse()?;
        let event_ts = self.next_ts();
        let c = self.channel_mut(channel)?;
        let m = c
            .messages
            .get_mut(&ts)
            .ok_or(SlackError("message_not_found"))?;
        let previous = m.clone();
        change(m);
        let c = c.clone();
        let event = wire::message_changed(&c, &previous, event_ts);
        self.emit(&c, event, false);
        Ok(())
    }

    /// The author edits a message's text; the edit's `ts` (`edited.ts`).
    pub fn edit(&mut self, channel: &str, ts: &str, text: &str) -> Result<String, SlackError> {
        self.writable(channel)?;
        let edited = self.next_ts();
        self.change(channel, ts, |m| {
            m.text = text.to_owned();
            m.edited = Some((m.author(), edited));
        })?;
        Ok(edited.to_string())
    }

    /// Slack unfurls a link in the message: a `message_changed` without a new `edited`.
    pub fn unfurl(&mut self, channel: &str, ts: &str) -> Result<(), SlackError> {
        self.change(channel, ts, |m| {
            let n = m.attachments.len() + 1;
            let url = m
                .text
                .split_whitespace()
                .find(|w| w.starts_with("http"))
                .unwrap_or("https://example.com/")
                .trim_matches(|c| c == '<' || c == '>')
                .to_owned();
            m.attachments.push(json!({
                "id": n,
                "original_url": url,
                "from_url": url,
                "title": format!("Preview of {url}"),
                "fallback": format!("Preview of {url}"),
            }));
        })
    }

    /// Deletes a message (`message_deleted`). A thread's root that still has replies stays as
    /// a `tombstone`, as Slack keeps it, announced as a `message_changed`.
    pub fn delete(&mut self, channel: &str, ts: &str) -> Result<(), SlackError> {
        let key: Ts = ts.parse()?;
        let c = self.channel_mut(channel)?;
        let m = c
            .messages
            .get(&key)
            .ok_or(SlackError("message_not_found"))?;
        if !m.is_reply() && c.replies(key).next().is_some() {
            return self.change(channel, ts, |m| {
                m.subtype = Some("tombstone".to_owned());
                m.text = "This message was deleted.".to_owned();
                m.user = Some("USLACKBOT".to_owned());
                m.bot_id = None;
                m.files.clear();
                m.attachments.clear();
                m.edited = None;
            });
        }
        let Some(previous) = c.messages.remove(&key) else {
            return Err(SlackError("message_not_found"));
        };
        let c = c.clone();
        let event_ts = self.next_ts();
        let event = wire::message_deleted(&c, &previous, event_ts);
        self.emit(&c, event, false);
        Ok(())
    }

    /// Queues `event` for the channel's team: message events and private channels' events only
    /// reach a bot that is a member; `public` events reach the app regardless.
    fn emit(&mut self, c: &Channel, event: Json, public: bool) {
        if !(public || c.bot_member) {
            return;
        }
        let Some(team) = self.teams.get(&c.team) else {
            return;
        };
        let bot_user = team.bot_user.clone();
        self.next_id += 1;
        let event_id = format!("Ev0{:08X}", self.next_id);
        let event_type = event["type"].as_str().unwrap_or_default().to_owned();
        let event_type = match event["subtype"].as_str() {
            Some(sub) => format!("{event_type}.{sub}"),
            None => event_type,
        };
        let envelope = json!({
            "token": self.verification_token,
            "team_id": c.team,
            "context_team_id": c.team,
            "context_enterprise_id": null,
            "api_app_id": self.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": self.now().secs(),
            "authorizations": [{
                "enterprise_id": null,
                "team_id": c.team,
                "user_id": bot_user,
                "is_bot": true,
                "is_enterprise_install": false,
            }],
            "is_ext_shared_channel": false,
            "event_context": format!("4-sim-{}-{}", c.team, c.id),
        });
        self.events.push(QueuedEvent {
            team_id: c.team.clone(),
            event_id,
            event_type,
            envelope,
        });
    }

    /// Takes the queued events, oldest first.
    pub(crate) fn take_events(&mut self) -> Vec<QueuedEvent> {
        std::mem::take(&mut self.events)
    }

    /// The team a token acts in, as `auth.test` and every call checks it.
    pub(crate) fn authenticate(&self, token: Option<&str>) -> Result<&Team, SlackError> {
        let token = token.ok_or(SlackError("not_authed"))?;
        let t = self.tokens.get(token).ok_or(SlackError("invalid_auth"))?;
        if t.revoked {
            return Err(SlackError("token_revoked"));
        }
        self.teams.get(&t.team).ok_or(SlackError("invalid_auth"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ts_reads_slacks_spellings() {
        assert_eq!("1700000000".parse::<Ts>(), Ok(Ts(1_700_000_000_000_000)));
        assert_eq!("1700000000.5".parse::<Ts>(), Ok(Ts(1_700_000_000_500_000)));
        assert_eq!(Ts(1_700_000_000_000_100).to_string(), "1700000000.000100");
        assert!("x".parse::<Ts>().is_err());
    }
}
