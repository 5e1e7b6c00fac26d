//! Dispatch records live only until the stream accepts their message: a published outbox row is
//! deleted, not stamped, so publishing writes no second copy of the row and no trigger rewrites
//! the inbound message. A row may also wait before the relay takes it (`available_at`), which
//! leaves a fresh row to the process that publishes it inline (ingress). An inbound message is
//! `dispatched` once its dispatch record is gone (`inbound_message_state`).

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
DROP TRIGGER IF EXISTS inbound_message_dispatched ON outbox;
DROP FUNCTION IF EXISTS inbound_message_dispatched();

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
                WHERE table_name = 'outbox' AND column_name = 'published_at') THEN
        DELETE FROM outbox WHERE published_at IS NOT NULL;
        ALTER TABLE outbox DROP COLUMN published_at;
    END IF;
END $$;

ALTER TABLE outbox ADD COLUMN IF NOT EXISTS available_at timestamptz NOT NULL DEFAULT now();
DROP INDEX IF EXISTS outbox_pending;
CREATE INDEX IF NOT EXISTS outbox_available ON outbox (available_at, id);

-- Relays wake for rows they may take now; a row that waits for an inline publisher is polled.
DROP TRIGGER IF EXISTS outbox_notify ON outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH ROW WHEN (NEW.available_at <= NEW.created_at)
    EXECUTE FUNCTION outbox_notify();

DROP INDEX IF EXISTS inbound_message_outbox;
ALTER TABLE inbound_message DROP COLUMN IF EXISTS processing_state;
ALTER TABLE inbound_message DROP COLUMN IF EXISTS attempts;
ALTER TABLE inbound_message DROP COLUMN IF EXISTS dispatched_at;

CREATE OR REPLACE VIEW inbound_message_state AS
SELECT m.id,
       CASE WHEN o.id IS NULL THEN 'dispatched' ELSE 'accepted' END AS processing_state
  FROM inbound_message m
  LEFT JOIN outbox o ON o.id = m.outbox_id;
"#;
