//! GitHub webhooks, consumed from JetStream after ingress stored them. One handler reads each
//! delivery's body, resolves the connection's GitHub instance and dispatches by event; every
//! writer locks the rows it compares, so a redelivered, late or reordered payload only ever moves
//! the mirror forward. Events nobody handles are acknowledged and counted, never an error.

pub mod checks;
pub mod comments;
pub mod filters;
pub mod installation;
pub mod items;
pub mod misfiled;
pub mod payload;
pub mod repository;
pub mod reviewers;
pub mod reviews;

use std::sync::Arc;

use bus::consumer::{Delivery, Handler, HandlerError, Settle, headers};
use bus::contracts::WebhookDelivery;
use sea_orm::{DatabaseConnection, EntityTrait};
use sqlx::PgPool;
use store::admission::{self, Origin, Refusal, Scope};
use store::entity::{ConnectionStatus, connection};
use uuid::Uuid;

use crate::{GithubSource, SourceFactory};

/// What handling a delivery came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The mirror changed (or an event was recorded).
    Applied,
    /// Older than the mirror, or already there: nothing changed.
    Unchanged,
    /// Not for us: an event or action we do not act on.
    Ignored,
}

impl Outcome {
    /// `Applied` when the delivery changed the mirror or recorded an event, else `Unchanged`.
    pub fn of_change(changed: bool) -> Self {
        if changed {
            Outcome::Applied
        } else {
            Outcome::Unchanged
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Unchanged => "unchanged",
            Outcome::Ignored => "ignored",
        }
    }
}

/// Why a delivery was not handled.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// Can never succeed (malformed payload, missing routing header): recorded dead.
    #[error("{0}")]
    Invalid(String),
    /// May succeed later (database unavailable): redelivered with backoff.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// The same, through sea-orm.
    #[error("database: {0}")]
    Store(#[from] sea_orm::DbErr),
    /// Outside what the delivering connection verifiably covers: acknowledged, counted, and
    /// nothing written.
    #[error("out of scope: {0}")]
    OutOfScope(Refusal),
}

/// The delivery as handlers see it.
pub struct Webhook<'a> {
    /// `X-GitHub-Event`.
    pub event: &'a str,
    pub body: &'a [u8],
    /// The connection whose endpoint received it.
    pub connection_id: Uuid,
    /// That connection and ingress's record of the delivery: what admission decides on.
    pub origin: Origin,
    /// The GitHub instance of that connection.
    pub provider_instance_id: Uuid,
    /// When JetStream stored it (the NATS server's clock): the date of dated snapshots.
    pub received_at: time::OffsetDateTime,
}

/// Consumes `github.>` deliveries for github-sync.
pub struct WebhookHandler {
    pub pool: PgPool,
    /// Reads GitHub for a delivery that needs more than its payload (a head's check runs).
    pub readers: Readers,
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

/// The delivery's body: inline, or by reference to the stored raw body (`None`: erased).
async fn body(
    pool: &PgPool,
    message: WebhookDelivery,
    delivery: &Delivery,
) -> Result<Option<Vec<u8>>, WebhookError> {
    let Some(reference) = delivery.header(store::headers::BODY_REF) else {
        return Ok(Some(message.body));
    };
    let message_id = message
        .body_ref
        .ok_or_else(|| WebhookError::Invalid(format!("malformed body reference {reference:?}")))?;
    Ok(store::inbound::stored_body(pool, message_id).await?)
}

async fn provider_instance(
    pool: &PgPool,
    connection_id: Uuid,
) -> Result<Option<Uuid>, sqlx::Error> {
    let row: Option<(Uuid,)> = sqlx::query_as(
        "SELECT provider_instance_id FROM connection WHERE id = $1 AND kind = 'github'",
    )
    .bind(connection_id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(id,)| id))
}

impl WebhookHandler {
    async fn dispatch(
        &self,
        message: WebhookDelivery,
        delivery: &Delivery,
        event: &str,
    ) -> Result<Outcome, WebhookError> {
        let connection_header = message.connection_id;
        let delivery_id = message.delivery_id;
        let Some(body) = body(&self.pool, message, delivery).await? else {
            return Err(WebhookError::Invalid(
                "the delivery's body is no longer stored".into(),
            ));
        };
        let connection_id = connection_header
            .ok_or_else(|| WebhookError::Invalid("no connection header".into()))?;
        let Some(provider_instance_id) = provider_instance(&self.pool, connection_id).await? else {
            // The connection is gone (erased): nothing of it may be written.
            return Ok(Outcome::Ignored);
        };
        let hook = Webhook {
            event,
            body: &body,
            connection_id,
            origin: Origin {
                connection_id,
                delivery_id,
            },
            provider_instance_id,
            received_at: delivery.stored_at(),
        };
        match event {
            "repository" => repository::handle(&self.pool, &self.readers, &hook).await,
            "installation" => installation::installation(&self.pool, &self.readers, &hook).await,
            "installation_repositories" => {
                installation::installation_repositories(&self.pool, &self.readers, &hook).await
            }
            "issues" => items::issues(&self.pool, &hook).await,
            "pull_request" => items::pull_request(&self.pool, &hook).await,
            "check_suite" => checks::check_suite(&self.pool, &self.readers, &hook).await,
            "status" => checks::status(&self.pool, &self.readers, &hook).await,
            // A run's end is read when its suite completes: the run alone says nothing of the rest.
            "check_run" => Ok(Outcome::Ignored),
            "issue_comment" => comments::issue_comment(&self.pool, &hook).await,
            "pull_request_review" => reviews::review(&self.pool, &hook).await,
            "pull_request_review_comment" => reviews::review_comment(&self.pool, &hook).await,
            "pull_request_review_thread" => reviews::thread(&self.pool, &hook).await,
            _ => Ok(Outcome::Ignored),
        }
    }
}

impl Handler for WebhookHandler {
    type Message = WebhookDelivery;

    async fn handle(
        &self,
        message: WebhookDelivery,
        delivery: &Delivery,
    ) -> Result<Settle, HandlerError> {
        let event = message.event.clone();
        match self.dispatch(message, delivery, &event).await {
            Ok(outcome) => {
                metrics::counter!("github_webhooks_total", "event" => event.clone(), "outcome" => outcome.as_str())
                    .increment(1);
                tracing::debug!(%event, outcome = outcome.as_str(), "github webhook handled");
                Ok(match outcome {
                    Outcome::Applied => Settle::Applied("github webhook"),
                    Outcome::Unchanged => Settle::Unchanged("github webhook"),
                    Outcome::Ignored => Settle::Ignored("github webhook"),
                })
            }
            Err(WebhookError::Invalid(reason)) => {
                metrics::counter!("github_webhooks_total", "event" => event, "outcome" => "invalid")
                    .increment(1);
                Err(HandlerError::Permanent(reason))
            }
            Err(WebhookError::OutOfScope(refusal)) => {
                // Never retried: what the connection covers decides, and it was asked.
                metrics::counter!("webhooks_rejected_total", "vendor" => "github", "reason" => "out_of_scope")
                    .increment(1);
                metrics::counter!("github_webhooks_total", "event" => event.clone(), "outcome" => "out_of_scope")
                    .increment(1);
                tracing::info!(
                    %event,
                    connection_id = delivery.header(headers::CONNECTION).unwrap_or_default(),
                    delivery_id = delivery.header(headers::DELIVERY).unwrap_or_default(),
                    reason = refusal.as_str(),
                    "github webhook out of the connection's scope; acknowledged, nothing written"
                );
                Ok(Settle::Ignored("out of the connection's scope"))
            }
            Err(e @ (WebhookError::Database(_) | WebhookError::Store(_))) => {
                Err(HandlerError::transient(e))
            }
        }
    }
}

/// `at` at the microsecond precision Postgres stores, so a stored receive time compares equal
/// to the same instant received again and a key derived before and after storing is one key.
pub fn micros(at: time::OffsetDateTime) -> time::OffsetDateTime {
    let nanos = at.nanosecond();
    at.replace_nanosecond(nanos - nanos % 1_000).unwrap_or(at)
}

/// Parses a payload, or says which event it failed to be.
pub fn parse<'a, T: serde::Deserialize<'a>>(hook: &Webhook<'a>) -> Result<T, WebhookError> {
    serde_json::from_slice(hook.body)
        .map_err(|e| WebhookError::Invalid(format!("malformed {} payload: {e}", hook.event)))
}

/// The mirrored repository a webhook is about, once the delivery is admitted for it: the
/// delivering connection has a monitor bound to the payload's repository id (see
/// [`store::admission`]); otherwise [`WebhookError::OutOfScope`] and nothing is written. Selected
/// by GitHub's repository id (never by name, so a reused name cannot capture another
/// repository's work); a repository not mirrored yet is created.
pub async fn monitored_repository(
    conn: &mut sqlx::PgConnection,
    hook: &Webhook<'_>,
    repository: &payload::Repository,
) -> Result<Uuid, WebhookError> {
    let scope = Scope::GithubRepository {
        native_id: repository.id,
    };
    // Admission before anything is read or written for the repository.
    admission::admit(&mut *conn, &hook.origin, scope)
        .await?
        .map_err(WebhookError::OutOfScope)?;
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
