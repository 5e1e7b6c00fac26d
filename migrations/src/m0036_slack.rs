//! Slack: the channels a connection can see, each with its consent state, and the messages of
//! the channels it consented to, from the announcement on. Both are keyed by the connection and
//! never shared between connections; the eraser deletes them whole.
//!
//! A message's `ts` is Slack's own identity of it within its channel, stored as the exact
//! decimal it is (`numeric(16,6)`: seconds and microseconds), so it orders and compares as
//! Slack does.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS slack_channel (
    id              uuid PRIMARY KEY,
    connection_id   uuid NOT NULL,
    workspace_id    uuid NOT NULL,
    slack_id        text NOT NULL,
    name            text,
    is_private      boolean NOT NULL DEFAULT false,
    -- none: known from the directory, nothing kept; pending: granted, not yet announced (why in
    -- `reason`); active: announced at `consent_ts`, kept from then on; paused: kept up to the
    -- pause, nothing after it until a resume moves `consent_ts` to the resume.
    status          text NOT NULL DEFAULT 'none'
                    CHECK (status IN ('none', 'pending', 'active', 'paused')),
    reason          text,
    consent_ts      numeric(16,6),
    status_at       timestamptz NOT NULL DEFAULT now(),
    last_replay_at  timestamptz,
    dropped         bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (connection_id, slack_id)
);
CREATE INDEX IF NOT EXISTS slack_channel_workspace ON slack_channel (workspace_id);

CREATE TABLE IF NOT EXISTS slack_message (
    id              uuid PRIMARY KEY,
    channel_id      uuid NOT NULL REFERENCES slack_channel (id) ON DELETE CASCADE,
    connection_id   uuid NOT NULL,
    ts              numeric(16,6) NOT NULL,
    thread_ts       numeric(16,6),
    user_id         text,
    subtype         text,
    text            text,
    files           jsonb,
    edited_ts       numeric(16,6),
    -- A tombstone: `message_deleted` cleared the text and files. A tombstone of a ts never seen
    -- keeps a late copy of the message from being inserted.
    deleted_at      timestamptz,
    -- A thread parent's newest reply as Slack last reported it, and the newest reply a replay
    -- has read its thread up to: a replay reads the thread again only while they differ.
    latest_reply    numeric(16,6),
    replies_read    numeric(16,6),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (channel_id, ts)
);
CREATE INDEX IF NOT EXISTS slack_message_connection ON slack_message (connection_id);
CREATE INDEX IF NOT EXISTS slack_message_thread ON slack_message (channel_id, thread_ts)
    WHERE thread_ts IS NOT NULL;
"#;
