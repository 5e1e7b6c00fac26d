//! Hints: item and conversation deliveries signed by a secret a tenant knows (see
//! `sync_engine::webhook::hint`). Such a delivery only names an item. GitHub is asked for that
//! item by number with the delivering connection's own credentials, and what it returns is
//! written as a sync page of one ([`mirror::upsert_page_in`]): forward-only, with the comments,
//! reviews, threads and review requests read under it, and the closes and merges it stores
//! recorded as sync events. Nothing of the payload is written and no event comes from its
//! action: a forged `merged` cannot announce a merge GitHub does not show.
//!
//! The other events need no hint path: `repository` and `installation_target` are confirmed
//! through the API before they change anything, check deliveries read the head's checks from
//! GitHub, and `installation` events act on the delivering connection alone.

use lifecycle_core::forward::TimeBound;
use scm_mirror::admission::GithubRepository;
use scm_mirror::items::ItemClass;
use sync_engine::webhook::hint::Confirmation;
use sync_engine::webhook::{Outcome, Webhook, WebhookError};
use uuid::Uuid;

use super::payload::Repository;
use super::{Event, GithubWebhooks};
use crate::mirror::{self, ListedNode, Written};
use crate::source::{Page, SourceError};

/// The item a hint names.
#[derive(Debug, Clone, Copy)]
pub struct Hinted<'a> {
    pub repository: &'a Repository,
    pub class: ItemClass,
    pub number: i32,
}

impl Event {
    /// The item this delivery names, when it is one confirmed by reading an item; `None` for
    /// events that read GitHub themselves or touch only the delivering connection.
    pub fn hinted(&self) -> Option<Hinted<'_>> {
        let (repository, class, number) = match self {
            Event::Issues(e) => e.named(),
            Event::PullRequest(e) => e.named(),
            Event::IssueComment(e) => e.named(),
            Event::Review(e) => e.named(),
            Event::ReviewComment(e) => e.named(),
            Event::ReviewThread(e) => e.named(),
            Event::Repository(_)
            | Event::Installation(_)
            | Event::InstallationRepositories(_)
            | Event::InstallationTarget(_)
            | Event::CheckSuite(_)
            | Event::Status(_) => return None,
        };
        Some(Hinted {
            repository,
            class,
            number,
        })
    }
}

/// Confirms a hint about `hinted` (coalesced with other hints about the same item).
pub async fn confirm(
    webhooks: &GithubWebhooks,
    hook: &Webhook<'_>,
    hinted: Hinted<'_>,
) -> Result<Outcome, WebhookError> {
    let key = format!(
        "{}:{}:{}:{}",
        hook.provider_instance_id,
        hinted.repository.id,
        hinted.class.table(),
        hinted.number
    );
    webhooks
        .confirmations
        .confirm(&webhooks.pool, hook, key, || {
            read_and_write(webhooks, hook, hinted)
        })
        .await
}

/// Reads the item and writes what GitHub returned, admitted before the read and again in the
/// transaction that writes.
async fn read_and_write(
    webhooks: &GithubWebhooks,
    hook: &Webhook<'_>,
    hinted: Hinted<'_>,
) -> Result<Confirmation, WebhookError> {
    let native_id = hinted.repository.id;
    let scope = GithubRepository { native_id };
    let stored = {
        let mut conn = webhooks.pool.acquire().await?;
        hook.admit(&mut conn, scope).await?;
        scm_mirror::repository::stored(&mut *conn, hook.provider_instance_id, native_id).await?
    };
    // The name asked for is the mirror's, never the payload's.
    let Some((repository_id, repo)) = stored else {
        return Ok(Confirmation::Unconfirmed(
            "the repository is not mirrored yet; its first sync reads the item".into(),
        ));
    };
    let Some(reader) = webhooks.readers.active(hook.connection_id).await? else {
        return Ok(Confirmation::Unconfirmed(
            "the connection cannot read GitHub now".into(),
        ));
    };
    let number = hinted.number;
    match hinted.class {
        ItemClass::Issue => {
            let read = reader.issue(&repo, number).await;
            write(webhooks, hook, scope, repository_id, "issue", number, read).await
        }
        ItemClass::PullRequest => {
            let read = reader.pull_request(&repo, number).await;
            write(
                webhooks,
                hook,
                scope,
                repository_id,
                "pull request",
                number,
                read,
            )
            .await
        }
    }
}

/// Writes an item GitHub returned, in a transaction that admits the delivery again.
async fn write<N: ListedNode>(
    webhooks: &GithubWebhooks,
    hook: &Webhook<'_>,
    scope: GithubRepository,
    repository_id: Uuid,
    what: &str,
    number: i32,
    read: Result<Option<Page<N>>, SourceError>,
) -> Result<Confirmation, WebhookError> {
    let page = match read {
        Ok(Some(page)) => page,
        Ok(None) => {
            return Ok(Confirmation::Unconfirmed(format!(
                "GitHub shows this connection no {what} #{number}"
            )));
        }
        Err(e) => return Ok(Confirmation::Unconfirmed(format!("reading GitHub: {e}"))),
    };
    // The repository the name reached must be the one admitted (a rename since, or a name
    // taken again, reaches another).
    if page.repository.native_id != scope.native_id {
        return Ok(Confirmation::Unconfirmed(
            "the repository's name now reaches another repository".into(),
        ));
    }
    let bound = TimeBound::after(page.read_at, webhooks.clock_skew);
    let mut txn = webhooks.pool.begin().await?;
    hook.admit(&mut txn, scope).await?;
    let written = mirror::upsert_page_in(&mut txn, repository_id, &page, None, bound).await?;
    txn.commit().await?;
    Ok(Confirmation::Written(Outcome::of_change(changed(&written))))
}

/// Whether a page write changed the mirror.
fn changed(written: &Written) -> bool {
    written.applied > 0 || written.nested.total() > 0
}
