//! `schedule_run`: one row per (schedule, due instant), the claim that makes a cron run happen
//! exactly once across replicas (see `runtime::schedule`).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{
    integer, text, text_null, timestamp_with_time_zone, timestamp_with_time_zone_null,
};

/// Creates `schedule_run`.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ScheduleRun {
    Table,
    Schedule,
    DueAt,
    ClaimedBy,
    LeaseUntil,
    Attempts,
    StartedAt,
    FinishedAt,
    Error,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ScheduleRun::Table)
                    .if_not_exists()
                    .col(text(ScheduleRun::Schedule))
                    .col(timestamp_with_time_zone(ScheduleRun::DueAt))
                    .col(text(ScheduleRun::ClaimedBy))
                    .col(timestamp_with_time_zone(ScheduleRun::LeaseUntil))
                    .col(integer(ScheduleRun::Attempts).default(1))
                    .col(
                        timestamp_with_time_zone(ScheduleRun::StartedAt)
                            .default(Expr::current_timestamp()),
                    )
                    .col(timestamp_with_time_zone_null(ScheduleRun::FinishedAt))
                    .col(text_null(ScheduleRun::Error))
                    .primary_key(
                        Index::create()
                            .col(ScheduleRun::Schedule)
                            .col(ScheduleRun::DueAt),
                    )
                    .to_owned(),
            )
            .await
    }
}
