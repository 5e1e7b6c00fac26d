//! Raw bodies a message carries by reference outlive their retention until the message is
//! consumed or can no longer be delivered: `by_reference` marks them, consumers stamp
//! `consumed_at`, and retention stamps `stream_expires_at` (a bound on when the stream drops the
//! message) once the message has been published.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
ALTER TABLE inbound_message_body ADD COLUMN IF NOT EXISTS by_reference boolean;
-- Rows from before this migration: which ones travelled by reference is not recorded, so all
-- of them are kept as if they had (at most one stream max age longer than their retention).
UPDATE inbound_message_body SET by_reference = true WHERE by_reference IS NULL;
ALTER TABLE inbound_message_body ALTER COLUMN by_reference SET DEFAULT false;
ALTER TABLE inbound_message_body ALTER COLUMN by_reference SET NOT NULL;
ALTER TABLE inbound_message_body ADD COLUMN IF NOT EXISTS consumed_at timestamptz;
ALTER TABLE inbound_message_body ADD COLUMN IF NOT EXISTS stream_expires_at timestamptz;
"#;
