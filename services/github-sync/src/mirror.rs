//! Mirror writes. Every content write locks the rows it compares (`FOR UPDATE`) and applies the
//! lifecycle-core rules: forward-only by the vendor's `updated_at`, partial metadata (an unknown
//! count keeps the stored one), and tombstones that clear content and are undone by the next
//! upsert.

use std::collections::HashMap;

use lifecycle_core::forward::{Freshness, by_updated_at};
use lifecycle_core::partial::{Field, PathSegment, field_errored};
// Table names in dynamic SQL come only from `ItemClass::table`, a closed set of literals.
use sqlx::{AssertSqlSafe, PgPool};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::source::{IssueNode, Page, PullRequestNode, RepoHeader};

/// Which item table a pass works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemClass {
    Issue,
    PullRequest,
}

impl ItemClass {
    pub fn table(self) -> &'static str {
        match self {
            ItemClass::Issue => "issue",
            ItemClass::PullRequest => "pull_request",
        }
    }

    /// The GraphQL connection field the nodes come from.
    fn connection_field(self) -> &'static str {
        match self {
            ItemClass::Issue => "issues",
            ItemClass::PullRequest => "pullRequests",
        }
    }
}

/// Upserts the repository by native id (a rename re-keys the row) and returns its id.
pub async fn ensure_repository(
    pool: &PgPool,
    provider_instance_id: Uuid,
    header: &RepoHeader,
) -> Result<Uuid, sqlx::Error> {
    let (id,): (Uuid,) = sqlx::query_as(
        "INSERT INTO repository (id, provider_instance_id, native_id, node_id, owner, name, archived)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (provider_instance_id, native_id) DO UPDATE
            SET node_id = EXCLUDED.node_id, owner = EXCLUDED.owner, name = EXCLUDED.name,
                archived = coalesce(EXCLUDED.archived, repository.archived),
                deleted_at = NULL, updated_at = now()
         RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(provider_instance_id)
    .bind(header.native_id)
    .bind(&header.node_id)
    .bind(&header.owner)
    .bind(&header.name)
    .bind(header.archived)
    .fetch_one(pool)
    .await?;
    Ok(id)
}

/// The live rows of a class in a repository: the sweep's candidates, captured before listing.
pub async fn live_native_ids(
    pool: &PgPool,
    class: ItemClass,
    repository_id: Uuid,
) -> Result<Vec<i64>, sqlx::Error> {
    let sql = format!(
        "SELECT native_id FROM {} WHERE repository_id = $1 AND deleted_at IS NULL",
        class.table()
    );
    let rows: Vec<(i64,)> = sqlx::query_as(AssertSqlSafe(sql))
        .bind(repository_id)
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// Tombstones rows a deletion gate planned: content cleared, `deleted_at` set once.
pub async fn tombstone(
    pool: &PgPool,
    class: ItemClass,
    repository_id: Uuid,
    native_ids: &[i64],
    deleted_at: OffsetDateTime,
) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "UPDATE {} SET deleted_at = $3, title = NULL, body = NULL
          WHERE repository_id = $1 AND native_id = ANY($2) AND deleted_at IS NULL",
        class.table()
    );
    let done = sqlx::query(AssertSqlSafe(sql))
        .bind(repository_id)
        .bind(native_ids)
        .bind(deleted_at)
        .execute(pool)
        .await?
        .rows_affected();
    Ok(done)
}

/// What a page write did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub applied: u64,
    pub stale: u64,
}

/// The stored values a write compares against and may keep.
struct Stored {
    updated_at: OffsetDateTime,
    comment_count: Option<i32>,
    review_count: Option<i32>,
}

async fn lock_stored(
    txn: &mut sqlx::PgConnection,
    class: ItemClass,
    repository_id: Uuid,
    native_ids: &[i64],
) -> Result<HashMap<i64, Stored>, sqlx::Error> {
    let review = match class {
        ItemClass::Issue => "NULL::integer",
        ItemClass::PullRequest => "review_count",
    };
    let sql = format!(
        "SELECT native_id, upstream_updated_at, comment_count, {review} FROM {}
          WHERE repository_id = $1 AND native_id = ANY($2) ORDER BY native_id FOR UPDATE",
        class.table()
    );
    let rows: Vec<(i64, OffsetDateTime, Option<i32>, Option<i32>)> =
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(repository_id)
            .bind(native_ids)
            .fetch_all(&mut *txn)
            .await?;
    Ok(rows
        .into_iter()
        .map(|(id, updated_at, comment_count, review_count)| {
            (
                id,
                Stored {
                    updated_at,
                    comment_count,
                    review_count,
                },
            )
        })
        .collect())
}

/// A count field of node `index`: unknown when the vendor reported an error at its path.
fn count_field(
    page_errors: &[Vec<PathSegment>],
    class: ItemClass,
    index: usize,
    field: &str,
    value: Option<i32>,
) -> Field<Option<i32>> {
    let path = [
        PathSegment::Key("repository".into()),
        PathSegment::Key(class.connection_field().into()),
        PathSegment::Key("nodes".into()),
        PathSegment::Index(index),
        PathSegment::Key(field.into()),
    ];
    // Partial metadata: an errored or missing count is unknown, never zero.
    match value {
        Some(v) if !field_errored(page_errors, &path) => Field::Known(Some(v)),
        _ => Field::Unknown,
    }
}

fn resolve(
    field: Field<Option<i32>>,
    stored: Option<&Stored>,
    pick: fn(&Stored) -> Option<i32>,
) -> Option<i32> {
    match stored {
        Some(s) => field.merge(pick(s)),
        None => field.or_insert_default(None),
    }
}

/// Writes a page of issues.
pub async fn upsert_issues(
    pool: &PgPool,
    repository_id: Uuid,
    page: &Page<IssueNode>,
) -> Result<Written, sqlx::Error> {
    let ids: Vec<i64> = page.nodes.iter().map(|n| n.native_id).collect();
    let mut txn = pool.begin().await?;
    let stored = lock_stored(&mut txn, ItemClass::Issue, repository_id, &ids).await?;
    let mut written = Written::default();
    for (i, n) in page.nodes.iter().enumerate() {
        let prior = stored.get(&n.native_id);
        // Forward-only: an older payload changes nothing.
        if by_updated_at(prior.map(|s| s.updated_at), n.updated_at) == Freshness::Stale {
            written.stale += 1;
            continue;
        }
        let comments = count_field(
            &page.error_paths,
            ItemClass::Issue,
            i,
            "comments",
            n.comment_count,
        );
        let comment_count = resolve(comments, prior, |s| s.comment_count);
        sqlx::query(
            "INSERT INTO issue (id, repository_id, native_id, node_id, number, title, body, state,
                                state_reason, author, locked, lock_reason, comment_count,
                                upstream_created_at, upstream_updated_at, closed_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
             ON CONFLICT (repository_id, native_id) DO UPDATE SET
                node_id = EXCLUDED.node_id, number = EXCLUDED.number, title = EXCLUDED.title,
                body = EXCLUDED.body, state = EXCLUDED.state, state_reason = EXCLUDED.state_reason,
                author = EXCLUDED.author, locked = coalesce(EXCLUDED.locked, issue.locked),
                lock_reason = CASE WHEN EXCLUDED.locked IS NULL THEN issue.lock_reason
                                   ELSE EXCLUDED.lock_reason END,
                comment_count = EXCLUDED.comment_count,
                upstream_created_at = EXCLUDED.upstream_created_at,
                upstream_updated_at = EXCLUDED.upstream_updated_at,
                closed_at = EXCLUDED.closed_at, deleted_at = NULL, mirrored_at = now()",
        )
        .bind(Uuid::now_v7())
        .bind(repository_id)
        .bind(n.native_id)
        .bind(&n.node_id)
        .bind(n.number)
        .bind(&n.title)
        .bind(&n.body)
        .bind(&n.state)
        .bind(&n.state_reason)
        .bind(&n.author)
        .bind(n.locked)
        .bind(&n.lock_reason)
        .bind(comment_count)
        .bind(n.created_at)
        .bind(n.updated_at)
        .bind(n.closed_at)
        .execute(&mut *txn)
        .await?;
        written.applied += 1;
    }
    txn.commit().await?;
    Ok(written)
}

/// Writes a page of pull requests.
pub async fn upsert_pull_requests(
    pool: &PgPool,
    repository_id: Uuid,
    page: &Page<PullRequestNode>,
) -> Result<Written, sqlx::Error> {
    let ids: Vec<i64> = page.nodes.iter().map(|n| n.native_id).collect();
    let mut txn = pool.begin().await?;
    let stored = lock_stored(&mut txn, ItemClass::PullRequest, repository_id, &ids).await?;
    let mut written = Written::default();
    for (i, n) in page.nodes.iter().enumerate() {
        let prior = stored.get(&n.native_id);
        // Forward-only: an older payload changes nothing.
        if by_updated_at(prior.map(|s| s.updated_at), n.updated_at) == Freshness::Stale {
            written.stale += 1;
            continue;
        }
        let class = ItemClass::PullRequest;
        let comments = count_field(&page.error_paths, class, i, "comments", n.comment_count);
        let reviews = count_field(&page.error_paths, class, i, "reviews", n.review_count);
        let comment_count = resolve(comments, prior, |s| s.comment_count);
        let review_count = resolve(reviews, prior, |s| s.review_count);
        sqlx::query(
            "INSERT INTO pull_request (id, repository_id, native_id, node_id, number, title, body,
                                       state, draft, author, locked, lock_reason, comment_count,
                                       review_count, head_ref, head_sha, base_ref,
                                       upstream_created_at, upstream_updated_at, closed_at, merged_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                     $18, $19, $20, $21)
             ON CONFLICT (repository_id, native_id) DO UPDATE SET
                node_id = EXCLUDED.node_id, number = EXCLUDED.number, title = EXCLUDED.title,
                body = EXCLUDED.body, state = EXCLUDED.state,
                draft = coalesce(EXCLUDED.draft, pull_request.draft), author = EXCLUDED.author,
                locked = coalesce(EXCLUDED.locked, pull_request.locked),
                lock_reason = CASE WHEN EXCLUDED.locked IS NULL THEN pull_request.lock_reason
                                   ELSE EXCLUDED.lock_reason END,
                comment_count = EXCLUDED.comment_count, review_count = EXCLUDED.review_count,
                head_ref = coalesce(EXCLUDED.head_ref, pull_request.head_ref),
                head_sha = coalesce(EXCLUDED.head_sha, pull_request.head_sha),
                base_ref = coalesce(EXCLUDED.base_ref, pull_request.base_ref),
                upstream_created_at = EXCLUDED.upstream_created_at,
                upstream_updated_at = EXCLUDED.upstream_updated_at,
                closed_at = EXCLUDED.closed_at, merged_at = EXCLUDED.merged_at,
                deleted_at = NULL, mirrored_at = now()",
        )
        .bind(Uuid::now_v7())
        .bind(repository_id)
        .bind(n.native_id)
        .bind(&n.node_id)
        .bind(n.number)
        .bind(&n.title)
        .bind(&n.body)
        .bind(&n.state)
        .bind(n.draft)
        .bind(&n.author)
        .bind(n.locked)
        .bind(&n.lock_reason)
        .bind(comment_count)
        .bind(review_count)
        .bind(&n.head_ref)
        .bind(&n.head_sha)
        .bind(&n.base_ref)
        .bind(n.created_at)
        .bind(n.updated_at)
        .bind(n.closed_at)
        .bind(n.merged_at)
        .execute(&mut *txn)
        .await?;
        written.applied += 1;
    }
    txn.commit().await?;
    Ok(written)
}
