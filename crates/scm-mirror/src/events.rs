//! Item events and activity entries: one per lifecycle change of an issue or pull request,
//! whichever path reports it. The change's source key and the item's version go into
//! `item_event`, whose unique keys absorb a second report; each workspace whose monitors cover
//! the repository gets one `activity_event` under the same key, and the change is recorded
//! through the generic ledger (`store::events`, scope: the repository), which publishes one
//! message per such workspace on `events.<workspaceId>.<type>` through the outbox in the
//! writer's transaction.

use lifecycle_core::source_key::LifecycleChange;
use store::contracts::ItemRef;
use store::entity::ConnectionKind;
use store::events::{EventSubject, IntegrationEvent, Recipient, rfc3339};
use time::OffsetDateTime;
use uuid::Uuid;

/// Which path reported a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Webhook,
    Sync,
}

impl Origin {
    fn as_str(self) -> &'static str {
        match self {
            Origin::Webhook => "webhook",
            Origin::Sync => "sync",
        }
    }
}

/// Issue or pull request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    Issue,
    PullRequest,
}

/// The item a change belongs to.
#[derive(Debug, Clone, Copy)]
pub struct Item {
    /// The vendor the item is mirrored from: its connections' monitors decide who hears of it.
    pub vendor: ConnectionKind,
    pub kind: ItemKind,
    pub id: Uuid,
    pub repository_id: Uuid,
}

impl Item {
    pub fn issue(vendor: ConnectionKind, id: Uuid, repository_id: Uuid) -> Self {
        Item {
            vendor,
            kind: ItemKind::Issue,
            id,
            repository_id,
        }
    }

    pub fn pull_request(vendor: ConnectionKind, id: Uuid, repository_id: Uuid) -> Self {
        Item {
            vendor,
            kind: ItemKind::PullRequest,
            id,
            repository_id,
        }
    }

    /// The (issue_id, pull_request_id) pair the ledgers and comments store.
    pub fn columns(&self) -> (Option<Uuid>, Option<Uuid>) {
        match self.kind {
            ItemKind::Issue => (Some(self.id), None),
            ItemKind::PullRequest => (None, Some(self.id)),
        }
    }
}

/// The event's name, e.g. `scm.pull_request.merged`.
pub fn event_name(kind: ItemKind, change: &LifecycleChange<'_>) -> &'static str {
    use LifecycleChange as C;
    match (kind, change) {
        (ItemKind::Issue, C::Opened { .. }) => "scm.issue.opened",
        (ItemKind::Issue, C::Reopen { .. }) => "scm.issue.reopened",
        (ItemKind::Issue, C::Close { .. }) => "scm.issue.closed",
        (ItemKind::Issue, C::CommentEdit { .. }) => "scm.issue.comment_edited",
        (ItemKind::Issue, _) => "scm.issue.changed",
        (ItemKind::PullRequest, C::Opened { .. }) => "scm.pull_request.opened",
        (ItemKind::PullRequest, C::Push { .. }) => "scm.pull_request.synchronized",
        (ItemKind::PullRequest, C::Ready { .. }) => "scm.pull_request.ready_for_review",
        (ItemKind::PullRequest, C::Draft { .. }) => "scm.pull_request.converted_to_draft",
        (ItemKind::PullRequest, C::Reopen { .. }) => "scm.pull_request.reopened",
        (ItemKind::PullRequest, C::Close { .. }) => "scm.pull_request.closed",
        (ItemKind::PullRequest, C::Merge { .. }) => "scm.pull_request.merged",
        (ItemKind::PullRequest, C::CommentEdit { .. }) => "scm.pull_request.comment_edited",
        (ItemKind::PullRequest, C::Dismissal { .. }) => "scm.pull_request.review_dismissed",
        (ItemKind::PullRequest, C::ThreadResolved { .. }) => "scm.pull_request.thread_resolved",
        (ItemKind::PullRequest, C::ChecksCompleted { .. }) => "scm.pull_request.checks_completed",
    }
}

/// When the change happened, where the change itself carries a provider date.
fn occurred_at(change: &LifecycleChange<'_>) -> Option<OffsetDateTime> {
    use LifecycleChange as C;
    match change {
        C::Opened { created_at } => Some(*created_at),
        C::Ready { at } | C::Draft { at } | C::Reopen { at } => Some(*at),
        C::Close { closed_at } => Some(*closed_at),
        C::Merge { merged_at } => Some(*merged_at),
        C::CommentEdit { updated_at, .. } => Some(*updated_at),
        C::Dismissal {
            review_updated_at, ..
        } => Some(*review_updated_at),
        C::ThreadResolved { resolved_at, .. } => Some(*resolved_at),
        C::Push { .. } | C::ChecksCompleted { .. } => None,
    }
}

/// The workspaces whose `vendor` connections' monitors cover a repository (the monitor-scope
/// rule of `store::scm_scope`).
pub async fn workspaces_in_scope(
    conn: &mut sqlx::PgConnection,
    vendor: ConnectionKind,
    repository_id: Uuid,
) -> Result<Vec<Uuid>, sqlx::Error> {
    let sql = format!(
        "SELECT DISTINCT m.workspace_id
           FROM repository r, repository_to_monitor m, connection c
          WHERE r.id = $1 AND c.kind = $2 AND {}
          ORDER BY 1",
        store::scm_scope::covers_predicate()
    );
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(repository_id)
        .bind(vendor.as_str())
        .fetch_all(&mut *conn)
        .await
}

/// Records `change` of `item` at `version`, inside the writer's transaction. Returns whether it
/// was new: a second report of the same change (same source key) or a second event of the same
/// name at the same version records nothing, adds no activity and publishes nothing.
pub async fn record(
    txn: &mut sqlx::PgConnection,
    item: &Item,
    change: &LifecycleChange<'_>,
    version: OffsetDateTime,
    origin: Origin,
) -> Result<bool, sqlx::Error> {
    let name = event_name(item.kind, change);
    let key = change.source_key();
    let occurred = occurred_at(change);
    let (issue_id, pull_request_id) = item.columns();
    // Both unique keys (item, name, source key) and (item, name, version) absorb a repeat.
    let inserted: Option<(Uuid,)> = sqlx::query_as(
        "INSERT INTO item_event (id, issue_id, pull_request_id, name, source_key, version, origin,
                                 occurred_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT DO NOTHING
         RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(issue_id)
    .bind(pull_request_id)
    .bind(name)
    .bind(key.as_str())
    .bind(version)
    .bind(origin.as_str())
    .bind(occurred)
    .fetch_optional(&mut *txn)
    .await?;
    let vendor = item.vendor.as_str();
    let Some((event_id,)) = inserted else {
        metrics::counter!("item_events_total", "vendor" => vendor, "name" => name, "outcome" => "absorbed")
            .increment(1);
        return Ok(false);
    };
    metrics::counter!("item_events_total", "vendor" => vendor, "name" => name, "outcome" => "recorded")
        .increment(1);
    let mut audience = Vec::new();
    for workspace_id in workspaces_in_scope(txn, item.vendor, item.repository_id).await? {
        // The activity entry uses the event's source key, so each path adds one entry.
        let activity: Option<(Uuid,)> = sqlx::query_as(
            "INSERT INTO activity_event (id, workspace_id, issue_id, pull_request_id, kind,
                                         source_key, item_event_id, occurred_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT DO NOTHING
             RETURNING id",
        )
        .bind(Uuid::now_v7())
        .bind(workspace_id)
        .bind(issue_id)
        .bind(pull_request_id)
        .bind(name)
        .bind(key.as_str())
        .bind(event_id)
        .bind(occurred)
        .fetch_optional(&mut *txn)
        .await?;
        // A workspace's message is its activity entry: the same id, as consumers know it.
        if let Some((activity_id,)) = activity {
            audience.push(Recipient {
                workspace_id,
                message_id: activity_id,
            });
        }
    }
    // The generic ledger publishes; the forge's fields ride beside the generic ones, so the
    // message reads as an `ItemEvent`.
    let mut detail = serde_json::Map::new();
    detail.insert("version".into(), rfc3339(version).into());
    detail.insert("origin".into(), origin.as_str().into());
    let event = IntegrationEvent {
        subject: EventSubject::repository(item.repository_id),
        item: ItemRef {
            kind: match item.kind {
                ItemKind::Issue => "issue",
                ItemKind::PullRequest => "pull_request",
            }
            .to_owned(),
            id: item.id,
        },
        event_type: name.to_owned(),
        source_key: key.as_str().to_owned(),
        occurred_at: occurred,
        connection_id: None,
        detail,
    };
    store::events::record(txn, &event, &audience).await?;
    Ok(true)
}
