//! The sync's page writes: a page of GitHub's listing goes through the shared forward-only step
//! (`scm_mirror::items`) with each count known only where GitHub reported no error at its path;
//! closes and merges a page stores become sync-discovered item events.

use lifecycle_core::forward::{Freshness, TimeBound};
use lifecycle_core::partial::{Field, PathSegment, field_errored};
use lifecycle_core::source_key::LifecycleChange;
use scm_mirror::events::{self, Item, Origin};
use scm_mirror::items::{
    self, Counts, IssueNode, ItemClass, ItemKey, ItemNode, PullRequestNode, StoredItem,
    compare_write, stored_close,
};
use sqlx::PgPool;
use store::entity::ConnectionKind;
use uuid::Uuid;

use crate::conversation::{self, Corrections, Removal};
use crate::source::Page;
use crate::webhooks::misfiled;

/// The vendor github-sync mirrors: its items' events reach the workspaces of GitHub connections.
pub const VENDOR: ConnectionKind = ConnectionKind::Github;

/// What a page write did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub applied: u64,
    pub stale: u64,
    /// Items dated past the page's read plus the skew allowed: not written.
    pub future: u64,
    /// What the lists nested under the items changed.
    pub nested: Corrections,
}

/// A node of a GitHub listing page: where its counts sit in the GraphQL response, and the
/// lifecycle change a sync reports when it stores one.
pub trait ListedNode: ItemNode {
    /// The GraphQL connection field the nodes come from.
    const CONNECTION: &'static str;
    /// The node's review count as read; `None` for a class without reviews.
    fn review_count(&self) -> Option<Option<i32>>;
    /// The item a stored row id names.
    fn item(id: Uuid, repository_id: Uuid) -> Item;
    /// The change a sync records after storing the node over `prior`.
    fn stored_change(&self, prior: Option<&StoredItem>) -> Option<LifecycleChange<'static>>;
}

/// Node `index`'s counts, each unknown where GitHub reported an error at its path.
fn counts<N: ListedNode>(node: &N, page_errors: &[Vec<PathSegment>], index: usize) -> Counts {
    let field = |name: &str, value: Option<i32>| {
        let path = [
            PathSegment::Key("repository".into()),
            PathSegment::Key(N::CONNECTION.into()),
            PathSegment::Key("nodes".into()),
            PathSegment::Index(index),
            PathSegment::Key(name.into()),
        ];
        // Partial metadata: an errored or missing count is unknown, never zero.
        match value {
            Some(v) if !field_errored(page_errors, &path) => Field::Known(Some(v)),
            _ => Field::Unknown,
        }
    };
    Counts {
        comments: field("comments", node.fields().comment_count),
        reviews: node
            .review_count()
            .map_or(Field::Absent, |reviews| field("reviews", reviews)),
    }
}

impl ListedNode for IssueNode {
    const CONNECTION: &'static str = "issues";

    fn review_count(&self) -> Option<Option<i32>> {
        None
    }

    fn item(id: Uuid, repository_id: Uuid) -> Item {
        Item::issue(VENDOR, id, repository_id)
    }

    fn stored_change(&self, prior: Option<&StoredItem>) -> Option<LifecycleChange<'static>> {
        let f = &self.fields;
        stored_close(prior, &f.state, f.closed_at)
            .map(|closed_at| LifecycleChange::Close { closed_at })
    }
}

impl ListedNode for PullRequestNode {
    const CONNECTION: &'static str = "pullRequests";

    fn review_count(&self) -> Option<Option<i32>> {
        Some(self.review_count)
    }

    fn item(id: Uuid, repository_id: Uuid) -> Item {
        Item::pull_request(VENDOR, id, repository_id)
    }

    // A sync records a close or a merge only when it stores one; never a push or a ready
    // (GitHub redelivers the webhooks that carry those).
    fn stored_change(&self, prior: Option<&StoredItem>) -> Option<LifecycleChange<'static>> {
        let f = &self.fields;
        let merged = self.merged_at.filter(|_| f.state == "merged");
        if let (Some(prior), Some(merged_at)) = (prior, merged) {
            (prior.merged_at != Some(merged_at)).then_some(LifecycleChange::Merge { merged_at })
        } else {
            stored_close(prior, &f.state, f.closed_at)
                .map(|closed_at| LifecycleChange::Close { closed_at })
        }
    }
}

/// Writes a page of issues or pull requests in one transaction, with what it read under each
/// item; the changes it stores become sync-discovered item events. `removal` is a
/// RECONCILIATION's comment candidates (`None`: no comment is inferred deleted).
pub async fn upsert_page<N: ListedNode>(
    pool: &PgPool,
    repository_id: Uuid,
    page: &Page<N>,
    removal: Option<&Removal<'_>>,
    bound: TimeBound,
) -> Result<Written, sqlx::Error> {
    let mut txn = pool.begin().await?;
    let written = upsert_page_in(&mut txn, repository_id, page, removal, bound).await?;
    txn.commit().await?;
    Ok(written)
}

/// [`upsert_page`] in the caller's transaction (one that has admitted a delivery, say).
pub async fn upsert_page_in<N: ListedNode>(
    txn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    page: &Page<N>,
    removal: Option<&Removal<'_>>,
    bound: TimeBound,
) -> Result<Written, sqlx::Error> {
    // Fail-closed: a GraphQL error anywhere on the page leaves every nested listing in doubt.
    let removal = removal.filter(|_| page.error_paths.is_empty());
    let class: ItemClass = N::CLASS;
    let keys: Vec<ItemKey> = page.nodes.iter().map(ItemNode::key).collect();
    let ids: Vec<i64> = keys.iter().map(|k| k.native_id).collect();
    let numbered: Vec<(i64, i32)> = keys.iter().map(|k| (k.native_id, k.number)).collect();
    let skipped = misfiled::refile_page(&mut *txn, class, repository_id, &numbered).await?;
    let stored = items::lock_items(&mut *txn, class, repository_id, &ids).await?;
    let mut written = Written::default();
    for (i, (n, key)) in page.nodes.iter().zip(&keys).enumerate() {
        // Misfiled work that cannot move stays with its holding repository.
        if skipped.contains(&key.native_id) {
            continue;
        }
        // A version past the page's read (plus the skew) would freeze the row: not written.
        if let Err(future) = bound.check(key.updated_at) {
            tracing::warn!(native_id = key.native_id, reason = %future, "a listed item is dated in the future; not written");
            metrics::counter!("sync_future_times_total", "vendor" => "github").increment(1);
            written.future += 1;
            continue;
        }
        let prior = stored.get(&key.native_id);
        let counts = counts(n, &page.error_paths, i);
        let step = compare_write(&mut *txn, repository_id, n, counts, prior, None).await?;
        // The nested lists carry their own versions: written even under a stale item.
        if let Some(conversation) = page.conversations.get(i) {
            let item = N::item(step.id, repository_id);
            let nested = conversation::write(
                &mut *txn,
                &item,
                key.updated_at,
                page.read_at,
                conversation,
                removal,
            )
            .await?;
            written.nested.add(nested);
        }
        if step.freshness == Freshness::Stale {
            written.stale += 1;
            continue;
        }
        if let Some(change) = n.stored_change(prior) {
            let item = N::item(step.id, repository_id);
            events::record(&mut *txn, &item, &change, key.updated_at, Origin::Sync).await?;
        }
        written.applied += 1;
    }
    Ok(written)
}
