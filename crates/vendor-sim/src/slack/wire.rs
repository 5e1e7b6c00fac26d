//! Slack's JSON shapes of channels, messages and message events, shared by the Web API answers
//! and the Events API deliveries.

use serde_json::{Value as Json, json};

use super::model::{Channel, Message, Ts};

/// A conversation object as `conversations.list` and `conversations.info` answer it.
pub(crate) fn channel_json(c: &Channel) -> Json {
    json!({
        "id": c.id,
        "name": c.name,
        "name_normalized": c.name,
        "is_channel": true,
        "is_group": false,
        "is_im": false,
        "is_mpim": false,
        "is_private": c.is_private,
        "created": c.created,
        "creator": "",
        "is_archived": c.is_archived,
        "is_general": false,
        "unlinked": 0,
        "is_shared": false,
        "is_ext_shared": false,
        "is_org_shared": false,
        "is_pending_ext_shared": false,
        "pending_shared": [],
        "context_team_id": c.team,
        "shared_team_ids": [c.team],
        "parent_conversation": null,
        "is_member": c.bot_member,
        "topic": { "value": "", "creator": "", "last_set": 0 },
        "purpose": { "value": "", "creator": "", "last_set": 0 },
        "previous_names": c.previous_names,
    })
}

/// The fields of a message itself, as history, replies and events carry them.
fn message_fields(c: &Channel, m: &Message) -> Json {
    let mut out = json!({
        "type": "message",
        "ts": m.ts.to_string(),
        "text": m.text,
        "team": c.team,
    });
    let o = out.as_object_mut().expect("an object");
    if let Some(user) = &m.user {
        o.insert("user".into(), json!(user));
    }
    if let Some(subtype) = &m.subtype {
        o.insert("subtype".into(), json!(subtype));
    }
    if let Some(bot_id) = &m.bot_id {
        o.insert("bot_id".into(), json!(bot_id));
    }
    if let Some(username) = &m.username {
        o.insert("username".into(), json!(username));
    }
    if let Some(thread_ts) = m.thread_ts {
        o.insert("thread_ts".into(), json!(thread_ts.to_string()));
    }
    if let Some((user, ts)) = &m.edited {
        o.insert(
            "edited".into(),
            json!({ "user": user, "ts": ts.to_string() }),
        );
    }
    if !m.files.is_empty() {
        let files: Vec<Json> = m
            .files
            .iter()
            .map(|f| {
                json!({
                    "id": f.id,
                    "name": f.name,
                    "title": f.name,
                    "mimetype": f.mimetype,
                    "user": m.user,
                    "mode": "hosted",
                })
            })
            .collect();
        o.insert("files".into(), json!(files));
        o.insert("upload".into(), json!(false));
    }
    if !m.attachments.is_empty() {
        o.insert("attachments".into(), json!(m.attachments));
    }
    out
}

/// A message as `conversations.history` and `conversations.replies` answer it: a thread's root
/// with `reply_count`, `reply_users`, `latest_reply`; a reply with `parent_user_id`.
pub(crate) fn message_json(c: &Channel, m: &Message) -> Json {
    let mut out = message_fields(c, m);
    if m.thread_ts == Some(m.ts) {
        let replies: Vec<&Message> = c.replies(m.ts).collect();
        let mut users: Vec<String> = Vec::new();
        for r in &replies {
            if let Some(u) = &r.user
                && !users.contains(u)
            {
                users.push(u.clone());
            }
        }
        out["reply_count"] = json!(replies.len());
        out["reply_users_count"] = json!(users.len());
        out["reply_users"] = json!(users);
        out["latest_reply"] = json!(replies.last().map_or(m.ts, |r| r.ts).to_string());
        out["is_locked"] = json!(false);
        out["subscribed"] = json!(false);
    } else if let Some(root) = m.thread_ts
        && let Some(parent) = c.messages.get(&root)
    {
        out["parent_user_id"] = json!(parent.user.clone().or(parent.bot_id.clone()));
    }
    out
}

fn channel_type(c: &Channel) -> &'static str {
    if c.is_private { "group" } else { "channel" }
}

/// A new message's `message` event.
pub(crate) fn message_event_base(c: &Channel, m: &Message) -> Json {
    let mut event = message_fields(c, m);
    event["channel"] = json!(c.id);
    event["event_ts"] = json!(m.ts.to_string());
    event["channel_type"] = json!(channel_type(c));
    event
}

/// `message_changed`: the message now and before, stamped with the change's own `ts`.
pub(crate) fn message_changed(c: &Channel, previous: &Message, event_ts: Ts) -> Json {
    let now = c.messages.get(&previous.ts);
    json!({
        "type": "message",
        "subtype": "message_changed",
        "hidden": true,
        "channel": c.id,
        "ts": event_ts.to_string(),
        "event_ts": event_ts.to_string(),
        "channel_type": channel_type(c),
        "message": now.map(|m| message_json(c, m)),
        "previous_message": message_json(c, previous),
    })
}

/// `message_deleted`: `deleted_ts` names the message, `ts` is the deletion's own.
pub(crate) fn message_deleted(c: &Channel, previous: &Message, event_ts: Ts) -> Json {
    json!({
        "type": "message",
        "subtype": "message_deleted",
        "hidden": true,
        "channel": c.id,
        "ts": event_ts.to_string(),
        "event_ts": event_ts.to_string(),
        "deleted_ts": previous.ts.to_string(),
        "channel_type": channel_type(c),
        "previous_message": message_fields(c, previous),
    })
}
