//! What a vendor declares instead of editing `store`: an admission rule and the kinds of
//! resource it creates, and the events it records. Each test declares a vendor that is not a
//! forge, in the test itself.

mod admission;
mod events;
mod registration;

use anyhow::Result;
use sqlx::PgPool;
use uuid::Uuid;

/// A fresh database with one provider instance of `kind`.
pub struct World {
    _db: testkit::TestDb,
    pub pool: PgPool,
    pub instance: Uuid,
}

impl World {
    pub async fn new(kind: &str) -> Result<World> {
        let db = testkit::TestDb::new().await?;
        let pool = db.db.get_postgres_connection_pool().clone();
        let instance = Uuid::now_v7();
        sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, $2)")
            .bind(instance)
            .bind(kind)
            .execute(&pool)
            .await?;
        Ok(World {
            _db: db,
            pool,
            instance,
        })
    }

    /// A workspace with one connection of `kind` in `status`; returns (workspace, connection).
    pub async fn connection(&self, kind: &str, status: &str) -> Result<(Uuid, Uuid)> {
        let (ws, conn) = (Uuid::now_v7(), Uuid::now_v7());
        sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'w')")
            .bind(ws)
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(conn)
        .bind(ws)
        .bind(kind)
        .bind(status)
        .bind(self.instance)
        .execute(&self.pool)
        .await?;
        Ok((ws, conn))
    }
}
