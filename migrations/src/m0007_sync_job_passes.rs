//! How many passes a sync job has started: a manual BACKFILL repeats an incomplete pass.

use sea_orm_migration::prelude::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0007_sync_job_passes"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared(
                "ALTER TABLE sync_job ADD COLUMN IF NOT EXISTS passes integer NOT NULL DEFAULT 0",
            )
            .await?;
        Ok(())
    }

    // Forward-only: a fix is a new migration.
    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration(
            "forgesync migrations are forward-only".into(),
        ))
    }
}
