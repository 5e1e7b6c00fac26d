//! Mirror writes. Every content write locks the rows it compares (`FOR UPDATE`) and applies the
//! lifecycle-core rules: forward-only by the vendor's `updated_at`, partial metadata (an unknown
//! count keeps the stored one), and tombstones that clear content and are undone by the next
//! upsert.

use std::collections::HashMap;

use lifecycle_core::forward::{self, Freshness, Push, PushOutcome, StoredHead, by_updated_at};
use lifecycle_core::partial::{Field, PathSegment, field_errored};
use lifecycle_core::source_key::LifecycleChange;
// Table names in dynamic SQL come only from `ItemClass::table`, a closed set of literals.
use sqlx::{AssertSqlSafe, PgPool};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::events::{self, Origin};
use crate::source::{IssueNode, Page, PullRequestNode, RepoHeader};
use crate::webhooks::misfiled;

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
pub async fn ensure_repository<'e>(
    executor: impl sqlx::PgExecutor<'e>,
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
    .fetch_one(executor)
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

/// The stored row a write compares against, read with the row locked.
#[derive(Debug, Clone)]
pub struct StoredItem {
    pub id: Uuid,
    pub updated_at: OffsetDateTime,
    pub state: String,
    pub closed_at: Option<OffsetDateTime>,
    pub merged_at: Option<OffsetDateTime>,
    pub draft: Option<bool>,
    pub head_sha: Option<String>,
    pub head_changed_at: Option<OffsetDateTime>,
    pub comment_count: Option<i32>,
    pub review_count: Option<i32>,
}

type StoredRow = (
    i64,
    Uuid,
    OffsetDateTime,
    String,
    Option<OffsetDateTime>,
    Option<OffsetDateTime>,
    Option<bool>,
    Option<String>,
    Option<OffsetDateTime>,
    Option<i32>,
    Option<i32>,
);

/// Locks and reads the rows of `native_ids` (in id order, so concurrent writers never deadlock).
pub async fn lock_items(
    txn: &mut sqlx::PgConnection,
    class: ItemClass,
    repository_id: Uuid,
    native_ids: &[i64],
) -> Result<HashMap<i64, StoredItem>, sqlx::Error> {
    let columns = match class {
        ItemClass::Issue => {
            "NULL::timestamptz, NULL::boolean, NULL::text, NULL::timestamptz, comment_count,
             NULL::integer"
        }
        ItemClass::PullRequest => {
            "merged_at, draft, head_sha, head_changed_at, comment_count, review_count"
        }
    };
    let sql = format!(
        "SELECT native_id, id, upstream_updated_at, state, closed_at, {columns} FROM {}
          WHERE repository_id = $1 AND native_id = ANY($2) ORDER BY native_id FOR UPDATE",
        class.table()
    );
    let rows: Vec<StoredRow> = sqlx::query_as(AssertSqlSafe(sql))
        .bind(repository_id)
        .bind(native_ids)
        .fetch_all(&mut *txn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.0,
                StoredItem {
                    id: r.1,
                    updated_at: r.2,
                    state: r.3,
                    closed_at: r.4,
                    merged_at: r.5,
                    draft: r.6,
                    head_sha: r.7,
                    head_changed_at: r.8,
                    comment_count: r.9,
                    review_count: r.10,
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

/// A count as a webhook reports it: a payload without it keeps the stored value.
pub fn reported_count(value: Option<i32>) -> Field<Option<i32>> {
    match value {
        Some(v) => Field::Known(Some(v)),
        None => Field::Absent,
    }
}

fn resolve(
    field: Field<Option<i32>>,
    stored: Option<&StoredItem>,
    pick: fn(&StoredItem) -> Option<i32>,
) -> Option<i32> {
    match stored {
        Some(s) => field.merge(pick(s)),
        None => field.or_insert_default(None),
    }
}

/// Writes one issue over its locked row (the caller checked freshness); returns the row id.
pub async fn write_issue(
    txn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    n: &IssueNode,
    comments: Field<Option<i32>>,
    prior: Option<&StoredItem>,
) -> Result<Uuid, sqlx::Error> {
    let comment_count = resolve(comments, prior, |s| s.comment_count);
    let (id,): (Uuid,) = sqlx::query_as(
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
            closed_at = EXCLUDED.closed_at, deleted_at = NULL, mirrored_at = now()
         RETURNING id",
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
    .fetch_one(&mut *txn)
    .await?;
    Ok(id)
}

/// Whether a write may move the stored head: heads only move forward by the provider's date; in
/// the same second only a push that continues from the stored head moves it.
pub fn head_moves(prior: Option<&StoredItem>, n: &PullRequestNode, push: Option<&Push>) -> bool {
    let Some(prior) = prior else { return true };
    let (Some(stored_sha), Some(changed_at)) = (&prior.head_sha, prior.head_changed_at) else {
        return true;
    };
    if n.head_sha.as_deref() == Some(stored_sha.as_str()) {
        return false;
    }
    match push {
        Some(push) => {
            let stored = StoredHead {
                sha: stored_sha.clone(),
                changed_at,
            };
            forward::push(Some(&stored), push) == PushOutcome::MoveHead
        }
        None => n.updated_at > changed_at,
    }
}

/// Writes one pull request over its locked row (the caller checked freshness); returns the id.
pub async fn write_pull_request(
    txn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    n: &PullRequestNode,
    counts: (Field<Option<i32>>, Field<Option<i32>>),
    prior: Option<&StoredItem>,
    move_head: bool,
) -> Result<Uuid, sqlx::Error> {
    let comment_count = resolve(counts.0, prior, |s| s.comment_count);
    let review_count = resolve(counts.1, prior, |s| s.review_count);
    let (id,): (Uuid,) = sqlx::query_as(
        "INSERT INTO pull_request (id, repository_id, native_id, node_id, number, title, body,
                                   state, draft, author, locked, lock_reason, comment_count,
                                   review_count, head_ref, head_sha, base_ref,
                                   upstream_created_at, upstream_updated_at, closed_at, merged_at,
                                   head_changed_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                 $18, $19, $20, $21, $19)
         ON CONFLICT (repository_id, native_id) DO UPDATE SET
            node_id = EXCLUDED.node_id, number = EXCLUDED.number, title = EXCLUDED.title,
            body = EXCLUDED.body, state = EXCLUDED.state,
            draft = coalesce(EXCLUDED.draft, pull_request.draft), author = EXCLUDED.author,
            locked = coalesce(EXCLUDED.locked, pull_request.locked),
            lock_reason = CASE WHEN EXCLUDED.locked IS NULL THEN pull_request.lock_reason
                               ELSE EXCLUDED.lock_reason END,
            comment_count = EXCLUDED.comment_count, review_count = EXCLUDED.review_count,
            head_ref = CASE WHEN $22 THEN coalesce(EXCLUDED.head_ref, pull_request.head_ref)
                            ELSE pull_request.head_ref END,
            head_sha = CASE WHEN $22 THEN coalesce(EXCLUDED.head_sha, pull_request.head_sha)
                            ELSE pull_request.head_sha END,
            head_changed_at = CASE
                WHEN $22 AND EXCLUDED.head_sha IS DISTINCT FROM pull_request.head_sha
                THEN EXCLUDED.upstream_updated_at ELSE pull_request.head_changed_at END,
            base_ref = coalesce(EXCLUDED.base_ref, pull_request.base_ref),
            upstream_created_at = EXCLUDED.upstream_created_at,
            upstream_updated_at = EXCLUDED.upstream_updated_at,
            closed_at = EXCLUDED.closed_at, merged_at = EXCLUDED.merged_at,
            deleted_at = NULL, mirrored_at = now()
         RETURNING id",
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
    .bind(move_head)
    .fetch_one(&mut *txn)
    .await?;
    Ok(id)
}

/// The close a write stored, when it stored one the row did not have (a sync reports a close
/// only when it stores it, so reading a closed item again adds nothing).
fn stored_close(
    prior: Option<&StoredItem>,
    state: &str,
    closed_at: Option<OffsetDateTime>,
) -> Option<OffsetDateTime> {
    let prior = prior?;
    let closed_at = closed_at.filter(|_| state == "closed")?;
    (prior.state != "closed" || prior.closed_at != Some(closed_at)).then_some(closed_at)
}

/// Writes a page of issues; closes it stores become sync-discovered item events.
pub async fn upsert_issues(
    pool: &PgPool,
    repository_id: Uuid,
    page: &Page<IssueNode>,
) -> Result<Written, sqlx::Error> {
    let ids: Vec<i64> = page.nodes.iter().map(|n| n.native_id).collect();
    let mut txn = pool.begin().await?;
    let keys: Vec<(i64, i32)> = page.nodes.iter().map(|n| (n.native_id, n.number)).collect();
    let skipped = misfiled::refile_page(&mut txn, ItemClass::Issue, repository_id, &keys).await?;
    let stored = lock_items(&mut txn, ItemClass::Issue, repository_id, &ids).await?;
    let mut written = Written::default();
    for (i, n) in page.nodes.iter().enumerate() {
        // Misfiled work that cannot move stays with its holding repository.
        if skipped.contains(&n.native_id) {
            continue;
        }
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
        let id = write_issue(&mut txn, repository_id, n, comments, prior).await?;
        if let Some(closed_at) = stored_close(prior, &n.state, n.closed_at) {
            let item = events::Item::issue(id, repository_id);
            let change = LifecycleChange::Close { closed_at };
            events::record(&mut txn, &item, &change, n.updated_at, Origin::Sync).await?;
        }
        written.applied += 1;
    }
    txn.commit().await?;
    Ok(written)
}

/// Writes a page of pull requests; closes and merges it stores become sync-discovered events.
pub async fn upsert_pull_requests(
    pool: &PgPool,
    repository_id: Uuid,
    page: &Page<PullRequestNode>,
) -> Result<Written, sqlx::Error> {
    let ids: Vec<i64> = page.nodes.iter().map(|n| n.native_id).collect();
    let mut txn = pool.begin().await?;
    let keys: Vec<(i64, i32)> = page.nodes.iter().map(|n| (n.native_id, n.number)).collect();
    let class = ItemClass::PullRequest;
    let skipped = misfiled::refile_page(&mut txn, class, repository_id, &keys).await?;
    let stored = lock_items(&mut txn, class, repository_id, &ids).await?;
    let mut written = Written::default();
    for (i, n) in page.nodes.iter().enumerate() {
        // Misfiled work that cannot move stays with its holding repository.
        if skipped.contains(&n.native_id) {
            continue;
        }
        let prior = stored.get(&n.native_id);
        // Forward-only: an older payload changes nothing.
        if by_updated_at(prior.map(|s| s.updated_at), n.updated_at) == Freshness::Stale {
            written.stale += 1;
            continue;
        }
        let comments = count_field(&page.error_paths, class, i, "comments", n.comment_count);
        let reviews = count_field(&page.error_paths, class, i, "reviews", n.review_count);
        let move_head = head_moves(prior, n, None);
        let id = write_pull_request(
            &mut txn,
            repository_id,
            n,
            (comments, reviews),
            prior,
            move_head,
        )
        .await?;
        // A sync records a close or a merge only when it stores one; never a push or a ready
        // (GitHub redelivers the webhooks that carry those).
        let item = events::Item::pull_request(id, repository_id);
        let merged = n.merged_at.filter(|_| n.state == "merged");
        if let (Some(prior), Some(merged_at)) = (prior, merged) {
            if prior.merged_at != Some(merged_at) {
                let change = LifecycleChange::Merge { merged_at };
                events::record(&mut txn, &item, &change, n.updated_at, Origin::Sync).await?;
            }
        } else if let Some(closed_at) = stored_close(prior, &n.state, n.closed_at) {
            let change = LifecycleChange::Close { closed_at };
            events::record(&mut txn, &item, &change, n.updated_at, Origin::Sync).await?;
        }
        written.applied += 1;
    }
    txn.commit().await?;
    Ok(written)
}
