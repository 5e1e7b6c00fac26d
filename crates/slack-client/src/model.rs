//! What the client returns, and the wire shapes it decodes them from. Only the fields we keep
//! are read; anything else Slack sends is ignored.

use serde::{Deserialize, Serialize};

/// One page of a cursor-paged listing.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The page's items, in Slack's order.
    pub items: Vec<T>,
    /// The cursor of the next page; `None` when Slack sent none or an empty one.
    pub next_cursor: Option<String>,
    /// Whether Slack says more follows (`has_more`, or a next cursor where Slack sends no
    /// `has_more`, as `conversations.list`).
    pub has_more: bool,
}

/// Who the token is (`auth.test`).
#[derive(Debug, Clone)]
pub struct AuthTest {
    /// The workspace.
    pub team_id: String,
    /// The bot's user.
    pub user_id: String,
    /// The bot, for a bot token.
    pub bot_id: Option<String>,
}

/// A public or private channel.
#[derive(Debug, Clone, Deserialize)]
pub struct Channel {
    /// `C...` (or `G...` for an old private channel).
    pub id: String,
    /// Its name without `#`.
    pub name: Option<String>,
    /// Archived channels are listed too.
    pub is_archived: bool,
    /// Whether the bot is in it (it reads only channels it is in).
    pub is_member: bool,
    /// A private channel.
    pub is_private: bool,
}

/// A file attached to a message: its identity, never its content.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileRef {
    /// `F...`.
    pub id: String,
    /// Its file name.
    pub name: Option<String>,
    /// Its MIME type.
    pub mimetype: Option<String>,
}

/// A message of a channel's history or of a thread.
#[derive(Debug, Clone)]
pub struct Message {
    /// Its timestamp, the message's id within its channel.
    pub ts: String,
    /// The thread's parent `ts`, on a parent with replies and on each reply.
    pub thread_ts: Option<String>,
    /// Its author, for a user's message.
    pub user: Option<String>,
    /// The bot that posted it.
    pub bot_id: Option<String>,
    /// `bot_message`, `channel_join`, `thread_broadcast`, ...; `None` for a plain message.
    pub subtype: Option<String>,
    /// Its text.
    pub text: Option<String>,
    /// When it was last edited.
    pub edited_ts: Option<String>,
    /// How many replies its thread has (on a thread's parent).
    pub reply_count: Option<u32>,
    /// The `ts` of the thread's latest reply (on a thread's parent).
    pub latest_reply: Option<String>,
    /// Its files.
    pub files: Vec<FileRef>,
}

/// `auth.test`'s answer.
#[derive(Deserialize)]
pub(crate) struct AuthTestBody {
    team_id: String,
    user_id: String,
    bot_id: Option<String>,
}

impl From<AuthTestBody> for AuthTest {
    fn from(body: AuthTestBody) -> Self {
        AuthTest {
            team_id: body.team_id,
            user_id: body.user_id,
            bot_id: body.bot_id,
        }
    }
}

/// `auth.revoke`'s answer.
#[derive(Deserialize)]
pub(crate) struct AuthRevokeBody {
    pub(crate) revoked: bool,
}

/// `response_metadata` of a paged answer.
#[derive(Deserialize, Default)]
struct ResponseMetadata {
    next_cursor: Option<String>,
}

impl ResponseMetadata {
    fn next_cursor(metadata: Option<ResponseMetadata>) -> Option<String> {
        // Slack ends a listing with `"next_cursor": ""`.
        metadata
            .and_then(|m| m.next_cursor)
            .filter(|cursor| !cursor.is_empty())
    }
}

/// `conversations.list`'s answer.
#[derive(Deserialize)]
pub(crate) struct ChannelsBody {
    channels: Vec<Channel>,
    response_metadata: Option<ResponseMetadata>,
}

impl From<ChannelsBody> for Page<Channel> {
    fn from(body: ChannelsBody) -> Self {
        let next_cursor = ResponseMetadata::next_cursor(body.response_metadata);
        Page {
            items: body.channels,
            has_more: next_cursor.is_some(),
            next_cursor,
        }
    }
}

/// `conversations.info`'s answer.
#[derive(Deserialize)]
pub(crate) struct ChannelBody {
    pub(crate) channel: Channel,
}

/// `conversations.history`'s and `conversations.replies`' answer.
#[derive(Deserialize)]
pub(crate) struct MessagesBody {
    messages: Vec<MessageBody>,
    has_more: Option<bool>,
    response_metadata: Option<ResponseMetadata>,
}

impl From<MessagesBody> for Page<Message> {
    fn from(body: MessagesBody) -> Self {
        let next_cursor = ResponseMetadata::next_cursor(body.response_metadata);
        Page {
            items: body.messages.into_iter().map(Message::from).collect(),
            has_more: body.has_more.unwrap_or(next_cursor.is_some()),
            next_cursor,
        }
    }
}

#[derive(Deserialize)]
struct MessageBody {
    ts: String,
    thread_ts: Option<String>,
    user: Option<String>,
    bot_id: Option<String>,
    subtype: Option<String>,
    text: Option<String>,
    edited: Option<Edited>,
    reply_count: Option<u32>,
    latest_reply: Option<String>,
    // No `files` is a message without files.
    #[serde(default)]
    files: Vec<FileRef>,
}

#[derive(Deserialize)]
struct Edited {
    ts: String,
}

impl From<MessageBody> for Message {
    fn from(body: MessageBody) -> Self {
        Message {
            ts: body.ts,
            thread_ts: body.thread_ts,
            user: body.user,
            bot_id: body.bot_id,
            subtype: body.subtype,
            text: body.text,
            edited_ts: body.edited.map(|e| e.ts),
            reply_count: body.reply_count,
            latest_reply: body.latest_reply,
            files: body.files,
        }
    }
}

/// `chat.postMessage`'s request.
#[derive(Serialize)]
pub(crate) struct PostMessage<'a> {
    pub(crate) channel: &'a str,
    pub(crate) text: &'a str,
}

/// `chat.postMessage`'s answer.
#[derive(Deserialize)]
pub(crate) struct PostedBody {
    pub(crate) ts: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode<T: for<'de> Deserialize<'de>>(json: serde_json::Value) -> T {
        serde_json::from_value(json).expect("decodes")
    }

    #[test]
    fn an_empty_next_cursor_ends_the_listing() {
        let page: Page<Channel> = decode::<ChannelsBody>(serde_json::json!({
            "ok": true,
            "channels": [],
            "response_metadata": { "next_cursor": "" }
        }))
        .into();
        assert_eq!(page.next_cursor, None);
        assert!(!page.has_more);

        let page: Page<Channel> =
            decode::<ChannelsBody>(serde_json::json!({ "ok": true, "channels": [] })).into();
        assert_eq!(page.next_cursor, None);
        assert!(!page.has_more);
    }

    #[test]
    fn a_next_cursor_means_more_where_slack_sends_no_has_more() {
        let page: Page<Channel> = decode::<ChannelsBody>(serde_json::json!({
            "ok": true,
            "channels": [
                { "id": "C1", "name": "general", "is_archived": false, "is_member": true,
                  "is_private": false, "is_channel": true, "topic": { "value": "x" } },
                { "id": "G2", "is_archived": true, "is_member": false, "is_private": true }
            ],
            "response_metadata": { "next_cursor": "dGVhbTpDMDYx" }
        }))
        .into();
        assert_eq!(page.next_cursor.as_deref(), Some("dGVhbTpDMDYx"));
        assert!(page.has_more);
        assert_eq!(page.items.len(), 2);
        let general = &page.items[0];
        assert_eq!(general.id, "C1");
        assert_eq!(general.name.as_deref(), Some("general"));
        assert!(general.is_member && !general.is_private && !general.is_archived);
        let private = &page.items[1];
        assert_eq!(private.name, None);
        assert!(private.is_private && private.is_archived && !private.is_member);
    }

    #[test]
    fn a_channel_without_its_membership_is_not_a_channel() {
        // An unknown membership is not "not a member".
        let body = serde_json::json!({
            "ok": true,
            "channel": { "id": "C1", "is_archived": false, "is_private": false }
        });
        assert!(serde_json::from_value::<ChannelBody>(body).is_err());
    }

    #[test]
    fn history_keeps_slack_has_more_and_each_message_field() {
        let page: Page<Message> = decode::<MessagesBody>(serde_json::json!({
            "ok": true,
            "messages": [
                {
                    "type": "message", "ts": "1700000002.000200", "user": "U1",
                    "text": "hello", "thread_ts": "1700000002.000200", "reply_count": 3,
                    "latest_reply": "1700000009.000900",
                    "edited": { "user": "U1", "ts": "1700000005.000000" },
                    "files": [
                        { "id": "F1", "name": "a.png", "mimetype": "image/png", "size": 10 },
                        { "id": "F2", "mode": "hidden_by_limit" }
                    ],
                    "blocks": [{ "type": "some_future_block", "what": [1, 2] }]
                },
                {
                    "type": "message", "subtype": "bot_message", "ts": "1700000001.000100",
                    "bot_id": "B1", "text": "beep"
                }
            ],
            "has_more": true,
            "response_metadata": { "next_cursor": "bmV4dA==" }
        }))
        .into();
        assert!(page.has_more);
        assert_eq!(page.next_cursor.as_deref(), Some("bmV4dA=="));

        let parent = &page.items[0];
        assert_eq!(parent.ts, "1700000002.000200");
        assert_eq!(parent.thread_ts.as_deref(), Some("1700000002.000200"));
        assert_eq!(parent.user.as_deref(), Some("U1"));
        assert_eq!(parent.text.as_deref(), Some("hello"));
        assert_eq!(parent.edited_ts.as_deref(), Some("1700000005.000000"));
        assert_eq!(parent.reply_count, Some(3));
        assert_eq!(parent.latest_reply.as_deref(), Some("1700000009.000900"));
        assert_eq!(parent.subtype, None);
        let files: Vec<_> = parent.files.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(files, ["F1", "F2"]);
        assert_eq!(parent.files[0].mimetype.as_deref(), Some("image/png"));
        assert_eq!(parent.files[1].name, None);

        let bot = &page.items[1];
        assert_eq!(bot.subtype.as_deref(), Some("bot_message"));
        assert_eq!(bot.bot_id.as_deref(), Some("B1"));
        assert_eq!(bot.user, None);
        assert!(bot.files.is_empty());
        assert_eq!(bot.edited_ts, None);
    }

    #[test]
    fn has_more_false_wins_over_a_stray_cursor() {
        let page: Page<Message> = decode::<MessagesBody>(serde_json::json!({
            "ok": true, "messages": [], "has_more": false,
            "response_metadata": { "next_cursor": "x" }
        }))
        .into();
        assert!(!page.has_more);
    }

    #[test]
    fn a_message_without_ts_fails_its_page() {
        let body = serde_json::json!({ "ok": true, "messages": [{ "text": "no ts" }] });
        assert!(serde_json::from_value::<MessagesBody>(body).is_err());
    }
}
