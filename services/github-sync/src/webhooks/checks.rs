//! `check_suite` and `status` webhooks: when a check suite of a pull request's head completes
//! (whatever it concluded) or a commit status of the head ends, the head's check runs are read
//! through the connection's reader and applied (see [`crate::check_runs`]). Our own App's suite
//! is ignored; a delivery whose connection cannot read GitHub now is redelivered with backoff; a
//! failed read records nothing, and the next hook or scheduled re-read tries again.

use scm_mirror::events::Origin;
use serde::Deserialize;
use sqlx::PgPool;

use super::payload::Repository;
use super::{Outcome, Readers, Webhook, WebhookError, monitored_repository};
use crate::check_runs::{self, Applied};
use crate::source::RepoRef;

#[derive(Debug, Deserialize)]
struct App {
    id: u64,
}

#[derive(Debug, Deserialize)]
struct CheckSuite {
    head_sha: String,
    #[serde(default)]
    app: Option<App>,
}

#[derive(Debug, Deserialize)]
pub struct CheckSuiteEvent {
    action: String,
    check_suite: CheckSuite,
    repository: Repository,
}

#[derive(Debug, Deserialize)]
pub struct StatusEvent {
    sha: String,
    state: String,
    repository: Repository,
}

/// Handles a `check_suite` delivery.
pub async fn check_suite(
    pool: &PgPool,
    readers: &Readers,
    hook: &Webhook<'_>,
    event: CheckSuiteEvent,
) -> Result<Outcome, WebhookError> {
    // A suite is read when it completes, whatever it concluded.
    if event.action != "completed" {
        return Ok(Outcome::Ignored);
    }
    let app_id = event.check_suite.app.as_ref().map(|a| a.id);
    read_head(
        pool,
        readers,
        hook,
        &event.repository,
        &event.check_suite.head_sha,
        app_id,
    )
    .await
}

/// Handles a `status` delivery.
pub async fn status(
    pool: &PgPool,
    readers: &Readers,
    hook: &Webhook<'_>,
    event: StatusEvent,
) -> Result<Outcome, WebhookError> {
    // A commit status is read when it ends; a pending one says nothing new.
    if !matches!(event.state.as_str(), "success" | "failure" | "error") {
        return Ok(Outcome::Ignored);
    }
    read_head(pool, readers, hook, &event.repository, &event.sha, None).await
}

/// Reads `sha`'s runs for the open pull requests whose head it is, and applies them.
async fn read_head(
    pool: &PgPool,
    readers: &Readers,
    hook: &Webhook<'_>,
    repository: &Repository,
    sha: &str,
    suite_app_id: Option<u64>,
) -> Result<Outcome, WebhookError> {
    let repository_id = {
        let mut conn = pool.acquire().await?;
        monitored_repository(&mut conn, hook, repository).await?
    };
    let pull_requests = check_runs::pull_requests_at_head(pool, repository_id, sha).await?;
    if pull_requests.is_empty() {
        tracing::debug!(
            head = sha,
            "no open pull request has this head; its checks are not read"
        );
        return Ok(Outcome::Ignored);
    }
    let Some(source) = readers.active(hook.connection_id).await? else {
        // Retried, not forgotten: once the connection can read GitHub, the head is read.
        tracing::info!(
            head = sha,
            "no GitHub reader for the connection now; the delivery is retried later"
        );
        return Err(WebhookError::Unavailable(
            "no GitHub reader for the connection now".into(),
        ));
    };
    // Our own App's suite never sets the check state.
    if suite_app_id.is_some() && suite_app_id == source.own_app_id() {
        tracing::debug!(head = sha, "our own App's check suite; ignored");
        return Ok(Outcome::Ignored);
    }
    let repo = RepoRef {
        owner: repository.owner.login.clone(),
        name: repository.name.clone(),
        native_id: Some(repository.id),
    };
    let applied = check_runs::read_and_apply(
        pool,
        source.as_ref(),
        &repo,
        sha,
        &pull_requests,
        Origin::Webhook,
    )
    .await?;
    Ok(match applied {
        Ok(Applied { stored, .. }) if stored > 0 => Outcome::Applied,
        // A failed read records nothing: the next hook or the scheduled re-read reads again.
        Ok(_) | Err(_) => Outcome::Unchanged,
    })
}
