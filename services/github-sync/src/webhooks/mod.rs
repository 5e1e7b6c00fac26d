//! GitHub webhooks, consumed from JetStream after ingress stored them through the shared front
//! half (`sync_engine::webhook`), which reads each delivery's body and resolves the connection's
//! GitHub instance. [`GithubWebhooks`] decodes a payload by event and dispatches it; every writer
//! admits the delivery for the repository it names and locks the rows it compares, so a
//! redelivered, late or reordered payload only ever moves the mirror forward. Events nobody
//! handles are acknowledged and counted, never an error.

pub mod checks;
pub mod comments;
pub mod filters;
pub mod hints;
pub mod installation;
pub mod items;
pub mod misfiled;
pub mod payload;
pub mod repository;
pub mod reviewers;
pub mod reviews;

use std::sync::Arc;

use scm_mirror::admission::GithubRepository;
use sea_orm::{DatabaseConnection, EntityTrait};
use sqlx::PgPool;
use store::entity::{ConnectionKind, ConnectionStatus, connection};
use sync_engine::webhook::hint::Confirmations;
use sync_engine::webhook::{Outcome, Webhook, WebhookApply, WebhookError, parse};
use uuid::Uuid;

use crate::{GithubSource, SourceFactory};

/// github-sync's [`WebhookApply`]: GitHub's events by name, each to its writer.
pub struct GithubWebhooks {
    pub pool: PgPool,
    /// Reads GitHub for a delivery that needs more than its payload (a head's check runs, the
    /// item a hint names).
    pub readers: Readers,
    /// The confirming reads of hints, per item ([`hints`]).
    pub confirmations: Confirmations,
    /// How far past a confirming read a version may be dated.
    pub clock_skew: std::time::Duration,
}

impl GithubWebhooks {
    /// The consumer's vendor half for `workers` webhook workers, allowing `clock_skew` past a
    /// read.
    pub fn new(
        pool: PgPool,
        readers: Readers,
        workers: usize,
        clock_skew: std::time::Duration,
    ) -> Self {
        GithubWebhooks {
            pool,
            readers,
            confirmations: Confirmations::for_workers("github", workers),
            clock_skew,
        }
    }
}

/// Builds a delivery's connection's GitHub reader, as jobs do.
pub struct Readers {
    pub db: DatabaseConnection,
    pub factory: Arc<dyn SourceFactory>,
}

impl Readers {
    /// The reader of an active connection; `None` when the connection is not active or cannot
    /// reach GitHub (logged: a delivery never fails for it).
    pub async fn active(
        &self,
        connection_id: Uuid,
    ) -> Result<Option<Arc<dyn GithubSource>>, sea_orm::DbErr> {
        let Some(conn) = connection::Entity::find_by_id(connection_id)
            .one(&self.db)
            .await?
        else {
            return Ok(None);
        };
        if conn.status != ConnectionStatus::Active {
            tracing::info!(%connection_id, status = ?conn.status, "the connection is not active; GitHub is not read for it");
            return Ok(None);
        }
        match self.factory.source(&conn).await {
            Ok(source) => Ok(Some(source)),
            Err(e) => {
                tracing::warn!(%connection_id, error = %format!("{e:#}"), "cannot reach GitHub with this connection");
                Ok(None)
            }
        }
    }
}

/// A GitHub payload decoded for its event.
pub enum Event {
    Repository(repository::RepositoryEvent),
    Installation(installation::InstallationEvent),
    InstallationRepositories(installation::InstallationRepositoriesEvent),
    InstallationTarget(installation::InstallationTargetEvent),
    Issues(items::IssuesEvent),
    PullRequest(items::PullRequestEvent),
    CheckSuite(checks::CheckSuiteEvent),
    Status(checks::StatusEvent),
    IssueComment(comments::IssueCommentEvent),
    Review(reviews::ReviewEvent),
    ReviewComment(reviews::ReviewCommentEvent),
    ReviewThread(reviews::ThreadEvent),
}

impl WebhookApply for GithubWebhooks {
    const KIND: ConnectionKind = ConnectionKind::Github;
    type Payload = Event;

    fn decode(&self, hook: &Webhook<'_>) -> Result<Option<Event>, WebhookError> {
        Ok(Some(match hook.event {
            "repository" => Event::Repository(parse(hook)?),
            "installation" => Event::Installation(parse(hook)?),
            "installation_repositories" => Event::InstallationRepositories(parse(hook)?),
            "installation_target" => Event::InstallationTarget(parse(hook)?),
            "issues" => Event::Issues(parse(hook)?),
            "pull_request" => Event::PullRequest(parse(hook)?),
            "check_suite" => Event::CheckSuite(parse(hook)?),
            "status" => Event::Status(parse(hook)?),
            // A run's end is read when its suite completes: the run alone says nothing of the rest.
            "check_run" => return Ok(None),
            "issue_comment" => Event::IssueComment(parse(hook)?),
            "pull_request_review" => Event::Review(parse(hook)?),
            "pull_request_review_comment" => Event::ReviewComment(parse(hook)?),
            "pull_request_review_thread" => Event::ReviewThread(parse(hook)?),
            _ => return Ok(None),
        }))
    }

    async fn apply(&self, hook: &Webhook<'_>, event: Event) -> Result<Outcome, WebhookError> {
        let (pool, readers) = (&self.pool, &self.readers);
        // A claim about an item is confirmed by reading the item; its payload is never written.
        if hook.is_hint()
            && let Some(hinted) = event.hinted()
        {
            return hints::confirm(self, hook, hinted).await;
        }
        match event {
            Event::Repository(e) => repository::handle(pool, readers, hook, e).await,
            Event::Installation(e) => installation::installation(pool, readers, hook, e).await,
            Event::InstallationRepositories(e) => {
                installation::installation_repositories(pool, readers, hook, e).await
            }
            Event::InstallationTarget(e) => {
                installation::installation_target(pool, readers, hook, e).await
            }
            Event::Issues(e) => items::issues(pool, hook, e).await,
            Event::PullRequest(e) => items::pull_request(pool, hook, e).await,
            Event::CheckSuite(e) => checks::check_suite(pool, readers, hook, e).await,
            Event::Status(e) => checks::status(pool, readers, hook, e).await,
            Event::IssueComment(e) => comments::issue_comment(pool, hook, e).await,
            Event::Review(e) => reviews::review(pool, hook, e).await,
            Event::ReviewComment(e) => reviews::review_comment(pool, hook, e).await,
            Event::ReviewThread(e) => reviews::thread(pool, hook, e).await,
        }
    }
}

/// `at` at the microsecond precision Postgres stores, so a stored receive time compares equal
/// to the same instant received again and a key derived before and after storing is one key.
pub fn micros(at: time::OffsetDateTime) -> time::OffsetDateTime {
    let nanos = at.nanosecond();
    at.replace_nanosecond(nanos - nanos % 1_000).unwrap_or(at)
}

/// The mirrored repository a webhook is about, once the delivery is admitted for it: the
/// delivering connection has a monitor bound to the payload's repository id (see
/// [`GithubRepository`]); otherwise [`WebhookError::OutOfScope`] and nothing is written. Selected
/// by GitHub's repository id (never by name, so a reused name cannot capture another
/// repository's work); a repository not mirrored yet is created.
pub async fn monitored_repository(
    conn: &mut sqlx::PgConnection,
    hook: &Webhook<'_>,
    repository: &payload::Repository,
) -> Result<Uuid, WebhookError> {
    let scope = GithubRepository {
        native_id: repository.id,
    };
    // Admission before anything is read or written for the repository.
    hook.admit(&mut *conn, scope).await?;
    let found: Option<(Uuid,)> = sqlx::query_as(
        "SELECT id FROM repository WHERE provider_instance_id = $1 AND native_id = $2",
    )
    .bind(hook.provider_instance_id)
    .bind(repository.id)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some((id,)) = found {
        return Ok(id);
    }
    let id = scm_mirror::repository::ensure_repository(
        &mut *conn,
        hook.provider_instance_id,
        &repository.header(),
    )
    .await?;
    Ok(id)
}

/// Records what a delivery told about a connection (or why it changed nothing) as connection
/// activity, in the caller's transaction.
pub async fn record_activity(
    conn: &mut sqlx::PgConnection,
    connection_id: Uuid,
    workspace_id: Uuid,
    activity: &str,
    detail: serde_json::Value,
) -> Result<(), sqlx::Error> {
    store::activity::record(conn, connection_id, workspace_id, activity, detail).await
}
