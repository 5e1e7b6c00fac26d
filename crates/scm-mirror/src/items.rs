//! Issues and pull requests. Every write locks the rows it compares (`FOR UPDATE`, in id order)
//! and applies the lifecycle-core rules: forward-only by the vendor's `updated_at`, partial
//! metadata (an unknown count keeps the stored one), and tombstones that clear content and are
//! undone by the next upsert. [`compare_write`] is the one forward-only step every writer uses.

use std::collections::HashMap;

use lifecycle_core::forward::{self, Freshness, Push, PushOutcome, StoredHead, by_updated_at};
use lifecycle_core::partial::Field;
use lifecycle_core::source_key::LifecycleChange;
use sqlx::postgres::PgRow;
// Table names in dynamic SQL come only from `ItemClass::table`, a closed set of literals.
use sqlx::{AssertSqlSafe, PgPool, Row};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::upsert::{MAX_BODY_BYTES, MAX_TITLE_BYTES, OnConflict, Upsert};

/// Which item table a write works on.
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
}

/// What every issue and pull request carries, as the vendor reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemFields {
    pub native_id: i64,
    pub node_id: String,
    pub number: i32,
    pub title: String,
    pub body: String,
    /// `open` or `closed`; a pull request may also be `merged`.
    pub state: String,
    pub author: Option<String>,
    pub locked: Option<bool>,
    pub lock_reason: Option<String>,
    /// `None` when the vendor reported an error for the count (unknown, not zero).
    pub comment_count: Option<i32>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub closed_at: Option<OffsetDateTime>,
}

/// One issue as the vendor reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueNode {
    pub fields: ItemFields,
    pub state_reason: Option<String>,
}

/// One pull request as the vendor reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestNode {
    pub fields: ItemFields,
    pub draft: Option<bool>,
    pub review_count: Option<i32>,
    pub head_ref: Option<String>,
    pub head_sha: Option<String>,
    pub base_ref: Option<String>,
    pub merged_at: Option<OffsetDateTime>,
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
    sqlx::query_scalar(AssertSqlSafe(sql))
        .bind(repository_id)
        .fetch_all(pool)
        .await
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

/// The stored row a write compares against, read with the row locked.
#[derive(Debug, Clone)]
pub struct StoredItem {
    pub native_id: i64,
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

impl<'r> sqlx::FromRow<'r, PgRow> for StoredItem {
    fn from_row(row: &'r PgRow) -> Result<Self, sqlx::Error> {
        Ok(StoredItem {
            native_id: row.try_get("native_id")?,
            id: row.try_get("id")?,
            updated_at: row.try_get("upstream_updated_at")?,
            state: row.try_get("state")?,
            closed_at: row.try_get("closed_at")?,
            merged_at: row.try_get("merged_at")?,
            draft: row.try_get("draft")?,
            head_sha: row.try_get("head_sha")?,
            head_changed_at: row.try_get("head_changed_at")?,
            comment_count: row.try_get("comment_count")?,
            review_count: row.try_get("review_count")?,
        })
    }
}

/// Locks and reads the rows of `native_ids` (in id order, so concurrent writers never deadlock).
pub async fn lock_items(
    txn: &mut sqlx::PgConnection,
    class: ItemClass,
    repository_id: Uuid,
    native_ids: &[i64],
) -> Result<HashMap<i64, StoredItem>, sqlx::Error> {
    let columns = match class {
        ItemClass::Issue => {
            "NULL::timestamptz AS merged_at, NULL::boolean AS draft, NULL::text AS head_sha,
             NULL::timestamptz AS head_changed_at, comment_count, NULL::integer AS review_count"
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
    let rows: Vec<StoredItem> = sqlx::query_as(AssertSqlSafe(sql))
        .bind(repository_id)
        .bind(native_ids)
        .fetch_all(&mut *txn)
        .await?;
    Ok(rows.into_iter().map(|r| (r.native_id, r)).collect())
}

/// The counts a write reports. Issues have no review count: theirs is ignored.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub comments: Field<Option<i32>>,
    pub reviews: Field<Option<i32>>,
}

impl Counts {
    /// Counts as a webhook reports them: a payload without one keeps the stored value, and a
    /// webhook never reports a review count.
    pub fn reported(comments: Option<i32>) -> Self {
        Counts {
            comments: reported_count(comments),
            reviews: Field::Absent,
        }
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

/// An issue or a pull request as a writer holds it.
pub trait ItemNode: Sync {
    /// The table the node is written to.
    const CLASS: ItemClass;
    /// What the node shares with every item.
    fn fields(&self) -> &ItemFields;
    /// Adds the columns only its class has.
    fn class_columns(&self, row: &mut Upsert, cx: WriteContext<'_>);

    /// Who the node is and which version of it this is.
    fn key(&self) -> ItemKey {
        let f = self.fields();
        ItemKey {
            native_id: f.native_id,
            number: f.number,
            updated_at: f.updated_at,
        }
    }
}

impl ItemFields {
    /// Adds the columns every item table has.
    fn columns(&self, row: &mut Upsert, repository_id: Uuid, comment_count: Option<i32>) {
        use OnConflict::{Coalesce, FollowsKnown, Keep, Replace};
        row.set("repository_id", Keep, repository_id)
            .set("native_id", Keep, self.native_id)
            .set("node_id", Replace, &self.node_id)
            .set("number", Replace, self.number)
            .set_text("title", Replace, Some(&self.title), MAX_TITLE_BYTES)
            .set_text("body", Replace, Some(&self.body), MAX_BODY_BYTES)
            .set("state", Replace, &self.state)
            // Partial metadata: a writer that does not know the author (a GitLab hook names
            // only the actor) keeps the stored one.
            .set("author", Coalesce, &self.author)
            // Partial metadata: an unknown lock keeps the stored lock and its reason.
            .set("locked", Coalesce, self.locked)
            .set("lock_reason", FollowsKnown("locked"), &self.lock_reason)
            .set("comment_count", Replace, comment_count)
            .set("upstream_created_at", Replace, self.created_at)
            .set("upstream_updated_at", Replace, self.updated_at)
            .set("closed_at", Replace, self.closed_at);
    }
}

/// What a write works from beside the node.
#[derive(Debug, Clone, Copy)]
pub struct WriteContext<'a> {
    /// The counts the write reports.
    pub counts: Counts,
    /// The row it writes over, locked; `None` for a new item.
    pub prior: Option<&'a StoredItem>,
    /// The head move a webhook reports, if any.
    pub push: Option<&'a Push>,
}

/// Writes the node over its locked row (the caller checked freshness); returns the row id. An
/// upsert undoes a tombstone.
async fn write<N: ItemNode>(
    txn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    node: &N,
    cx: WriteContext<'_>,
) -> Result<Uuid, sqlx::Error> {
    let mut row = Upsert::new(N::CLASS.table());
    let comment_count = resolve(cx.counts.comments, cx.prior, |s| s.comment_count);
    node.fields()
        .columns(&mut row, repository_id, comment_count);
    node.class_columns(&mut row, cx);
    let also = ["deleted_at = NULL", "mirrored_at = now()"];
    row.write(txn, "repository_id, native_id", &also).await
}

/// An item's identity and version, as a writer compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemKey {
    pub native_id: i64,
    /// The item's number in its repository.
    pub number: i32,
    /// The vendor's `updated_at`: the version forward-only compares.
    pub updated_at: OffsetDateTime,
}

/// What the forward-only step did to one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemStep {
    /// The item's row id.
    pub id: Uuid,
    /// `Stale`: the stored row is newer and was left as it was.
    pub freshness: Freshness,
}

/// The forward-only step, over a row its caller locked: an older node changes nothing,
/// anything else is written.
pub async fn compare_write<N: ItemNode>(
    txn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    node: &N,
    counts: Counts,
    prior: Option<&StoredItem>,
    push: Option<&Push>,
) -> Result<ItemStep, sqlx::Error> {
    // Forward-only: an older payload changes nothing.
    let freshness = by_updated_at(prior.map(|p| p.updated_at), node.key().updated_at);
    let id = match (freshness, prior) {
        (Freshness::Stale, Some(prior)) => prior.id,
        _ => {
            let cx = WriteContext {
                counts,
                prior,
                push,
            };
            write(txn, repository_id, node, cx).await?
        }
    };
    Ok(ItemStep { id, freshness })
}

/// Locks one item and applies [`compare_write`]; returns the step and the row as it was.
pub async fn lock_compare_write<N: ItemNode>(
    txn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    node: &N,
    counts: Counts,
    push: Option<&Push>,
) -> Result<(ItemStep, Option<StoredItem>), sqlx::Error> {
    let native_id = node.key().native_id;
    let mut stored = lock_items(txn, N::CLASS, repository_id, &[native_id]).await?;
    let prior = stored.remove(&native_id);
    let step = compare_write(txn, repository_id, node, counts, prior.as_ref(), push).await?;
    Ok((step, prior))
}

/// The item a comment or review belongs to, locked; created from the payload when it is not
/// mirrored yet (a stub the item's own writers move forward later). An existing row is never
/// written from here.
pub async fn lock_or_stub<N: ItemNode>(
    txn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    node: &N,
    counts: Counts,
) -> Result<Uuid, sqlx::Error> {
    let native_id = node.key().native_id;
    let stored = lock_items(txn, N::CLASS, repository_id, &[native_id]).await?;
    match stored.get(&native_id) {
        Some(prior) => Ok(prior.id),
        None => {
            let cx = WriteContext {
                counts,
                prior: None,
                push: None,
            };
            write(txn, repository_id, node, cx).await
        }
    }
}

/// The close a write stored, when it stored one the row did not have (a sync reports a close
/// only when it stores it, so reading a closed item again adds nothing).
pub fn stored_close(
    prior: Option<&StoredItem>,
    state: &str,
    closed_at: Option<OffsetDateTime>,
) -> Option<OffsetDateTime> {
    let prior = prior?;
    let closed_at = closed_at.filter(|_| state == "closed")?;
    (prior.state != "closed" || prior.closed_at != Some(closed_at)).then_some(closed_at)
}

/// The ready, draft and push a fresh write of `node` stored over `prior`, under the source keys a
/// hook of the same change derives (a draft flag change dated by the item's version, a head
/// move from the stored head): a sync records them so that a lost hook loses nothing, and a hook
/// arriving after the sync adds nothing. A new item reports none (its opening is its own event).
pub fn stored_pull_request_changes<'a>(
    prior: Option<&'a StoredItem>,
    node: &'a PullRequestNode,
) -> Vec<LifecycleChange<'a>> {
    let Some(prior) = prior else {
        return Vec::new();
    };
    let at = node.fields.updated_at;
    let mut changes = Vec::new();
    match (prior.draft, node.draft) {
        (Some(true), Some(false)) => changes.push(LifecycleChange::Ready { at }),
        (Some(false), Some(true)) => changes.push(LifecycleChange::Draft { at }),
        _ => {}
    }
    if let (Some(before), Some(after)) = (&prior.head_sha, &node.head_sha)
        && before != after
        && head_moves(Some(prior), node, None)
    {
        changes.push(LifecycleChange::Push { before, after });
    }
    changes
}

impl ItemNode for IssueNode {
    const CLASS: ItemClass = ItemClass::Issue;

    fn fields(&self) -> &ItemFields {
        &self.fields
    }

    fn class_columns(&self, row: &mut Upsert, _: WriteContext<'_>) {
        row.set("state_reason", OnConflict::Replace, &self.state_reason);
    }
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
        None => n.fields.updated_at > changed_at,
    }
}

impl ItemNode for PullRequestNode {
    const CLASS: ItemClass = ItemClass::PullRequest;

    fn fields(&self) -> &ItemFields {
        &self.fields
    }

    fn class_columns(&self, row: &mut Upsert, cx: WriteContext<'_>) {
        use OnConflict::{Coalesce, FollowsChange, Keep, Replace};
        let review_count = resolve(cx.counts.reviews, cx.prior, |s| s.review_count);
        // A head that may not move stays as stored; its date moves only with its sha.
        let (head, head_date) = match head_moves(cx.prior, self, cx.push) {
            true => (Coalesce, FollowsChange("head_sha")),
            false => (Keep, Keep),
        };
        row.set("draft", Coalesce, self.draft)
            .set("review_count", Replace, review_count)
            .set("head_ref", head, &self.head_ref)
            .set("head_sha", head, &self.head_sha)
            .set("head_changed_at", head_date, self.fields.updated_at)
            .set("base_ref", Coalesce, &self.base_ref)
            .set("merged_at", Replace, self.merged_at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(secs).unwrap()
    }

    fn stored(draft: bool, head: &str, changed: i64) -> StoredItem {
        StoredItem {
            native_id: 1,
            id: Uuid::nil(),
            updated_at: at(changed),
            state: "open".into(),
            closed_at: None,
            merged_at: None,
            draft: Some(draft),
            head_sha: Some(head.into()),
            head_changed_at: Some(at(changed)),
            comment_count: None,
            review_count: None,
        }
    }

    fn read(draft: Option<bool>, head: Option<&str>, updated: i64) -> PullRequestNode {
        PullRequestNode {
            fields: ItemFields {
                native_id: 1,
                node_id: "gid://gitlab/MergeRequest/1".into(),
                number: 1,
                title: "t".into(),
                body: String::new(),
                state: "open".into(),
                author: None,
                locked: None,
                lock_reason: None,
                comment_count: None,
                created_at: at(0),
                updated_at: at(updated),
                closed_at: None,
            },
            draft,
            review_count: None,
            head_ref: Some("feature".into()),
            head_sha: head.map(str::to_owned),
            base_ref: Some("main".into()),
            merged_at: None,
        }
    }

    #[test]
    fn a_read_reports_the_draft_flag_and_head_it_stores_under_the_hooks_keys() {
        let prior = stored(false, "a", 10);
        let node = read(Some(true), Some("b"), 20);
        assert_eq!(
            stored_pull_request_changes(Some(&prior), &node),
            [
                LifecycleChange::Draft { at: at(20) },
                LifecycleChange::Push {
                    before: "a",
                    after: "b"
                }
            ]
        );
        let ready = read(Some(false), Some("a"), 20);
        assert_eq!(
            stored_pull_request_changes(Some(&stored(true, "a", 10)), &ready),
            [LifecycleChange::Ready { at: at(20) }]
        );
    }

    #[test]
    fn a_read_of_what_is_stored_or_unknown_or_new_reports_nothing() {
        let prior = stored(false, "a", 10);
        assert!(
            stored_pull_request_changes(Some(&prior), &read(Some(false), Some("a"), 20)).is_empty()
        );
        // An unknown flag or head is no change.
        assert!(stored_pull_request_changes(Some(&prior), &read(None, None, 20)).is_empty());
        // A head the stored one is not older than stays: no push is reported.
        assert!(
            stored_pull_request_changes(Some(&prior), &read(Some(false), Some("b"), 10)).is_empty()
        );
        // A new item reports its opening, not a push or a draft.
        assert!(stored_pull_request_changes(None, &read(Some(true), Some("b"), 20)).is_empty());
    }
}
