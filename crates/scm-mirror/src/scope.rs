//! What every forge's sync `Vendor` shares about its scope, written once: a monitored repository
//! (a GitHub repository, a GitLab project) as a pass walks it, its mirrored row found once by the
//! native id the connection's own credentials resolved (a name alone binds nothing), the live ids
//! a RECONCILIATION captures, the tombstones the deletion gate planned, and the per-repository
//! reconcile stamp behind the cooldown. A forge keeps only what is its own beside it (GitHub's
//! identity healing, GitLab's watermarks and notes).

use std::fmt;
use std::time::Duration;

use lifecycle_core::deletion::TombstonePlan;
use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::items::{self, ItemClass};
use crate::repository::RepoRef;

/// A monitor as a pass walks it, with its mirrored repository once the pass resolved it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MonitoredRepository {
    /// The monitor's row (`repository_to_monitor.id`).
    #[sqlx(rename = "id")]
    pub monitor_id: Uuid,
    pub owner: String,
    pub name: String,
    /// The native id the connection's credentials resolved, once known.
    pub native_id: Option<i64>,
    /// The mirrored repository row, once the pass knows it.
    #[sqlx(skip)]
    pub repository_id: Option<Uuid>,
}

impl fmt::Display for MonitoredRepository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// The connection's monitors, in a stable order (by name, case-insensitively).
pub async fn monitors_of(
    pool: &PgPool,
    connection_id: Uuid,
) -> Result<Vec<MonitoredRepository>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, owner, name, native_id FROM repository_to_monitor
          WHERE connection_id = $1 ORDER BY lower(owner), lower(name)",
    )
    .bind(connection_id)
    .fetch_all(pool)
    .await
}

impl MonitoredRepository {
    /// `owner/name`.
    pub fn full_path(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// The monitor as the mirror's repository writers take it.
    pub fn repo_ref(&self) -> RepoRef {
        RepoRef {
            owner: self.owner.clone(),
            name: self.name.clone(),
            native_id: self.native_id,
        }
    }

    /// The mirrored repository of the monitor on `provider_instance_id`, by native id only,
    /// remembered for the rest of the pass.
    pub async fn resolve(
        &mut self,
        pool: &PgPool,
        provider_instance_id: Uuid,
    ) -> Result<Option<Uuid>, sqlx::Error> {
        if self.repository_id.is_some() {
            return Ok(self.repository_id);
        }
        let Some(native_id) = self.native_id else {
            return Ok(None);
        };
        self.repository_id = sqlx::query_scalar(
            "SELECT id FROM repository WHERE provider_instance_id = $1 AND native_id = $2",
        )
        .bind(provider_instance_id)
        .bind(native_id)
        .fetch_optional(pool)
        .await?;
        Ok(self.repository_id)
    }

    /// A RECONCILIATION's candidates of `class`: the live (not tombstoned) native ids of the
    /// mirrored repository; none while it has no row.
    pub async fn live_ids(
        &mut self,
        pool: &PgPool,
        provider_instance_id: Uuid,
        class: ItemClass,
    ) -> Result<Vec<i64>, sqlx::Error> {
        match self.resolve(pool, provider_instance_id).await? {
            Some(id) => items::live_native_ids(pool, class, id).await,
            None => Ok(Vec::new()),
        }
    }

    /// Tombstones what the deletion gate planned (never an erasure: the row stays, cleared).
    pub async fn tombstone(
        &self,
        pool: &PgPool,
        class: ItemClass,
        plan: &TombstonePlan<i64>,
    ) -> Result<u64, sqlx::Error> {
        let Some(repository_id) = self.repository_id else {
            return Ok(0);
        };
        let ids: Vec<i64> = plan.ids().iter().copied().collect();
        items::tombstone(pool, class, repository_id, &ids, OffsetDateTime::now_utc()).await
    }

    /// The fields a sweep's activity names it by.
    pub fn detail(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut detail = serde_json::Map::new();
        detail.insert(
            "repository_id".into(),
            serde_json::json!(self.repository_id),
        );
        detail
    }

    /// Whether its repository finished a complete reconcile within `cooldown`.
    pub async fn reconciled_within(
        &self,
        pool: &PgPool,
        provider_instance_id: Uuid,
        cooldown: Duration,
    ) -> Result<bool, sqlx::Error> {
        let Some(native_id) = self.native_id else {
            return Ok(false);
        };
        let cooling: Option<bool> = sqlx::query_scalar(
            "SELECT coalesce(reconciled_at > now() - make_interval(secs => $3), false)
               FROM repository WHERE provider_instance_id = $1 AND native_id = $2",
        )
        .bind(provider_instance_id)
        .bind(native_id)
        .bind(cooldown.as_secs_f64())
        .fetch_optional(pool)
        .await?;
        Ok(cooling.unwrap_or(false))
    }

    /// Stamps a complete reconcile of its repository (by native id; a monitor without one has
    /// no repository to stamp).
    pub async fn mark_reconciled(
        &self,
        pool: &PgPool,
        provider_instance_id: Uuid,
    ) -> Result<(), sqlx::Error> {
        let Some(native_id) = self.native_id else {
            return Ok(());
        };
        sqlx::query(
            "UPDATE repository SET reconciled_at = now()
              WHERE provider_instance_id = $1 AND native_id = $2",
        )
        .bind(provider_instance_id)
        .bind(native_id)
        .execute(pool)
        .await?;
        Ok(())
    }
}
