//! The content-table list against the migrated schema: every table with a content-shaped column
//! is listed or excluded with a reason, and every listed column exists.

use std::collections::BTreeSet;

use anyhow::Result;
use scm_mirror::content::{CONTENT_COLUMN_NAMES, CONTENT_TABLES, NOT_CONTENT_TABLES};
use testkit::TestDb;

#[tokio::test]
async fn every_table_with_content_columns_is_listed_or_excluded() -> Result<()> {
    let db = TestDb::new().await?;
    let pool = db.db.get_postgres_connection_pool();
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns
          WHERE table_schema = 'public'",
    )
    .fetch_all(pool)
    .await?;
    let schema: BTreeSet<(String, String)> = columns.into_iter().collect();
    let listed: BTreeSet<&str> = CONTENT_TABLES
        .iter()
        .map(|t| t.table)
        .chain(NOT_CONTENT_TABLES.iter().map(|(t, _)| *t))
        .collect();
    let unlisted: BTreeSet<&str> = schema
        .iter()
        .filter(|(_, c)| CONTENT_COLUMN_NAMES.contains(&c.as_str()))
        .map(|(t, _)| t.as_str())
        .filter(|t| !listed.contains(t))
        .collect();
    assert!(
        unlisted.is_empty(),
        "tables with content columns missing from CONTENT_TABLES/NOT_CONTENT_TABLES: {unlisted:?}"
    );
    for t in CONTENT_TABLES {
        for c in t.columns {
            assert!(
                schema.contains(&(t.table.to_owned(), (*c).to_owned())),
                "CONTENT_TABLES names {}.{c}, which the schema does not have",
                t.table
            );
        }
    }
    for (t, _) in NOT_CONTENT_TABLES {
        assert!(
            schema.iter().any(|(table, _)| table == t),
            "NOT_CONTENT_TABLES names {t}, which the schema does not have"
        );
    }
    Ok(())
}
