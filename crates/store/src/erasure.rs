//! The `Erasable` contract: what each holder of third-party content declares so the eraser can
//! remove a connection's copy of it, everywhere, on disconnect and on purge.
//!
//! A holder names its tables in the order they must go (derived rows first), how the rows of
//! one connection (or of one repository it erases) are selected, the streams whose messages of
//! the connection it holds, and the subjects that belong to one connection alone. The eraser
//! runs every registration in `order`; the erasure-completeness scan reads the same
//! registrations and, beside them, derives from the schema every table that could hold a
//! connection's or a repository's rows, so a table nobody registered still shows up.
//!
//! Registrations are not kept here: each vendor declares its holders where its own code lives,
//! and one shared list (`crates/vendors`) collects them for the eraser and the scan.

use std::future::Future;
use std::pin::Pin;

use sea_orm::{ConnectionTrait, DbBackend, DbErr, FromQueryResult, Statement};
use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::entity::ConnectionKind;

/// How the rows of one table that belong to what is being erased are selected: an SQL
/// predicate over the table's own columns (unqualified), with numbered parameters as each
/// variant says. Every predicate is our own constant text; ids travel as parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selector {
    /// A connection's rows: `$1` is the connection id.
    Connection(&'static str),
    /// A connection's repository monitors, removed right after the covered repositories are
    /// captured (the orphan guard's first half): `$1` is the connection id.
    Monitors(&'static str),
    /// A workspace's own rows derived from a repository it no longer covers (its activity
    /// entries), removed even when the repository stays for others: `$1` is the workspace id,
    /// `$2` the repository id.
    WorkspaceRepository(&'static str),
    /// The rows of a repository no monitor anywhere covers any more, the repository row itself
    /// last: `$1` is the repository id.
    Repository(&'static str),
    /// A purged workspace's own rows that no connection names (its activity entries, its item
    /// events in flight): `$1` is the workspace id. Run after every connection is erased.
    Workspace(&'static str),
    /// The organization tier (teams, memberships) of an organization the erased connection
    /// bound and no other live workspace binds (`ErasureStep::EraseOrganizationTier`): `$1` is
    /// the organization id. The organization row itself is never selected.
    Organization(&'static str),
}

/// A table and the columns of it that hold third-party content: what the vendor's users wrote,
/// and who they are (logins, user ids). The schema check holds every content-shaped column of
/// the schema to some holder's declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentTable {
    pub table: &'static str,
    pub columns: &'static [&'static str],
}

/// Column names that mark a column as content; a column so named must be declared in some
/// holder's [`Erasable::content`], or its table must be one whose rows the holder deletes whole
/// for another reason (declared in [`Erasable::content`] too, with the column).
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

/// The future of a subject lookup ([`ConnectionSubjects`]).
pub type SubjectsFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<String>, sqlx::Error>> + Send + 'a>>;

/// The subjects that belong to one connection alone, looked up with database access (a vendor
/// may key them by an id it stores, such as a subscription the vendor assigned).
pub type ConnectionSubjects = for<'a> fn(&'a sqlx::PgPool, Uuid) -> SubjectsFuture<'a>;

/// One table of a holder and how its rows are selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErasableTable {
    pub table: &'static str,
    pub selector: Selector,
}

/// What one holder of third-party content registers with the eraser.
#[derive(Debug, Clone, Copy)]
pub struct Erasable {
    /// Who holds it (the service or crate that writes these tables), for records and logs.
    pub holder: &'static str,
    /// Holders run in ascending order; the mirror (derived rows, items) goes before the raw
    /// copies it was built from, so a crash never leaves mirror rows without their source
    /// having been erasable.
    pub order: i32,
    /// The connection kinds whose content it holds; empty: every kind.
    pub kinds: &'static [ConnectionKind],
    /// Its tables in deletion order (within each selector kind).
    pub tables: &'static [ErasableTable],
    /// The content columns of its tables (every table listed here is one of `tables`).
    pub content: &'static [ContentTable],
    /// Logical stream names (`WEBHOOKS_GITHUB`, `EVENTS`) whose recorded messages of the
    /// connection it holds: deleted one by one, by sequence, from the stream ledger.
    pub streams: &'static [&'static str],
    /// Logical stream names whose recorded messages about a repository (the
    /// `Forgesync-Repository` header) of the connection's workspace it holds: deleted when the
    /// workspace no longer covers that repository.
    pub repository_streams: &'static [&'static str],
    /// The subjects that belong to a connection of a kind it holds alone, purged whole
    /// (subject filters).
    pub connection_subjects: ConnectionSubjects,
    /// The subjects that belong to a workspace alone, purged whole when it is purged.
    pub workspace_subjects: fn(Uuid) -> Vec<String>,
}

impl Erasable {
    /// Whether it holds content of connections of `kind`.
    pub fn holds(&self, kind: ConnectionKind) -> bool {
        self.kinds.is_empty() || self.kinds.contains(&kind)
    }

    /// Its tables selected by a [`Selector`] kind, in deletion order.
    pub fn tables_where(
        &self,
        kind: fn(&Selector) -> bool,
    ) -> impl Iterator<Item = &'static ErasableTable> {
        self.tables.iter().filter(move |t| kind(&t.selector))
    }
}

/// The header-matching predicate of a table whose `headers` jsonb names the connection
/// (dispatch records, dead messages).
pub const CONNECTION_HEADER: &str = "headers ->> 'Forgesync-Connection' = $1::text";

/// A uuid-array literal (`{a,b}`), bound as one text parameter and cast with `$n::uuid[]`.
pub fn uuid_array(ids: &[Uuid]) -> String {
    format!(
        "{{{}}}",
        ids.iter()
            .map(Uuid::to_string)
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// For holders without connection-owned subjects.
pub fn no_subjects(_: &sqlx::PgPool, _: Uuid) -> SubjectsFuture<'_> {
    Box::pin(async { Ok(Vec::new()) })
}

/// For holders without workspace-owned subjects.
pub fn no_workspace_subjects(_: Uuid) -> Vec<String> {
    Vec::new()
}

/// Tables that carry a connection's or workspace's id but no third-party content, each with
/// why it stays; the scan leaves them out. Everything else the schema ties to a connection, a
/// workspace or a repository must be registered by some holder, or the scan reports it.
pub const RETAINED: &[(&str, &str)] = &[
    ("workspace", "the tenant itself; a purge marks it purged"),
    (
        "connection",
        "the connection's state (disconnected) and version, for audit",
    ),
    (
        "connection_provider_repair",
        "a workspace's reference to a provider repair fence (ids, version) and the sealed removal \
         credential, cleared when the fence settles; the row goes with the workspace",
    ),
    (
        "inbound_endpoint",
        "disabled endpoints keep answering 410 so vendors stop delivering",
    ),
    (
        "sync_job",
        "operational audit without content, capped by the pruner",
    ),
    (
        "connection_activity",
        "operational audit without content, capped by the pruner",
    ),
    ("connection_audit", "who changed what, when: audit"),
    ("erasure", "the erasure records themselves: ids and counts"),
    (
        "provider_registration",
        "what we created at a vendor (ids, marker, URL hash; no content): provider repair removes it after the connection is gone",
    ),
    (
        "erasure_repository",
        "which repositories an erasure deleted or kept: ids only",
    ),
    (
        "oauth_state",
        "an authorization's state as a hash, bound to a connection's ids and generation; it \
         expires, and goes with the workspace",
    ),
    (
        "slack_exchange",
        "a Slack authorization attempt (Slack's team and bot user ids, a token fingerprint; no \
         content) kept for an admin when its outcome is unknown; it goes with the workspace",
    ),
    (
        "workspace_usage",
        "bytes and deliveries a workspace stored a day, for its quota: counts only, pruned after a day",
    ),
];

/// Tables erased outside every holder's registration, by the eraser itself or by the
/// disconnection, each with how.
pub const ERASER_OWN: &[(&str, &str)] = &[
    (
        "stream_message",
        "the stream ledger: the eraser deletes a connection's messages by it, then its rows",
    ),
    (
        "connection_secret",
        "the disconnection deletes a connection's secrets in its own transaction \
         (store::repair::capture); the removal credential lives on sealed in the repair reference",
    ),
];

/// One erasure as stored.
#[derive(Debug, Clone, PartialEq, FromQueryResult, Serialize)]
pub struct ErasureRecord {
    pub id: Uuid,
    pub workspace_id: Uuid,
    /// `None` for the workspace's own part of a purge.
    pub connection_id: Option<Uuid>,
    /// `disconnect` or `purge`: whichever trigger came first.
    pub trigger: String,
    /// `running` or `done`.
    pub status: String,
    /// Names of the steps done, in order.
    pub steps_done: serde_json::Value,
    /// [`Counts`] as a JSON object.
    pub counts: serde_json::Value,
    pub started_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub finished_at: Option<OffsetDateTime>,
}

impl ErasureRecord {
    pub fn is_done(&self) -> bool {
        self.status == "done"
    }
}

/// The columns of [`ErasureRecord`], in order.
pub const COLUMNS: &str = "id, workspace_id, connection_id, trigger, status, steps_done, counts, \
                       started_at, updated_at, finished_at";

/// Every erasure of a workspace, oldest first (the workspace's own part last when it exists).
pub async fn of_workspace<C: ConnectionTrait>(
    db: &C,
    workspace_id: Uuid,
) -> Result<Vec<ErasureRecord>, DbErr> {
    ErasureRecord::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        format!(
            "SELECT {COLUMNS} FROM erasure WHERE workspace_id = $1 \
             ORDER BY connection_id IS NULL, started_at, id"
        ),
        [workspace_id.into()],
    ))
    .all(db)
    .await
}
