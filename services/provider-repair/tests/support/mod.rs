//! What the provider-repair tests of each vendor share: a running provider-repair on its own
//! Postgres and JetStream, connections, registrations, transitions, and waiting for a fence.
#![allow(dead_code)]

use std::time::Duration;

use anyhow::{Context as _, Result};
use lifecycle_core::connection::Transition;
use sea_orm::{EntityTrait, QuerySelect, TransactionTrait};
use store::entity::connection;
use store::registration::ResourceKind;
use store::repair::Repair;
use uuid::Uuid;

pub struct Stack {
    pub env: testkit::TestEnv,
    service: Option<testkit::Running>,
}

impl Stack {
    /// provider-repair revisiting due fences every second, each vendor call timing out after
    /// a second, with `flags` added.
    pub async fn start(flags: &[String]) -> Result<Stack> {
        let env = testkit::TestEnv::new().await?;
        let mut args = vec![
            format!("--secret-key={}", testkit::secret_key()),
            "--provider-repair-cron=* * * * * *".to_owned(),
            "--provider-repair-request-timeout=1".to_owned(),
        ];
        args.extend_from_slice(flags);
        let config: provider_repair::Config = testkit::config(env.common_args(), &args)?;
        let service = testkit::spawn(config).await?;
        Ok(Stack {
            env,
            service: Some(service),
        })
    }

    pub fn pool(&self) -> &sqlx::PgPool {
        self.env.db.db.get_postgres_connection_pool()
    }

    /// A provider instance of `kind` at `server_url`.
    pub async fn instance(&self, kind: &str, server_url: Option<&str>) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(kind)
            .bind(server_url)
            .execute(self.pool())
            .await?;
        Ok(id)
    }

    /// An active connection of `kind` in a workspace of its own, its `token` sealed.
    pub async fn connection(
        &self,
        kind: &str,
        instance: Uuid,
        token: Option<&str>,
    ) -> Result<Uuid> {
        let (_, conn) = testkit::active_connection(
            &self.env.db.db,
            kind,
            instance,
            serde_json::json!({}),
            token,
        )
        .await?;
        Ok(conn)
    }

    /// A registration of `kind` the connection's current generation adopted, as its vendor
    /// path records a resource it created (marker and URL hash first, then the vendor's id).
    pub async fn adopted(
        &self,
        conn: Uuid,
        kind: ResourceKind,
        target: &str,
        url: &str,
        vendor_id: &str,
    ) -> Result<Uuid> {
        let registration = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO provider_registration (id, connection_id, provider_instance_id,
                 resource_kind, target, marker, url_hash, connection_version,
                 lifecycle_generation, state, vendor_id)
             SELECT $1, c.id, c.provider_instance_id, $3, $4, $5, $6, c.version,
                    c.lifecycle_generation, 'adopted', $7
               FROM connection c WHERE c.id = $2",
        )
        .bind(registration)
        .bind(conn)
        .bind(kind.as_str())
        .bind(target)
        .bind(Uuid::now_v7().to_string())
        .bind(store::inbound::sha256_hex(url.as_bytes()))
        .bind(vendor_id)
        .execute(self.pool())
        .await?;
        Ok(registration)
    }

    /// Records a resource the connection holds without having created it.
    pub async fn keep(
        &self,
        kept: &store::repair::KeptResource<'_>,
    ) -> Result<store::repair::Kept> {
        let mut tx = self.pool().begin().await?;
        let kept = store::repair::keep(&mut tx, kept).await?;
        tx.commit().await?;
        Ok(kept)
    }

    /// Applies `transition` as control-api does: identity locks, row lock, apply (capture).
    pub async fn transition(&self, conn: Uuid, transition: Transition) -> Result<()> {
        let txn = self.env.db.db.begin().await?;
        store::repair::lock_identities(&txn, &[conn]).await?;
        let row = connection::Entity::find_by_id(conn)
            .lock_exclusive()
            .one(&txn)
            .await?
            .context("the connection exists")?;
        store::lifecycle::apply(&txn, row, transition, "test", "transition").await??;
        txn.commit().await?;
        Ok(())
    }

    /// The connection's fences.
    pub async fn fences(&self, conn: Uuid) -> Result<Vec<Repair>> {
        Ok(store::repair::of_connection(self.pool(), conn).await?)
    }

    /// The connection's one fence once `done` holds for it (within 20 s).
    pub async fn fence_when(&self, conn: Uuid, done: impl Fn(&Repair) -> bool) -> Result<Repair> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let fences = self.fences(conn).await?;
            if let [fence] = fences.as_slice()
                && done(fence)
            {
                return Ok(fence.clone());
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!("the fence never got there: {fences:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The fence's backoff is over: due now.
    pub async fn due_now(&self, id: Uuid) -> Result<()> {
        sqlx::query("UPDATE provider_resource_repair SET next_attempt_at = now() WHERE id = $1")
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// A dispatched attempt's outcome is recorded (its detail replaced `dispatched`).
    pub fn attempted(f: &Repair) -> bool {
        f.fence.ever_dispatched() && f.last_outcome.as_deref().is_some_and(|o| o != "dispatched")
    }

    pub async fn stop(mut self) -> Result<()> {
        if let Some(service) = self.service.take() {
            service.stop().await?;
        }
        Ok(())
    }
}
