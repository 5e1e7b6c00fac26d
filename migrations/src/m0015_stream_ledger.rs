//! The stream ledger: where every message we publish landed (stream and sequence), with the
//! workspace, connection and repository its headers name. JetStream subjects are per repository,
//! not per tenant, so erasing one connection's messages means deleting exactly its sequences;
//! the ledger is how the eraser finds them. Rows go with the messages they name (the eraser
//! deletes both; the eraser's pruner drops rows past the streams' max age).

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
-- A header value as a uuid, or NULL when it is not one (headers are text).
CREATE OR REPLACE FUNCTION uuid_or_null(v text) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN v ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                THEN v::uuid END
$$;
CREATE TABLE IF NOT EXISTS stream_message (
    stream         text NOT NULL,
    sequence       bigint NOT NULL,
    subject        text NOT NULL,
    workspace_id   uuid,
    connection_id  uuid,
    repository_id  uuid,
    published_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream, sequence)
);
CREATE INDEX IF NOT EXISTS stream_message_connection
    ON stream_message (connection_id) WHERE connection_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS stream_message_workspace
    ON stream_message (workspace_id, repository_id) WHERE workspace_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS stream_message_published ON stream_message (published_at);
"#;
