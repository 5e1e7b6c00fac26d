//! Outline: the collections a connection reads and the documents in them. Both are keyed by the
//! connection and never shared between connections; the eraser deletes them whole.
//!
//! A document's `updated_at` is Outline's `updatedAt`, the key its writes move forward by; its
//! `deleted_at` is a tombstone (title and text cleared), dated by the deletion. A deletion of a
//! document never held keeps an empty tombstone, without a version, so a late older copy is never
//! inserted. A collection
//! awaits a clean pass until a reconcile lists it whole, and keeps the outcome of its last pass.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS outline_collection (
    id                   uuid PRIMARY KEY,
    connection_id        uuid NOT NULL REFERENCES connection (id) ON DELETE CASCADE,
    workspace_id         uuid NOT NULL,
    outline_id           text NOT NULL,
    name                 text,
    url_id               text,
    -- Outline's `updatedAt`; NULL while only a document has named the collection.
    updated_at           timestamptz,
    deleted_at           timestamptz,
    awaiting_clean_pass  boolean NOT NULL DEFAULT true,
    last_clean_pass_at   timestamptz,
    last_outcome         text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    seen_at              timestamptz NOT NULL DEFAULT now(),
    UNIQUE (connection_id, outline_id)
);
CREATE INDEX IF NOT EXISTS outline_collection_workspace ON outline_collection (workspace_id, id);

CREATE TABLE IF NOT EXISTS outline_document (
    id                     uuid PRIMARY KEY,
    connection_id          uuid NOT NULL REFERENCES connection (id) ON DELETE CASCADE,
    collection_id          uuid NOT NULL REFERENCES outline_collection (id) ON DELETE CASCADE,
    outline_id             text NOT NULL,
    collection_outline_id  text NOT NULL,
    parent_outline_id      text,
    title                  text,
    text                   text,
    url_id                 text,
    created_at_upstream    timestamptz,
    -- NULL only for a document known by its deletion alone.
    updated_at             timestamptz,
    published_at           timestamptz,
    archived_at            timestamptz,
    deleted_at             timestamptz,
    created_at             timestamptz NOT NULL DEFAULT now(),
    seen_at                timestamptz NOT NULL DEFAULT now(),
    UNIQUE (connection_id, outline_id)
);
CREATE INDEX IF NOT EXISTS outline_document_page
    ON outline_document (connection_id, collection_id, id);
CREATE INDEX IF NOT EXISTS outline_document_by_connection ON outline_document (connection_id, id);
CREATE INDEX IF NOT EXISTS outline_document_reconcile
    ON outline_document (connection_id, collection_outline_id) WHERE deleted_at IS NULL;
"#;
