//! Which tables hold third-party content: what the vendor's users wrote, mirrored here. The
//! eraser clears exactly these columns; a schema test keeps the list complete.

/// A table and the columns of it that hold third-party content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentTable {
    pub table: &'static str,
    pub columns: &'static [&'static str],
}

/// Every table whose rows carry third-party content, with the content columns: what the
/// vendor's users wrote, and who they are (logins).
pub const CONTENT_TABLES: &[ContentTable] = &[
    ContentTable {
        table: "issue",
        columns: &["title", "body", "author"],
    },
    ContentTable {
        table: "pull_request",
        columns: &["title", "body", "author", "requested_reviewers"],
    },
    ContentTable {
        table: "comment",
        columns: &["body", "author"],
    },
    ContentTable {
        table: "review",
        columns: &["body", "author"],
    },
    ContentTable {
        table: "review_comment",
        columns: &["body", "author", "path"],
    },
    ContentTable {
        table: "review_thread",
        columns: &["path", "resolved_by"],
    },
];

/// Tables with content-shaped columns that the eraser does not clear, each with why.
pub const NOT_CONTENT_TABLES: &[(&str, &str)] = &[
    (
        "inbound_message_body",
        "raw webhook bodies: ingress retention deletes them on its own schedule",
    ),
    (
        "outbox",
        "messages in flight: the relay deletes each row once it is published",
    ),
    (
        "dead_message",
        "undeliverable messages kept for an operator's replay, not mirrored content",
    ),
];

/// Column names that mark a table as holding content; a table with one must be listed in
/// [`CONTENT_TABLES`] or [`NOT_CONTENT_TABLES`].
pub const CONTENT_COLUMN_NAMES: &[&str] = &[
    "title",
    "body",
    "text",
    "content",
    "payload",
    "author",
    "path",
    "resolved_by",
    "requested_reviewers",
];
