//! One delivery can be erased on its own (a Slack message from a channel without consent): its
//! inbound message is marked erased, and the stream ledger names the delivery each recorded
//! message carries, so its stream copies are found by sequence. A replay is found from its
//! original, since it carries the same body.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
ALTER TABLE inbound_message ADD COLUMN IF NOT EXISTS erased_at timestamptz;
ALTER TABLE stream_message ADD COLUMN IF NOT EXISTS delivery_id uuid;
CREATE INDEX IF NOT EXISTS stream_message_delivery
    ON stream_message (delivery_id) WHERE delivery_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS inbound_message_replay_of
    ON inbound_message (replay_of) WHERE replay_of IS NOT NULL;
"#;
