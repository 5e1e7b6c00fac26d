//! Item events of comments, reviews and threads, and the dated resolution state of a thread.
//!
//! A comment edit, a review dismissal and a thread resolution belong to a comment, a review or
//! a thread, not to the version of the item they are filed under: two edits of one comment in
//! the same second are two edits, and two threads resolved at one pull request version are two
//! resolutions. Their source keys identify them, so they leave the (item, name, version) key,
//! as a checks completion already does.

use sea_orm_migration::prelude::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0009_github_comment_events"
    }
}

const UP: &str = r#"
DROP INDEX IF EXISTS item_event_version;
CREATE UNIQUE INDEX IF NOT EXISTS item_event_version
    ON item_event (item_id, name, version)
    WHERE name NOT IN ('scm.pull_request.checks_completed',
                       'scm.issue.comment_edited', 'scm.pull_request.comment_edited',
                       'scm.pull_request.review_dismissed', 'scm.pull_request.thread_resolved');

-- When we received the thread's resolution state (JetStream store time): a resolved or
-- unresolved delivery received earlier than the stored one changes nothing.
ALTER TABLE review_thread ADD COLUMN IF NOT EXISTS resolution_received_at timestamptz;
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
