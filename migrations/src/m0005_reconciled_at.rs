//! When a repository last finished a complete reconcile, for the scheduled pass's cooldown.

use sea_orm_migration::prelude::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0005_reconciled_at"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared(
                "ALTER TABLE repository ADD COLUMN IF NOT EXISTS reconciled_at timestamptz",
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
