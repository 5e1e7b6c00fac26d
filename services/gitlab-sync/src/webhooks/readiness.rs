//! The readiness read after a Merge Request Hook: a hook carries no merge status, head pipeline
//! or approvals, so after an open, update, reopen, approval act or merge hook committed, GitLab is
//! asked for the merge request (`MergeRequestReadiness`, nested reviewers completed, and for a
//! merged one its approvals route's dates) with the delivering connection's token, outside any
//! transaction and under one deadline for the whole call. A short transaction then re-admits the
//! project on the delivery's route (a project unmonitored meanwhile takes nothing), locks the row
//! and writes the read through [`crate::readiness::apply`]. A merge hook's merge event is offered
//! there, after the read, even when the read failed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gitlab_client::{GitlabClient, MergeRequestNode, Page};
use lifecycle_core::snapshot::ListRead;
use lifecycle_core::source_key::LifecycleChange;
use scm_mirror::events::{self, Item, Origin};
use sync_engine::webhook::{Webhook, WebhookError};
use time::OffsetDateTime;
use uuid::Uuid;

use super::GitlabWebhooks;
use super::payload::{HookProject, MergeRequestHook};
use crate::mirror::{VENDOR, gid_number};
use crate::readiness::{self, ReadFacts};

/// The whole readiness read's deadline: every GitLab call it makes, retries included.
pub const READ_DEADLINE: Duration = Duration::from_secs(20);

/// A merge request whose readiness a hook asks to read.
#[derive(Debug, Clone)]
pub struct Asked {
    pub project: HookProject,
    pub native_id: i64,
    pub iid: u64,
    /// A merge hook: its merge event is offered after the read.
    pub merge: bool,
}

impl Asked {
    /// The read a Merge Request Hook asks for, if its action is one that asks.
    pub fn of(e: &MergeRequestHook) -> Option<Asked> {
        let a = &e.object_attributes;
        let action = a.action.as_deref()?;
        let asks = matches!(
            action,
            "open"
                | "update"
                | "reopen"
                | "merge"
                | "approved"
                | "approval"
                | "unapproved"
                | "unapproval"
        );
        asks.then(|| Asked {
            project: e.project.clone(),
            native_id: a.id,
            iid: u64::try_from(a.iid).unwrap_or_default(),
            merge: action == "merge",
        })
    }
}

/// GitLab's dates of a merged request's standing approvals, by approver (`None`: not named).
type ApprovalDates = BTreeMap<String, Option<OffsetDateTime>>;

/// What GitLab answered.
struct Answer {
    page: Page<MergeRequestNode>,
    dates: Option<ApprovalDates>,
}

/// Reads `asked`'s readiness and writes it; whether a stored fact changed or an event was
/// recorded. A failed read records nothing (the next hook or sync reads again).
pub async fn after_hook(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    asked: Asked,
) -> Result<bool, WebhookError> {
    let stored = {
        let mut conn = w.pool.acquire().await?;
        scm_mirror::repository::stored(&mut *conn, hook.provider_instance_id, asked.project.id)
            .await?
    };
    let Some((_, repo)) = stored else {
        return Ok(false);
    };
    // The path asked for is the mirror's, never the payload's.
    let path = format!("{}/{}", repo.owner, repo.name);
    let answer = match super::hints::reader(w, hook.connection_id).await? {
        Ok(client) => {
            match tokio::time::timeout(READ_DEADLINE, read(&client, &path, &asked)).await {
                Ok(Ok(answer)) => Some(answer),
                Ok(Err(e)) => {
                    tracing::info!(error = %e, "the readiness read failed; nothing recorded");
                    None
                }
                Err(_) => {
                    tracing::info!("the readiness read ran out of time; nothing recorded");
                    None
                }
            }
        }
        Err(reason) => {
            tracing::info!(%reason, "no readiness read");
            None
        }
    };
    let read = answer.and_then(|a| facts_of(&asked, a));
    if read.is_none() && !asked.merge {
        return Ok(false);
    }
    // Re-admitted on the delivery's route: a project unmonitored during the read takes nothing.
    let (mut txn, repository_id) = match w.admitted_project(hook, &asked.project).await {
        Ok(admitted) => admitted,
        Err(WebhookError::OutOfScope(refusal)) => {
            tracing::info!(
                ?refusal,
                "the project left the delivery's scope during the read"
            );
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    let row: Option<(Uuid, OffsetDateTime, String, Option<OffsetDateTime>)> = sqlx::query_as(
        "SELECT id, upstream_updated_at, state, merged_at FROM pull_request
          WHERE repository_id = $1 AND native_id = $2 FOR UPDATE",
    )
    .bind(repository_id)
    .bind(asked.native_id)
    .fetch_optional(&mut *txn)
    .await?;
    let Some((id, version, state, stored_merged_at)) = row else {
        return Ok(false);
    };
    let mut changed = false;
    let mut merged_at = stored_merged_at.filter(|_| state == "merged");
    if let Some((facts, dates)) = &read {
        let applied = readiness::apply(&mut txn, id, facts, dates.as_ref()).await?;
        changed |= applied.changed;
        merged_at = applied.merged_at.or(merged_at);
    }
    // One merge event by any path: keyed by the stored merge time, so a sync that stored it
    // first, or a redelivered hook, records none again.
    if asked.merge
        && let Some(merged_at) = merged_at
    {
        let item = Item::pull_request(VENDOR, id, repository_id);
        let change = LifecycleChange::Merge { merged_at };
        changed |= events::record(&mut txn, &item, &change, version, Origin::Webhook).await?;
    }
    txn.commit().await?;
    Ok(changed)
}

/// The read's facts when GitLab named the same project and merge request.
fn facts_of(asked: &Asked, answer: Answer) -> Option<(ReadFacts, Option<ApprovalDates>)> {
    let reached = answer.page.project.as_ref().and_then(|p| gid_number(&p.id));
    if reached != Some(asked.project.id) {
        tracing::info!("the project's path now reaches another project; nothing recorded");
        return None;
    }
    let node = answer.page.nodes.first()?.as_ref()?;
    let facts = ReadFacts::of(&answer.page, 0, node)?;
    if facts.native_id != asked.native_id {
        return None;
    }
    // Dates only for exactly the approvers the read lists.
    let dates = answer.dates.filter(|dates| match &facts.approvers {
        ListRead::Whole(approvers) => {
            let named: BTreeSet<&String> = dates.keys().collect();
            named == approvers.iter().collect::<BTreeSet<_>>()
        }
        ListRead::Partial => false,
    });
    Some((facts, dates))
}

async fn read(
    client: &GitlabClient,
    path: &str,
    asked: &Asked,
) -> Result<Answer, gitlab_client::Error> {
    let mut page = client.merge_request_readiness(path, asked.iid).await?;
    readiness::complete_reviewers(client, path, &mut page).await;
    let merged = page
        .nodes
        .first()
        .and_then(Option::as_ref)
        .is_some_and(|n| n.state == gitlab_client::MergeRequestState::Merged);
    let mut dates = None;
    if merged {
        let project = u64::try_from(asked.project.id).unwrap_or_default();
        // A failed optional date read changes no date.
        if let Ok(Some(approvals)) = client.merge_request_approvals(project, asked.iid).await
            && approvals.id == u64::try_from(asked.native_id).unwrap_or_default()
        {
            dates = Some(
                approvals
                    .approved_by
                    .into_iter()
                    .map(|a| (a.user.username, a.approved_at))
                    .collect(),
            );
        }
    }
    Ok(Answer { page, dates })
}
