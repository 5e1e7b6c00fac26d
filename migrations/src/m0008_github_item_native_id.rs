//! Items by native id alone, across repositories: a webhook finds work misfiled under another
//! repository row of the same instance before it writes.

use sea_orm_migration::prelude::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0008_github_item_native_id"
    }
}

const UP: &str = r#"
CREATE INDEX IF NOT EXISTS issue_native_id ON issue (native_id);
CREATE INDEX IF NOT EXISTS pull_request_native_id ON pull_request (native_id);
"#;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared(UP).await?;
        Ok(())
    }

    // Forward-only: a fix is a new migration.
    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration(
            "forgesync migrations are forward-only".into(),
        ))
    }
}
