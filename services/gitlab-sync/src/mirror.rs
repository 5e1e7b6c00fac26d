//! GitLab's issue and merge request nodes onto the SCM mirror: each page goes through the shared
//! forward-only step (`scm_mirror::items`) in one transaction, every count and lock known only
//! where GitLab reported no error at its own path; closes, merges, ready, draft and pushes a page
//! stores become sync-discovered item events, under the source keys their hooks derive.

use std::collections::BTreeMap;

use gitlab_client::{IssueState, MergeRequestState, Page};
use lifecycle_core::forward::{Freshness, TimeBound};
use lifecycle_core::partial::Field;
use lifecycle_core::source_key::LifecycleChange;
use scm_mirror::events::{self, Item, Origin};
use scm_mirror::items::{
    self, Counts, IssueNode, ItemClass, ItemFields, ItemNode, PullRequestNode, StoredItem,
    compare_write, stored_close,
};
use sqlx::PgPool;
use store::entity::ConnectionKind;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::readiness::ReadFacts;

/// The vendor gitlab-sync mirrors: its items' events reach the workspaces of GitLab connections.
pub const VENDOR: ConnectionKind = ConnectionKind::Gitlab;

/// The number at the end of a GitLab global id (`gid://gitlab/Issue/12` is 12).
pub fn gid_number(gid: &str) -> Option<i64> {
    gid.rsplit('/').next()?.parse().ok()
}

/// A project's full path as the mirror's owner (its namespace) and name (its path).
pub fn split_path(full_path: &str) -> Option<(&str, &str)> {
    full_path
        .rsplit_once('/')
        .filter(|(owner, name)| !owner.is_empty() && !name.is_empty())
}

/// The mirror's header of GitLab project `native_id` at `full_path`: its namespace as owner, its
/// path as name. `None` for a path without a namespace.
pub fn project_header(
    native_id: i64,
    full_path: &str,
    archived: Option<bool>,
) -> Option<scm_mirror::repository::RepoHeader> {
    let (owner, name) = split_path(full_path)?;
    Some(scm_mirror::repository::RepoHeader {
        native_id,
        node_id: format!("gid://gitlab/Project/{native_id}"),
        owner: owner.to_owned(),
        name: name.to_owned(),
        archived,
    })
}

/// What a page write did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub applied: u64,
    pub stale: u64,
    /// Nodes left unwritten: unresolved, or a value this build cannot store.
    pub unusable: u64,
    /// Nodes dated past the page's read plus the skew allowed: not written, and no watermark
    /// from them.
    pub future: u64,
    /// The newest `updatedAt` on the page.
    pub newest: Option<OffsetDateTime>,
}

/// A GitLab listing node as the mirror holds it.
pub trait GitlabNode {
    /// The mirror's node, with the counts that are known; `None` when it cannot be stored
    /// (a state this build does not know, a malformed id).
    fn mirror(&self, page: &Page<Self>, index: usize) -> Option<(MirrorNode, Counts)>
    where
        Self: Sized;
    /// Its native id as the listing compares ids; `None` when malformed.
    fn native_id(&self) -> Option<i64>;
    /// The readiness facts it states (a merge request's), each at its own error path.
    fn readiness(&self, _page: &Page<Self>, _index: usize) -> Option<ReadFacts>
    where
        Self: Sized,
    {
        None
    }
}

/// A node ready for the forward-only step.
pub enum MirrorNode {
    Issue(IssueNode),
    MergeRequest(PullRequestNode),
}

/// A count read at its own error path: unknown where GitLab reported an error at, above or
/// below it, or gave none.
fn count<T>(page: &Page<T>, index: usize, field: &str, value: Option<i32>) -> Field<Option<i32>> {
    // Partial metadata: an errored or missing count is unknown, never zero.
    match value {
        Some(v) if !page.field_unknown(index, field) => Field::Known(Some(v)),
        _ => Field::Unknown,
    }
}

/// A value read at its own error path: `None` (unknown) where GitLab reported an error there.
fn known<T, V>(page: &Page<T>, index: usize, field: &str, value: V) -> Option<V> {
    (!page.field_unknown(index, field)).then_some(value)
}

impl GitlabNode for gitlab_client::IssueNode {
    fn native_id(&self) -> Option<i64> {
        gid_number(self.id.inner())
    }

    fn mirror(&self, page: &Page<Self>, i: usize) -> Option<(MirrorNode, Counts)> {
        let state = match &self.state {
            IssueState::Opened | IssueState::Locked => "open",
            IssueState::Closed => "closed",
            IssueState::All | IssueState::Other(_) => return None,
        };
        let fields = ItemFields {
            native_id: self.native_id()?,
            node_id: self.id.inner().to_owned(),
            number: self.iid.inner().parse().ok()?,
            title: self.title.clone(),
            body: self.description.clone().unwrap_or_default(),
            state: state.to_owned(),
            author: known(page, i, "author", Some(self.author.username.clone())).flatten(),
            locked: known(page, i, "discussionLocked", self.discussion_locked),
            lock_reason: None,
            comment_count: Some(self.user_notes_count),
            created_at: self.created_at.0,
            updated_at: self.updated_at.0,
            closed_at: self.closed_at.map(|t| t.0),
        };
        let counts = Counts {
            comments: count(page, i, "userNotesCount", Some(self.user_notes_count)),
            reviews: Field::Absent,
        };
        let node = IssueNode {
            fields,
            state_reason: None,
        };
        Some((MirrorNode::Issue(node), counts))
    }
}

impl GitlabNode for gitlab_client::MergeRequestNode {
    fn native_id(&self) -> Option<i64> {
        gid_number(self.id.inner())
    }

    fn readiness(&self, page: &Page<Self>, i: usize) -> Option<ReadFacts> {
        ReadFacts::of(page, i, self)
    }

    fn mirror(&self, page: &Page<Self>, i: usize) -> Option<(MirrorNode, Counts)> {
        let state = match &self.state {
            MergeRequestState::Opened | MergeRequestState::Locked => "open",
            MergeRequestState::Closed => "closed",
            MergeRequestState::Merged => "merged",
            MergeRequestState::All | MergeRequestState::Other(_) => return None,
        };
        let fields = ItemFields {
            native_id: self.native_id()?,
            node_id: self.id.inner().to_owned(),
            number: self.iid.parse().ok()?,
            title: self.title.clone(),
            body: self.description.clone().unwrap_or_default(),
            state: state.to_owned(),
            author: self.author.as_ref().map(|a| a.username.clone()),
            locked: known(page, i, "discussionLocked", self.discussion_locked),
            lock_reason: None,
            comment_count: self.user_notes_count,
            created_at: self.created_at.0,
            updated_at: self.updated_at.0,
            // A merge is its close. A close without a merge has no time in the listing
            // (GraphQL's closedAt is newer than the contract's floor): [`upsert_page`] sets it
            // from the page's REST reads or the stored close. A reopened request keeps none.
            closed_at: match state {
                "merged" => self.merged_at.map(|t| t.0),
                _ => None,
            },
        };
        let counts = Counts {
            comments: count(page, i, "userNotesCount", self.user_notes_count),
            reviews: Field::Absent,
        };
        let node = PullRequestNode {
            fields,
            draft: known(page, i, "draft", self.draft),
            review_count: None,
            head_ref: Some(self.source_branch.clone()),
            // A failed head is unknown: the stored head stays.
            head_sha: known(page, i, "diffHeadSha", self.diff_head_sha.clone()).flatten(),
            base_ref: Some(self.target_branch.clone()),
            merged_at: self.merged_at.map(|t| t.0),
        };
        Some((MirrorNode::MergeRequest(node), counts))
    }
}

/// The change a sync records after storing `node` over `prior`: a close or a merge it stored.
fn stored_change(
    node: &MirrorNode,
    prior: Option<&StoredItem>,
) -> Option<LifecycleChange<'static>> {
    match node {
        MirrorNode::Issue(n) => stored_close(prior, &n.fields.state, n.fields.closed_at)
            .map(|closed_at| LifecycleChange::Close { closed_at }),
        MirrorNode::MergeRequest(n) => {
            let merged = n.merged_at.filter(|_| n.fields.state == "merged");
            match (prior, merged) {
                (Some(prior), Some(merged_at)) => (prior.merged_at != Some(merged_at))
                    .then_some(LifecycleChange::Merge { merged_at }),
                _ => stored_close(prior, &n.fields.state, n.fields.closed_at)
                    .map(|closed_at| LifecycleChange::Close { closed_at }),
            }
        }
    }
}

/// Writes a page of issues or merge requests of repository `repository_id` in one transaction
/// (rows locked in id order); an upsert clears a tombstone. `close_times` are the close times
/// read over REST for the page's closed merge requests, by native id.
pub async fn upsert_page<T: GitlabNode>(
    pool: &PgPool,
    class: ItemClass,
    repository_id: Uuid,
    page: &Page<T>,
    close_times: &BTreeMap<i64, OffsetDateTime>,
    bound: TimeBound,
) -> Result<Written, sqlx::Error> {
    let mut txn = pool.begin().await?;
    let written = upsert_page_in(&mut txn, class, repository_id, page, close_times, bound).await?;
    txn.commit().await?;
    Ok(written)
}

/// [`upsert_page`] in the caller's transaction (one that has admitted a delivery, say).
pub async fn upsert_page_in<T: GitlabNode>(
    txn: &mut sqlx::PgConnection,
    class: ItemClass,
    repository_id: Uuid,
    page: &Page<T>,
    close_times: &BTreeMap<i64, OffsetDateTime>,
    bound: TimeBound,
) -> Result<Written, sqlx::Error> {
    let mut written = Written::default();
    let mut nodes = Vec::with_capacity(page.nodes.len());
    for (i, node) in page.nodes.iter().enumerate() {
        match node.as_ref().and_then(|n| n.mirror(page, i)) {
            // A version past the page's read (plus the skew) would freeze the row and carry the
            // watermark into the future: neither written nor counted.
            Some(mirrored) if bound.check(fields(&mirrored.0).updated_at).is_err() => {
                let f = fields(&mirrored.0);
                tracing::warn!(native_id = f.native_id, updated_at = %f.updated_at, limit = %bound.limit(), "a listed item is dated in the future; not written");
                metrics::counter!("sync_future_times_total", "vendor" => "gitlab").increment(1);
                written.future += 1;
            }
            Some((node, counts)) => {
                let read = page.nodes[i].as_ref().and_then(|n| n.readiness(page, i));
                nodes.push((node, counts, read));
            }
            None => written.unusable += 1,
        }
    }
    let ids: Vec<i64> = nodes.iter().map(|(n, _, _)| fields(n).native_id).collect();
    let stored = items::lock_items(&mut *txn, class, repository_id, &ids).await?;
    for (node, counts, read) in &mut nodes {
        let prior = stored.get(&fields(node).native_id);
        if let MirrorNode::MergeRequest(n) = node
            && n.fields.state == "closed"
        {
            // A closed merge request's close: the time read for this page, else the close
            // stored with the row locked (never a close of another state); unknown leaves none.
            n.fields.closed_at = close_times.get(&n.fields.native_id).copied().or_else(|| {
                prior
                    .filter(|p| p.state == "closed")
                    .and_then(|p| p.closed_at)
            });
        }
        let (node, counts) = (&*node, &*counts);
        let f = fields(node);
        written.newest = written.newest.max(Some(f.updated_at));
        let step = match node {
            MirrorNode::Issue(n) => {
                compare_write(&mut *txn, repository_id, n, *counts, prior, None).await?
            }
            MirrorNode::MergeRequest(n) => {
                compare_write(&mut *txn, repository_id, n, *counts, prior, None).await?
            }
        };
        if step.freshness == Freshness::Stale {
            written.stale += 1;
            continue;
        }
        let item = match node {
            MirrorNode::Issue(_) => Item::issue(VENDOR, step.id, repository_id),
            MirrorNode::MergeRequest(_) => Item::pull_request(VENDOR, step.id, repository_id),
        };
        if let Some(change) = stored_change(node, prior) {
            events::record(&mut *txn, &item, &change, f.updated_at, Origin::Sync).await?;
        }
        if let MirrorNode::MergeRequest(n) = node {
            // The ready, draft and push this write stored, under their hooks' keys: a lost hook
            // loses nothing, a late one adds nothing.
            let changes = items::stored_pull_request_changes(prior, n);
            for change in &changes {
                events::record(&mut *txn, &item, change, f.updated_at, Origin::Sync).await?;
            }
            if changes
                .iter()
                .any(|c| matches!(c, LifecycleChange::Push { .. }))
            {
                // A push leaves readiness unknown for the new head (`ReviewFacts::push`).
                scm_mirror::gitlab::pushes::head_moved(&mut *txn, step.id).await?;
            }
        }
        if let Some(read) = read {
            // The page's reviewers, approvals, decision, head check and merge facts, dated by
            // its request time, as a readiness read writes them.
            crate::readiness::apply(&mut *txn, step.id, read, None).await?;
        }
        written.applied += 1;
    }
    Ok(written)
}

fn fields(node: &MirrorNode) -> &ItemFields {
    match node {
        MirrorNode::Issue(n) => n.fields(),
        MirrorNode::MergeRequest(n) => n.fields(),
    }
}
