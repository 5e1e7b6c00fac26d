//! The forgesync schema. Migrations only move forward; applying them twice changes nothing.
#![forbid(unsafe_code)]

pub use sea_orm_migration::MigratorTrait;
use sea_orm_migration::prelude::*;

mod m0001_core;
mod m0002_schedules;
mod m0003_ingress;
mod m0004_github;
mod m0005_reconciled_at;
mod m0006_github_live;
mod m0007_sync_job_passes;
mod m0008_github_item_native_id;
mod m0009_github_comment_events;

/// Every migration, oldest first.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m0001_core::Migration),
            Box::new(m0002_schedules::Migration),
            Box::new(m0003_ingress::Migration),
            Box::new(m0004_github::Migration),
            Box::new(m0005_reconciled_at::Migration),
            Box::new(m0006_github_live::Migration),
            Box::new(m0007_sync_job_passes::Migration),
            Box::new(m0008_github_item_native_id::Migration),
            Box::new(m0009_github_comment_events::Migration),
        ]
    }
}
