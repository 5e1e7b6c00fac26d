//! Route admission: a hook on one of our routes about a project the connection does not monitor
//! yet (created after discovery, or moved in). The project is read from GitLab by its id with
//! the delivering connection's own token; only when GitLab reports that same id, inside the
//! connected group, and the connection's selection permits its path, is a monitor bound to its
//! native id created (the delivery is then admitted like any other). Anything else is
//! acknowledged and stores nothing. Each decision is counted in
//! `gitlab_route_admission_total{outcome, reason}`.

use scm_mirror::repository::RepoRef;
use sea_orm::{DatabaseConnection, EntityTrait};
use sqlx::PgPool;
use store::admission::Refusal;
use store::entity::{ConnectionKind, ConnectionStatus, connection};
use sync_engine::webhook::{Webhook, WebhookError};

use crate::mirror::{gid_number, split_path};
use crate::source::ClientFactory;

/// Reads undiscovered projects with the delivering connection's reader.
#[derive(Clone)]
pub struct RouteAdmission {
    pub db: DatabaseConnection,
    pub factory: ClientFactory,
}

/// Why a project was not admitted (the metric's bounded `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// The connection is gone, of another kind, or not active.
    ConnectionNotActive,
    /// GitLab shows no project with that id to the connection.
    NotFound,
    /// GitLab answered with another project.
    IdMismatch,
    /// The project is not in the connected group.
    OutsideGroup,
    /// The selection does not permit it.
    NotSelected,
}

impl Refused {
    fn reason(self) -> &'static str {
        match self {
            Refused::ConnectionNotActive => "connection_not_active",
            Refused::NotFound => "not_found",
            Refused::IdMismatch => "id_mismatch",
            Refused::OutsideGroup => "outside_group",
            Refused::NotSelected => "not_selected",
        }
    }
}

fn count(outcome: &'static str, reason: &'static str) {
    metrics::counter!("gitlab_route_admission_total", "outcome" => outcome, "reason" => reason)
        .increment(1);
}

impl RouteAdmission {
    /// Admits project `native_id` for the delivering connection, or says why not: a refusal is
    /// [`WebhookError::OutOfScope`] (acknowledged, nothing stored); a GitLab read that failed is
    /// [`WebhookError::Unavailable`] (redelivered later).
    pub async fn admit(
        &self,
        pool: &PgPool,
        hook: &Webhook<'_>,
        native_id: i64,
    ) -> Result<(), WebhookError> {
        match self.decide(pool, hook, native_id).await {
            Ok(Ok(())) => {
                count("admitted", "discovered");
                tracing::info!(connection_id = %hook.connection_id, project = native_id, "route admission: monitor created for an undiscovered project");
                Ok(())
            }
            Ok(Err(refused)) => {
                count("refused", refused.reason());
                tracing::info!(connection_id = %hook.connection_id, project = native_id, reason = refused.reason(), "route admission refused; acknowledged, nothing stored");
                Err(WebhookError::OutOfScope(Refusal::NotMonitored))
            }
            Err(e) => {
                let reason = match &e {
                    WebhookError::Unavailable(_) => "gitlab_unavailable",
                    _ => "database",
                };
                count("failed", reason);
                Err(e)
            }
        }
    }

    async fn decide(
        &self,
        pool: &PgPool,
        hook: &Webhook<'_>,
        native_id: i64,
    ) -> Result<Result<(), Refused>, WebhookError> {
        let Some(conn) = connection::Entity::find_by_id(hook.connection_id)
            .one(&self.db)
            .await?
        else {
            return Ok(Err(Refused::ConnectionNotActive));
        };
        if conn.kind != ConnectionKind::Gitlab || conn.status != ConnectionStatus::Active {
            return Ok(Err(Refused::ConnectionNotActive));
        }
        let source = self
            .factory
            .source(&conn)
            .await
            .map_err(|e| WebhookError::Unavailable(format!("{e:#}")))?;
        let Ok(id) = u64::try_from(native_id) else {
            return Ok(Err(Refused::NotFound));
        };
        // The reserve jobs keep is for reads like this one.
        let client = source
            .client
            .with_budget(gitlab_client::Budget::unlimited());
        let project = match client.project_by_id(id).await {
            Ok(Some(project)) => project,
            Ok(None) => return Ok(Err(Refused::NotFound)),
            Err(e) if e.is_not_found() => return Ok(Err(Refused::NotFound)),
            Err(e) => return Err(WebhookError::Unavailable(e.to_string())),
        };
        // Stable id: GitLab must name the very project the hook named.
        if gid_number(project.id.inner()) != Some(native_id) {
            return Ok(Err(Refused::IdMismatch));
        }
        // Membership and selection by the path GitLab reports now, never the payload's.
        let full_path = project.full_path.inner();
        if !source.settings.contains(full_path) {
            return Ok(Err(Refused::OutsideGroup));
        }
        if !source.settings.selects(full_path) {
            return Ok(Err(Refused::NotSelected));
        }
        let Some((owner, name)) = split_path(full_path) else {
            return Ok(Err(Refused::OutsideGroup));
        };
        let repo = RepoRef {
            owner: owner.to_owned(),
            name: name.to_owned(),
            native_id: Some(native_id),
        };
        let mut txn = pool.begin().await?;
        // The connection must still be active when the monitor is made.
        let active: Option<String> =
            sqlx::query_scalar("SELECT status FROM connection WHERE id = $1 FOR SHARE")
                .bind(conn.id)
                .fetch_optional(&mut *txn)
                .await?;
        if active.as_deref() != Some("active") {
            return Ok(Err(Refused::ConnectionNotActive));
        }
        scm_mirror::monitors::materialise(
            &mut txn,
            conn.provider_instance_id,
            conn.workspace_id,
            conn.id,
            std::slice::from_ref(&repo),
        )
        .await?;
        txn.commit().await?;
        Ok(Ok(()))
    }
}
