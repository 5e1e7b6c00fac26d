//! Webhook ingress: endpoints, received messages and their raw bodies, dedup keys, and an
//! optional explicit JetStream message id on the outbox.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
-- When set, the relay publishes with this id instead of the row id (ingress uses its dedup key).
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS msg_id text;

-- One address vendors deliver to, owned by one connection. Secrets are names of sealed
-- connection_secret rows; the previous one verifies until previous_valid_until.
CREATE TABLE IF NOT EXISTS inbound_endpoint (
    id                    uuid PRIMARY KEY,
    workspace_id          uuid NOT NULL REFERENCES workspace (id),
    connection_id         uuid NOT NULL REFERENCES connection (id),
    kind                  text NOT NULL CHECK (kind IN ('github', 'gitlab', 'slack', 'outline')),
    address_token         text UNIQUE,
    registration          text NOT NULL CHECK (registration IN ('operator', 'registered', 'app')),
    provider_ref          text,
    secret_current        text NOT NULL,
    secret_previous       text,
    previous_valid_until  timestamptz,
    -- sha256 of GitLab's plain-text token: how the shared GitLab route finds its endpoint.
    token_lookup          text,
    previous_token_lookup text,
    status                text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'rotating', 'disabled')),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS inbound_endpoint_connection ON inbound_endpoint (connection_id);
CREATE INDEX IF NOT EXISTS inbound_endpoint_provider_ref ON inbound_endpoint (kind, provider_ref);
CREATE INDEX IF NOT EXISTS inbound_endpoint_token_lookup ON inbound_endpoint (token_lookup);
CREATE INDEX IF NOT EXISTS inbound_endpoint_previous_token_lookup
    ON inbound_endpoint (previous_token_lookup);

CREATE TABLE IF NOT EXISTS inbound_message (
    id                 uuid PRIMARY KEY,
    endpoint_id        uuid NOT NULL REFERENCES inbound_endpoint (id),
    workspace_id       uuid NOT NULL,
    connection_id      uuid NOT NULL,
    kind               text NOT NULL CHECK (kind IN ('github', 'gitlab', 'slack', 'outline')),
    verification       text NOT NULL,
    headers            jsonb NOT NULL DEFAULT '{}'::jsonb,
    body_digest        text NOT NULL,
    provider_event_id  text,
    event              text NOT NULL,
    subject            text NOT NULL,
    msg_id             text NOT NULL,
    outbox_id          uuid NOT NULL,
    processing_state   text NOT NULL DEFAULT 'accepted' CHECK (processing_state IN ('accepted', 'dispatched')),
    attempts           integer NOT NULL DEFAULT 0,
    replay_of          uuid REFERENCES inbound_message (id),
    received_at        timestamptz NOT NULL DEFAULT now(),
    dispatched_at      timestamptz
);
CREATE INDEX IF NOT EXISTS inbound_message_connection ON inbound_message (connection_id, received_at DESC);
CREATE INDEX IF NOT EXISTS inbound_message_outbox ON inbound_message (outbox_id);

-- Raw bytes live apart from the message row: they expire (retain_until) and are erasable.
CREATE TABLE IF NOT EXISTS inbound_message_body (
    message_id     uuid PRIMARY KEY REFERENCES inbound_message (id) ON DELETE CASCADE
                       DEFERRABLE INITIALLY DEFERRED,
    connection_id  uuid NOT NULL,
    body           bytea NOT NULL,
    retain_until   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS inbound_message_body_retain ON inbound_message_body (retain_until);
CREATE INDEX IF NOT EXISTS inbound_message_body_connection ON inbound_message_body (connection_id);

-- Provider event ids never expire (expires_at NULL); body digests do. An expired digest row is
-- taken over by the next insert of the same key (INSERT ... ON CONFLICT DO UPDATE ... WHERE).
CREATE TABLE IF NOT EXISTS dedup_key (
    endpoint_id  uuid NOT NULL REFERENCES inbound_endpoint (id),
    key          text NOT NULL,
    message_id   uuid NOT NULL,
    expires_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint_id, key)
);
CREATE INDEX IF NOT EXISTS dedup_key_expiry ON dedup_key (expires_at) WHERE expires_at IS NOT NULL;

-- The relay stamps published_at; the message it carried becomes dispatched.
CREATE OR REPLACE FUNCTION inbound_message_dispatched() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE inbound_message
       SET processing_state = 'dispatched', dispatched_at = NEW.published_at, attempts = attempts + 1
     WHERE outbox_id = NEW.id AND processing_state = 'accepted';
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS inbound_message_dispatched ON outbox;
CREATE TRIGGER inbound_message_dispatched AFTER UPDATE OF published_at ON outbox
    FOR EACH ROW WHEN (OLD.published_at IS NULL AND NEW.published_at IS NOT NULL)
    EXECUTE FUNCTION inbound_message_dispatched();
"#;
