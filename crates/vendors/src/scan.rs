//! The erasure-completeness scan: how many rows and messages of a workspace's connections remain,
//! per place. Zero everywhere after an erasure is the promise; before one, the scan shows what an
//! erasure would have to remove.
//!
//! The table list is derived from the schema, not only from the registrations: every table with
//! a `connection_id`, `workspace_id` or `repository_id` column, a repository scope's
//! `scope_kind`/`scope_id` (the engine's `listing_state`), a `headers` column naming
//! connections, or a foreign-key path to such a table or to `repository`, is searched, except the
//! retained tables (`store::erasure::RETAINED`). A content table nobody registered therefore
//! shows up with `registered: false` instead of escaping the eraser unnoticed (and the schema
//! check, [`crate::schema`], fails the build over it first).
//!
//! The workspace's repositories are those its connections' monitors are bound to plus those its
//! erasures captured and did not keep for another workspace.

use std::collections::{BTreeMap, BTreeSet};

use futures::TryStreamExt as _;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, FromQueryResult, Statement};
use serde::Serialize;
use store::erasure::{ERASER_OWN, Erasable, RETAINED};
use uuid::Uuid;

/// One place searched and what it still holds of the workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Place {
    /// `table:<name>`, `stream:<name>` (messages the stream ledger still records) or
    /// `subject:<filter>` (messages the stream holds on a subject the workspace owns alone).
    pub place: String,
    pub count: i64,
    /// Whether some holder registered it with the eraser.
    pub registered: bool,
}

/// The scan of one workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScanReport {
    pub workspace_id: Uuid,
    /// Every connection the workspace has had.
    pub connections: Vec<Uuid>,
    /// Every place searched, by name.
    pub places: Vec<Place>,
    /// The sum of every count: zero once the workspace's content is erased.
    pub total: i64,
}

impl ScanReport {
    /// The places that still hold something.
    pub fn remaining(&self) -> impl Iterator<Item = &Place> {
        self.places.iter().filter(|p| p.count > 0)
    }
}

/// Why a scan failed.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("database: {0}")]
    Db(#[from] DbErr),
    #[error("database: {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("stream: {0}")]
    Stream(String),
}

#[derive(FromQueryResult)]
pub(crate) struct Column {
    pub(crate) table_name: String,
    pub(crate) column_name: String,
    pub(crate) data_type: String,
}

#[derive(FromQueryResult)]
struct ForeignKey {
    from_table: String,
    from_column: String,
    to_table: String,
    to_column: String,
}

#[derive(FromQueryResult)]
struct Id {
    id: Uuid,
}

#[derive(FromQueryResult)]
struct Count {
    n: i64,
}

/// The schema as the scan (and the schema check) reads it.
pub(crate) struct Schema {
    /// Per base table, its columns and their types.
    pub(crate) columns: BTreeMap<String, BTreeMap<String, String>>,
    foreign_keys: Vec<ForeignKey>,
}

/// Parameters of every predicate: `$1` the connections (uuid[] text), `$2` the workspace,
/// `$3` the repositories (uuid[] text).
const CONNECTIONS: &str = "$1::uuid[]";
const REPOSITORIES: &str = "$3::uuid[]";

/// Foreign-key hops followed from a table at most.
const MAX_DEPTH: usize = 4;

impl Schema {
    pub(crate) async fn read<C: ConnectionTrait>(db: &C) -> Result<Schema, DbErr> {
        let mut columns: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for c in Column::find_by_statement(Statement::from_string(
            DbBackend::Postgres,
            "SELECT c.table_name::text AS table_name, c.column_name::text AS column_name,
                    c.data_type::text AS data_type
               FROM information_schema.columns c
               JOIN information_schema.tables t
                 ON t.table_schema = c.table_schema AND t.table_name = c.table_name
              WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'",
        ))
        .all(db)
        .await?
        {
            columns
                .entry(c.table_name)
                .or_default()
                .insert(c.column_name, c.data_type);
        }
        let foreign_keys = ForeignKey::find_by_statement(Statement::from_string(
            DbBackend::Postgres,
            "SELECT src.relname::text AS from_table, sa.attname::text AS from_column,
                    dst.relname::text AS to_table, da.attname::text AS to_column
               FROM pg_constraint k
               JOIN pg_class src ON src.oid = k.conrelid
               JOIN pg_class dst ON dst.oid = k.confrelid
               JOIN pg_namespace n ON n.oid = src.relnamespace AND n.nspname = current_schema()
               JOIN pg_attribute sa ON sa.attrelid = k.conrelid AND sa.attnum = k.conkey[1]
               JOIN pg_attribute da ON da.attrelid = k.confrelid AND da.attnum = k.confkey[1]
              WHERE k.contype = 'f' AND array_length(k.conkey, 1) = 1",
        ))
        .all(db)
        .await?;
        Ok(Schema {
            columns,
            foreign_keys,
        })
    }

    /// The predicate selecting the workspace's rows of `table`, if any can be.
    pub(crate) fn predicate(
        &self,
        table: &str,
        depth: usize,
        path: &mut Vec<String>,
    ) -> Option<String> {
        let columns = self.columns.get(table)?;
        let mut parts = Vec::new();
        match table {
            "repository" => parts.push(format!("id = ANY({REPOSITORIES})")),
            "connection" => parts.push(format!("id = ANY({CONNECTIONS})")),
            "workspace" => parts.push("id = $2".to_owned()),
            _ => {}
        }
        if columns.contains_key("connection_id") {
            parts.push(format!("connection_id = ANY({CONNECTIONS})"));
        }
        if columns.contains_key("workspace_id") {
            parts.push("workspace_id = $2".to_owned());
        }
        if columns.contains_key("repository_id") {
            parts.push(format!("repository_id = ANY({REPOSITORIES})"));
        }
        // The engine's per-scope rows (`listing_state`) name a repository scope by kind and id,
        // with no foreign key to follow.
        if columns.contains_key("scope_kind") && columns.contains_key("scope_id") {
            parts.push(format!(
                "(scope_kind = 'repository' AND scope_id = ANY({REPOSITORIES}))"
            ));
        }
        if columns.get("headers").is_some_and(|t| t == "jsonb") {
            parts.push(format!(
                "(headers ->> '{c}' = ANY({CONNECTIONS}::text[]) OR headers ->> '{w}' = $2::text)",
                c = store::headers::CONNECTION,
                w = store::headers::WORKSPACE,
            ));
        }
        if depth < MAX_DEPTH {
            path.push(table.to_owned());
            for fk in self.foreign_keys.iter().filter(|fk| fk.from_table == table) {
                if path.contains(&fk.to_table) {
                    continue;
                }
                if let Some(inner) = self.predicate(&fk.to_table, depth + 1, path) {
                    parts.push(format!(
                        "\"{}\" IN (SELECT \"{}\" FROM \"{}\" WHERE {inner})",
                        fk.from_column, fk.to_column, fk.to_table
                    ));
                }
            }
            path.pop();
        }
        (!parts.is_empty()).then(|| parts.join(" OR "))
    }
}

/// Scans every place for the workspace's rows and messages.
#[tracing::instrument(skip(db, bus, holders))]
pub async fn scan(
    db: &DatabaseConnection,
    bus: &bus::Bus,
    holders: &[&Erasable],
    workspace_id: Uuid,
) -> Result<ScanReport, ScanError> {
    let connections: Vec<Uuid> = Id::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT id FROM connection WHERE workspace_id = $1 ORDER BY id",
        [workspace_id.into()],
    ))
    .all(db)
    .await?
    .into_iter()
    .map(|r| r.id)
    .collect();
    let repositories: Vec<Uuid> = Id::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        format!(
            "SELECT r.id FROM repository_to_monitor m, connection c, repository r
              WHERE m.workspace_id = $1 AND {binds}
             UNION
             SELECT er.repository_id FROM erasure_repository er JOIN erasure e ON e.id = er.erasure_id
              WHERE e.workspace_id = $1 AND er.fate IS DISTINCT FROM 'kept'",
            binds = store::scm_scope::binds_predicate()
        ),
        [workspace_id.into()],
    ))
    .all(db)
    .await?
    .into_iter()
    .map(|r| r.id)
    .collect();
    let params = || {
        [
            store::erasure::uuid_array(&connections).into(),
            workspace_id.into(),
            store::erasure::uuid_array(&repositories).into(),
        ]
    };

    let schema = Schema::read(db).await?;
    let registered: BTreeSet<&str> = holders
        .iter()
        .flat_map(|h| h.tables.iter().map(|t| t.table))
        .collect();
    let retained: BTreeSet<&str> = RETAINED.iter().map(|(t, _)| *t).collect();
    let mut places = Vec::new();
    for table in schema.columns.keys() {
        if retained.contains(table.as_str()) {
            continue;
        }
        let Some(predicate) = schema.predicate(table, 0, &mut Vec::new()) else {
            continue;
        };
        let n = Count::find_by_statement(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!("SELECT count(*) AS n FROM \"{table}\" WHERE {predicate}"),
            params(),
        ))
        .one(db)
        .await?
        .map_or(0, |c| c.n);
        places.push(Place {
            place: format!("table:{table}"),
            count: n,
            registered: registered.contains(table.as_str())
                || ERASER_OWN.iter().any(|(t, _)| t == table),
        });
    }

    // Stream copies the ledger still records, per stream a holder erases from.
    let streams: BTreeSet<&str> = holders
        .iter()
        .flat_map(|h| h.streams.iter().chain(h.repository_streams).copied())
        .collect();
    for stream in streams {
        let mut values = params().to_vec();
        values.push(stream.into());
        let n = Count::find_by_statement(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "SELECT count(*) AS n FROM stream_message
                  WHERE stream = $4 AND (connection_id = ANY({CONNECTIONS}) OR workspace_id = $2)"
            ),
            values,
        ))
        .one(db)
        .await?
        .map_or(0, |c| c.n);
        places.push(Place {
            place: format!("stream:{stream}"),
            count: n,
            registered: true,
        });
    }

    // Subjects the workspace or one of its connections owns alone, counted by the server.
    let kinds = connection_kinds(db, workspace_id).await?;
    let pool = db.get_postgres_connection_pool();
    let mut subjects = BTreeSet::new();
    for holder in holders {
        subjects.extend((holder.workspace_subjects)(workspace_id));
        for (id, kind) in &kinds {
            if holder.holds(*kind) {
                subjects.extend((holder.connection_subjects)(pool, *id).await?);
            }
        }
    }
    for filter in subjects {
        let Some(stream) = bus::Stream::for_subject(&filter) else {
            continue;
        };
        let name = bus.namespace().name(stream.name());
        let handle = bus
            .jetstream()
            .get_stream(&name)
            .await
            .map_err(|e| ScanError::Stream(format!("stream {name}: {e}")))?;
        let counts: Vec<(String, usize)> = handle
            .info_with_subjects(bus.namespace().subject(&filter))
            .await
            .map_err(|e| ScanError::Stream(format!("stream {name}: {e}")))?
            .try_collect()
            .await
            .map_err(|e| ScanError::Stream(format!("stream {name}: {e}")))?;
        places.push(Place {
            place: format!("subject:{filter}"),
            count: counts.iter().map(|(_, n)| *n as i64).sum(),
            registered: true,
        });
    }
    let total = places.iter().map(|p| p.count).sum();
    Ok(ScanReport {
        workspace_id,
        connections,
        places,
        total,
    })
}

#[derive(FromQueryResult)]
struct KindRow {
    id: Uuid,
    kind: store::entity::ConnectionKind,
}

async fn connection_kinds<C: ConnectionTrait>(
    db: &C,
    workspace_id: Uuid,
) -> Result<Vec<(Uuid, store::entity::ConnectionKind)>, DbErr> {
    Ok(KindRow::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT id, kind FROM connection WHERE workspace_id = $1 ORDER BY id",
        [workspace_id.into()],
    ))
    .all(db)
    .await?
    .into_iter()
    .map(|r| (r.id, r.kind))
    .collect())
}
