//! The generic event ledger: one row per change any vendor reports (its scope, item, type and
//! source key, when it happened, the workspaces it fans out to), whose unique key absorbs a
//! second report of the same change. A forge item's change is one case of it (scope: its
//! repository, erased with it); a vendor whose content is one connection's alone names that
//! connection, and its rows go with the connection.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS integration_event (
    id             uuid PRIMARY KEY,
    connection_id  uuid,
    subject_kind   text NOT NULL CHECK (subject_kind ~ '^[a-z][a-z0-9_]*$'),
    subject_id     uuid NOT NULL,
    item_kind      text NOT NULL,
    item_id        uuid NOT NULL,
    type           text NOT NULL,
    source_key     text NOT NULL,
    occurred_at    timestamptz,
    workspace_ids  uuid[] NOT NULL DEFAULT '{}',
    recorded_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS integration_event_source_key
    ON integration_event (item_kind, item_id, type, source_key);
CREATE INDEX IF NOT EXISTS integration_event_subject
    ON integration_event (subject_kind, subject_id);
CREATE INDEX IF NOT EXISTS integration_event_connection
    ON integration_event (connection_id) WHERE connection_id IS NOT NULL;
"#;
