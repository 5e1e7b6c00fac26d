//! Hints: hooks signed by a secret a tenant knows (see `sync_engine::webhook::hint`). Such a
//! hook only names an item (and a note). GitLab is asked for that item by number
//! (`ProjectIssue`, `ProjectMergeRequest`; a closed merge request's close time over REST, as a
//! listing page reads it) with the delivering connection's own token, and what it returns is
//! written as a sync page of one ([`mirror::upsert_page_in`]), closes and merges it stores
//! recorded as sync events. An issue's note is read by id over REST and written as the notes pass
//! writes it. A merge request's note is written by the notes reconciliation (its thread and diff
//! place come from the discussions listing); its hint re-reads the merge request. Nothing of the
//! payload is written.

use std::collections::BTreeMap;

use gitlab_client::{Budget, GitlabClient, MergeRequestState, NoteParent, Page};
use lifecycle_core::forward::TimeBound;
use scm_mirror::admission::GitlabProject;
use scm_mirror::events::Item;
use scm_mirror::items::ItemClass;
use store::admission::Refusal;
use sync_engine::webhook::hint::Confirmation;
use sync_engine::webhook::{Outcome, Webhook, WebhookError};
use time::OffsetDateTime;
use uuid::Uuid;

use super::payload::HookProject;
use super::{Event, GitlabWebhooks};
use crate::mirror::{self, GitlabNode, VENDOR, gid_number, project_header};
use crate::note_rows::NoteRow;

/// What a hint names.
#[derive(Debug, Clone, Copy)]
pub struct Hinted<'a> {
    pub project: &'a HookProject,
    pub class: ItemClass,
    pub iid: u64,
    /// An issue's note, by id.
    pub issue_note: Option<u64>,
}

impl Event {
    /// The item (and note) this hook names; `None` for a note on something not mirrored.
    pub fn hinted(&self) -> Option<Hinted<'_>> {
        let iid = |n: i32| u64::try_from(n).ok();
        match self {
            Event::Issue(e) => Some(Hinted {
                project: &e.project,
                class: ItemClass::Issue,
                iid: iid(e.object_attributes.iid)?,
                issue_note: None,
            }),
            Event::MergeRequest(e) => Some(Hinted {
                project: &e.project,
                class: ItemClass::PullRequest,
                iid: iid(e.object_attributes.iid)?,
                issue_note: None,
            }),
            Event::Note(e) => match (&e.issue, &e.merge_request) {
                (Some(issue), _) if e.object_attributes.noteable_type == "Issue" => Some(Hinted {
                    project: &e.project,
                    class: ItemClass::Issue,
                    iid: iid(issue.iid)?,
                    issue_note: u64::try_from(e.object_attributes.id).ok(),
                }),
                (_, Some(mr)) if e.object_attributes.noteable_type == "MergeRequest" => {
                    Some(Hinted {
                        project: &e.project,
                        class: ItemClass::PullRequest,
                        iid: iid(mr.iid)?,
                        issue_note: None,
                    })
                }
                _ => None,
            },
            // A claimed pipeline names no item to re-read; the readiness read records checks.
            Event::Pipeline(_) => None,
            // A claimed push names a branch, not an item: the sync records the push it stores.
            Event::Push(_) => None,
            // Project and group events are never hints: they write only what GitLab answers.
            Event::Project(_) | Event::Subgroup(_) | Event::Member(_) => None,
        }
    }
}

/// Confirms a hint about `hinted` (coalesced with other hints about the same item and note).
pub async fn confirm(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    hinted: Hinted<'_>,
) -> Result<Outcome, WebhookError> {
    let key = format!(
        "{}:{}:{}:{}:{}",
        hook.provider_instance_id,
        hinted.project.id,
        hinted.class.table(),
        hinted.iid,
        hinted.issue_note.unwrap_or(0)
    );
    w.confirmations
        .confirm(&w.pool, hook, key, || read_and_write(w, hook, hinted))
        .await
}

/// What GitLab returned for a hint.
struct Read<T> {
    page: Page<T>,
    close_times: BTreeMap<i64, OffsetDateTime>,
    note: Option<gitlab_client::Note>,
}

async fn read_and_write(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    hinted: Hinted<'_>,
) -> Result<Confirmation, WebhookError> {
    let scope = GitlabProject {
        native_id: hinted.project.id,
    };
    // Admission as a fact's: a project no monitor names goes through route admission (which
    // asks GitLab) on the routes that have it.
    let admitted = {
        let mut conn = w.pool.acquire().await?;
        hook.admit(&mut conn, scope).await.map(drop)
    };
    match (admitted, &w.route) {
        (Ok(()), _) => {}
        (Err(WebhookError::OutOfScope(Refusal::NotMonitored)), Some(route)) => {
            route.admit(&w.pool, hook, hinted.project.id).await?;
        }
        (Err(e), _) => return Err(e),
    }
    let client = match reader(w, hook.connection_id).await? {
        Ok(client) => client,
        Err(reason) => return Ok(Confirmation::Unconfirmed(reason)),
    };
    let stored = {
        let mut conn = w.pool.acquire().await?;
        scm_mirror::repository::stored(&mut *conn, hook.provider_instance_id, hinted.project.id)
            .await?
            .map(|(id, repo)| (id, format!("{}/{}", repo.owner, repo.name)))
    };
    // The path asked for is the mirror's or GitLab's, never the payload's.
    let (repository_id, path) = match stored {
        Some(stored) => stored,
        None => match mirror_project(w, hook, &client, hinted.project.id).await? {
            Ok(mirrored) => mirrored,
            Err(reason) => return Ok(Confirmation::Unconfirmed(reason)),
        },
    };
    match hinted.class {
        ItemClass::Issue => {
            let read = read_issue(&client, &path, hinted).await;
            write(w, hook, scope, repository_id, hinted, read).await
        }
        ItemClass::PullRequest => {
            let read = read_merge_request(&client, &path, hinted).await;
            write(w, hook, scope, repository_id, hinted, read).await
        }
    }
}

/// The delivering connection's GitLab client, or why there is none (reused from
/// [`GitlabWebhooks::clients`] while the connection's token, settings and instance are unchanged).
pub(super) async fn reader(
    w: &GitlabWebhooks,
    connection_id: Uuid,
) -> Result<Result<GitlabClient, String>, WebhookError> {
    Ok(
        match w.readers.cached_source(&w.clients, connection_id).await {
            // The reserve a job keeps is for follow-up reads like these.
            Ok(Some(source)) => Ok(source.client.with_budget(Budget::unlimited())),
            Ok(None) => Err("the connection is gone".into()),
            Err(e) => {
                tracing::warn!(%connection_id, error = %format!("{e:#}"), "cannot read GitLab with this connection");
                Err("the connection cannot read GitLab now".into())
            }
        },
    )
}

async fn read_issue(
    client: &GitlabClient,
    path: &str,
    hinted: Hinted<'_>,
) -> Result<Read<gitlab_client::IssueNode>, gitlab_client::Error> {
    let page = client.issue_by_iid(path, hinted.iid).await?;
    let note = match hinted.issue_note {
        Some(id) => {
            let parent = NoteParent::Issue {
                project: project_number(hinted.project.id),
                iid: hinted.iid,
            };
            client.note(parent, id).await?
        }
        None => None,
    };
    Ok(Read {
        page,
        close_times: BTreeMap::new(),
        note,
    })
}

async fn read_merge_request(
    client: &GitlabClient,
    path: &str,
    hinted: Hinted<'_>,
) -> Result<Read<gitlab_client::MergeRequestNode>, gitlab_client::Error> {
    let page = client.merge_request_by_iid(path, hinted.iid).await?;
    let mut close_times = BTreeMap::new();
    // A close without a merge has its time over REST only, as a listing page reads it.
    for node in page.nodes.iter().flatten() {
        if node.state == MergeRequestState::Closed
            && let Some(native_id) = node.native_id()
            && let Some(at) = client
                .merge_request(project_number(hinted.project.id), hinted.iid)
                .await?
                .and_then(|mr| mr.close_time())
        {
            close_times.insert(native_id, at);
        }
    }
    Ok(Read {
        page,
        close_times,
        note: None,
    })
}

fn project_number(id: i64) -> u64 {
    u64::try_from(id).unwrap_or_default()
}

/// Writes what GitLab returned, in a transaction that admits the delivery again.
async fn write<T: GitlabNode>(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    scope: GitlabProject,
    repository_id: Uuid,
    hinted: Hinted<'_>,
    read: Result<Read<T>, gitlab_client::Error>,
) -> Result<Confirmation, WebhookError> {
    let read = match read {
        Ok(read) => read,
        Err(e) => return Ok(Confirmation::Unconfirmed(format!("reading GitLab: {e}"))),
    };
    // The path must still reach the project admitted (a rename since, or a path taken again,
    // reaches another).
    let reached = read.page.project.as_ref().and_then(|p| gid_number(&p.id));
    if reached != Some(scope.native_id) {
        return Ok(Confirmation::Unconfirmed(
            "the project's path now reaches another project".into(),
        ));
    }
    if read.page.nodes.iter().flatten().next().is_none() {
        let what = match hinted.class {
            ItemClass::Issue => "issue #",
            ItemClass::PullRequest => "merge request !",
        };
        return Ok(Confirmation::Unconfirmed(format!(
            "GitLab shows this connection no {what}{}",
            hinted.iid
        )));
    }
    // GitLab's answers carry no read time: they were read just now.
    let bound = TimeBound::after(OffsetDateTime::now_utc(), w.clock_skew);
    let mut txn = w.pool.begin().await?;
    hook.admit(&mut txn, scope).await?;
    let written = mirror::upsert_page_in(
        &mut txn,
        hinted.class,
        repository_id,
        &read.page,
        &read.close_times,
        bound,
    )
    .await?;
    let mut changed = written.applied > 0;
    if let (Some(note), Some(item)) = (
        &read.note,
        read.page
            .nodes
            .iter()
            .flatten()
            .find_map(GitlabNode::native_id),
    ) {
        let parent: Option<Uuid> = sqlx::query_scalar(
            "SELECT id FROM issue WHERE repository_id = $1 AND native_id = $2 FOR UPDATE",
        )
        .bind(repository_id)
        .bind(item)
        .fetch_optional(&mut *txn)
        .await?;
        let row =
            parent.and_then(|id| NoteRow::from_rest(Item::issue(VENDOR, id, repository_id), note));
        if let Some(row) = row {
            changed |= row.write(&mut txn, None).await?;
        }
    }
    txn.commit().await?;
    Ok(Confirmation::Written(Outcome::of_change(changed)))
}

/// Mirrors an admitted project not mirrored yet as GitLab names it now (read by id with the
/// connection's token); the reason when GitLab does not show it.
async fn mirror_project(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    client: &GitlabClient,
    native_id: i64,
) -> Result<Result<(Uuid, String), String>, WebhookError> {
    // The read route admission makes: GitLab's current path for the id.
    let project = match client.project_by_id(project_number(native_id)).await {
        Ok(Some(project)) => project,
        Ok(None) => return Ok(Err("GitLab shows this connection no such project".into())),
        Err(e) => return Ok(Err(format!("reading GitLab: {e}"))),
    };
    if gid_number(project.id.inner()) != Some(native_id) {
        return Ok(Err("GitLab named another project for the id".into()));
    }
    let full_path = project.full_path.into_inner();
    let Some(header) = project_header(native_id, &full_path, project.archived) else {
        return Ok(Err("GitLab names the project without a namespace".into()));
    };
    let id = scm_mirror::repository::ensure_repository(&w.pool, hook.provider_instance_id, &header)
        .await?;
    Ok(Ok((id, full_path)))
}
