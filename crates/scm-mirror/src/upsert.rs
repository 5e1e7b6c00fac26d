//! The one way a mirror row is written: each column named once, beside its value and what a
//! conflicting write does to the stored value, turned into one
//! `INSERT ... ON CONFLICT ... DO UPDATE`. Writers of tables that share columns share the code
//! that lists them, so no two writers repeat a column list.

use sqlx::error::BoxDynError;
use sqlx::postgres::PgArguments;
// Table and column names in the SQL come only from the writers' `&'static str` literals.
use sqlx::{Arguments, AssertSqlSafe, Encode, Postgres, Type};
use uuid::Uuid;

/// What a conflicting write does to a stored column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// The written value replaces the stored one.
    Replace,
    /// A value the write does not know (NULL) keeps the stored one.
    Coalesce,
    /// A stored value stays; a write fills one the row lacks.
    KeepStored,
    /// Only an insert sets the column.
    Keep,
    /// The written value replaces the stored one where the write knows column `.0` (not NULL),
    /// and the stored one stays where it does not (e.g. a lock reason follows the lock flag).
    FollowsKnown(&'static str),
    /// The written value replaces the stored one when the write's column `.0` differs from the
    /// stored one (e.g. a head's date moves with its sha).
    FollowsChange(&'static str),
    /// The value of a rise of flag `.0`: NULL while the write's flag is false, the stored value
    /// while the stored flag was already true, else the written one (e.g. who resolved a thread).
    SinceRise(&'static str),
    /// The later of the stored and the written value.
    Greatest,
}

/// The most bytes a title is stored with. The vendors' own limits are far below (GitHub and
/// GitLab take 255 or 256 characters).
pub const MAX_TITLE_BYTES: usize = 4 * 1024;

/// The most bytes a body (an item's, a comment's, a review's) is stored with: above GitLab's
/// 1,000,000-character limit in all but four-byte text, and far above GitHub's 65,536.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// `value` cut to at most `max` bytes, at a character boundary. Whoever runs the server a
/// connection names decides what it answers, so no text is stored larger than any vendor
/// writes; a cut is counted in `mirror_fields_capped_total{table,column}`.
pub fn capped<'v>(
    table: &'static str,
    column: &'static str,
    value: &'v str,
    max: usize,
) -> &'v str {
    if value.len() <= max {
        return value;
    }
    let mut end = max;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    metrics::counter!("mirror_fields_capped_total", "table" => table, "column" => column)
        .increment(1);
    tracing::warn!(
        table,
        column,
        bytes = value.len(),
        max,
        "a vendor's text past its cap; stored cut"
    );
    &value[..end]
}

/// A row being built for one table.
#[derive(Default)]
pub struct Upsert {
    table: &'static str,
    columns: Vec<(&'static str, OnConflict)>,
    args: PgArguments,
    failed: Option<BoxDynError>,
}

impl Upsert {
    /// A row of `table` with a fresh id (a conflicting write keeps the stored id).
    pub fn new(table: &'static str) -> Self {
        let mut row = Upsert {
            table,
            ..Upsert::default()
        };
        row.set("id", OnConflict::Keep, Uuid::now_v7());
        row
    }

    /// Adds `column` with its value and its conflict rule.
    pub fn set<'t, T>(&mut self, column: &'static str, rule: OnConflict, value: T) -> &mut Self
    where
        T: Encode<'t, Postgres> + Type<Postgres>,
    {
        if let Err(e) = self.args.add(value) {
            self.failed.get_or_insert(e);
        }
        self.columns.push((column, rule));
        self
    }

    /// Adds a text column a vendor fills, cut to `max` bytes (see [`capped`]).
    pub fn set_text(
        &mut self,
        column: &'static str,
        rule: OnConflict,
        value: Option<&str>,
        max: usize,
    ) -> &mut Self {
        let value = value.map(|v| capped(self.table, column, v, max));
        self.set(column, rule, value)
    }

    fn insert(&self, key: &str) -> String {
        let names: Vec<&str> = self.columns.iter().map(|(c, _)| *c).collect();
        let values: Vec<String> = (1..=names.len()).map(|i| format!("${i}")).collect();
        format!(
            "INSERT INTO {t} ({names}) VALUES ({values}) ON CONFLICT ({key}) DO UPDATE SET ",
            t = self.table,
            names = names.join(", "),
            values = values.join(", "),
        )
    }

    fn update(&self) -> Vec<String> {
        let t = self.table;
        self.columns
            .iter()
            .filter_map(|&(c, rule)| {
                let new = match rule {
                    OnConflict::Keep => return None,
                    OnConflict::Replace => format!("EXCLUDED.{c}"),
                    OnConflict::Coalesce => format!("coalesce(EXCLUDED.{c}, {t}.{c})"),
                    OnConflict::KeepStored => format!("coalesce({t}.{c}, EXCLUDED.{c})"),
                    OnConflict::FollowsKnown(flag) => format!(
                        "CASE WHEN EXCLUDED.{flag} IS NULL THEN {t}.{c} ELSE EXCLUDED.{c} END"
                    ),
                    OnConflict::FollowsChange(other) => format!(
                        "CASE WHEN EXCLUDED.{other} IS DISTINCT FROM {t}.{other}
                              THEN EXCLUDED.{c} ELSE {t}.{c} END"
                    ),
                    OnConflict::SinceRise(flag) => format!(
                        "CASE WHEN NOT EXCLUDED.{flag} THEN NULL WHEN {t}.{flag} THEN {t}.{c}
                              ELSE EXCLUDED.{c} END"
                    ),
                    OnConflict::Greatest => format!("greatest(EXCLUDED.{c}, {t}.{c})"),
                };
                Some(format!("{c} = {new}"))
            })
            .collect()
    }

    fn arguments(self) -> Result<PgArguments, sqlx::Error> {
        match self.failed {
            Some(e) => Err(sqlx::Error::Encode(e)),
            None => Ok(self.args),
        }
    }

    /// Inserts the row, or applies each column's rule (and the assignments of `also`) to the
    /// stored row with the same `key` columns. Returns the row id.
    pub async fn write(
        self,
        txn: &mut sqlx::PgConnection,
        key: &str,
        also: &[&str],
    ) -> Result<Uuid, sqlx::Error> {
        let mut set = self.update();
        set.extend(also.iter().map(|a| (*a).to_owned()));
        let sql = format!("{}{} RETURNING id", self.insert(key), set.join(", "));
        sqlx::query_scalar_with(AssertSqlSafe(sql), self.arguments()?)
            .fetch_one(&mut *txn)
            .await
    }

    /// Inserts the row as a tombstone dated `deleted_at`, or tombstones the live stored row with
    /// the same `key` columns: `cleared` columns set to NULL, nothing else of it moved. A stored
    /// tombstone is left as it is. Returns whether a live (or missing) row was tombstoned.
    pub async fn tombstone(
        mut self,
        txn: &mut sqlx::PgConnection,
        key: &str,
        cleared: &[&str],
        deleted_at: time::OffsetDateTime,
    ) -> Result<bool, sqlx::Error> {
        self.set("deleted_at", OnConflict::Replace, deleted_at);
        let set: Vec<String> = cleared
            .iter()
            .map(|c| format!("{c} = NULL"))
            .chain([
                "deleted_at = EXCLUDED.deleted_at".to_owned(),
                "mirrored_at = now()".to_owned(),
            ])
            .collect();
        let sql = format!(
            "{}{} WHERE {}.deleted_at IS NULL RETURNING true",
            self.insert(key),
            set.join(", "),
            self.table
        );
        let newly: Option<bool> = sqlx::query_scalar_with(AssertSqlSafe(sql), self.arguments()?)
            .fetch_optional(&mut *txn)
            .await?;
        Ok(newly.is_some())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_is_cut_at_its_cap_on_a_character_boundary() {
        assert_eq!(super::capped("issue", "title", "short", 8), "short");
        // "é" is two bytes: a cut inside it keeps the whole characters before it.
        assert_eq!(super::capped("issue", "title", "abcé", 4), "abc");
        assert_eq!(super::capped("issue", "title", "abcé", 5), "abcé");
    }
}
