//! The schema check: the migrated schema against the holders' declarations. Every table that
//! carries a connection's or workspace's id, or a column shaped like content, is registered by
//! some holder or retained with its reason; every content-shaped column is declared by the holder
//! of its table; and every table and column a declaration names exists. A test runs it over the
//! real migrations, so a migration adding a table nobody declares fails the build instead of
//! escaping the eraser.

use std::collections::BTreeSet;
use std::fmt;

use sea_orm::{ConnectionTrait, DbErr};
use store::erasure::{CONTENT_COLUMN_NAMES, ERASER_OWN, Erasable, RETAINED};

use crate::scan::Schema;

/// One way the schema and the declarations disagree.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Finding {
    /// A table with a connection or workspace id, or content, that no holder registers and
    /// `RETAINED` does not list: the eraser would never reach it.
    Unregistered { table: String },
    /// A content-shaped column that no holder declares as content.
    UndeclaredContent { table: String, column: String },
    /// A retained table with a content-shaped column: retained rows must hold no content.
    RetainedContent { table: String, column: String },
    /// A holder declares content in a table it does not erase.
    ContentNotErased { holder: String, table: String },
    /// A declaration names a table or column the schema does not have.
    Missing {
        holder: String,
        table: String,
        column: Option<String>,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Unregistered { table } => write!(
                f,
                "table {table} holds a connection's or workspace's rows but no holder registers it \
                 (declare it in its vendor's Erasable, or add it to store::erasure::RETAINED with \
                 the reason it holds no content)"
            ),
            Finding::UndeclaredContent { table, column } => write!(
                f,
                "{table}.{column} looks like content but no holder declares it in Erasable::content"
            ),
            Finding::RetainedContent { table, column } => write!(
                f,
                "{table} is retained through erasure but has the content-shaped column {column}"
            ),
            Finding::ContentNotErased { holder, table } => write!(
                f,
                "holder {holder} declares content in {table} but does not erase that table"
            ),
            Finding::Missing {
                holder,
                table,
                column: Some(column),
            } => write!(
                f,
                "holder {holder} names {table}.{column}, which the schema lacks"
            ),
            Finding::Missing {
                holder,
                table,
                column: None,
            } => write!(
                f,
                "holder {holder} names table {table}, which the schema lacks"
            ),
        }
    }
}

/// Checks the schema `db` is migrated to against `holders` (normally [`crate::holders`]).
/// Empty when every table and column is accounted for.
pub async fn check<C: ConnectionTrait>(
    db: &C,
    holders: &[&Erasable],
) -> Result<Vec<Finding>, DbErr> {
    let schema = Schema::read(db).await?;
    let registered: BTreeSet<&str> = holders
        .iter()
        .flat_map(|h| h.tables.iter().map(|t| t.table))
        .chain(ERASER_OWN.iter().map(|(t, _)| *t))
        .collect();
    let retained: BTreeSet<&str> = RETAINED.iter().map(|(t, _)| *t).collect();
    let declared: BTreeSet<(&str, &str)> = holders
        .iter()
        .flat_map(|h| h.content.iter())
        .flat_map(|c| c.columns.iter().map(move |col| (c.table, *col)))
        .collect();
    let mut findings = Vec::new();
    for (table, columns) in &schema.columns {
        let content: Vec<&str> = columns
            .keys()
            .map(String::as_str)
            .filter(|c| CONTENT_COLUMN_NAMES.contains(c))
            .collect();
        let tied = columns.contains_key("connection_id") || columns.contains_key("workspace_id");
        if retained.contains(table.as_str()) {
            findings.extend(content.iter().map(|c| Finding::RetainedContent {
                table: table.clone(),
                column: (*c).to_owned(),
            }));
            continue;
        }
        if (tied || !content.is_empty()) && !registered.contains(table.as_str()) {
            findings.push(Finding::Unregistered {
                table: table.clone(),
            });
        }
        for c in content {
            if !declared.contains(&(table.as_str(), c)) {
                findings.push(Finding::UndeclaredContent {
                    table: table.clone(),
                    column: c.to_owned(),
                });
            }
        }
    }
    for h in holders {
        for t in h.tables {
            if !schema.columns.contains_key(t.table) {
                findings.push(Finding::Missing {
                    holder: h.holder.to_owned(),
                    table: t.table.to_owned(),
                    column: None,
                });
            }
        }
        for c in h.content {
            if !h.tables.iter().any(|t| t.table == c.table) {
                findings.push(Finding::ContentNotErased {
                    holder: h.holder.to_owned(),
                    table: c.table.to_owned(),
                });
            }
            for col in c.columns {
                let present = schema
                    .columns
                    .get(c.table)
                    .is_some_and(|cols| cols.contains_key(*col));
                if !present {
                    findings.push(Finding::Missing {
                        holder: h.holder.to_owned(),
                        table: c.table.to_owned(),
                        column: Some((*col).to_owned()),
                    });
                }
            }
        }
    }
    for (t, _) in RETAINED.iter().chain(ERASER_OWN) {
        if !schema.columns.contains_key(*t) {
            findings.push(Finding::Missing {
                holder: "store::erasure".to_owned(),
                table: (*t).to_owned(),
                column: None,
            });
        }
    }
    findings.sort();
    findings.dedup();
    Ok(findings)
}
