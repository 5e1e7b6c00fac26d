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
mod m0010_head_check_state;
mod m0011_dispatch_records;
mod m0012_connection_grant;
mod m0013_endpoint_provider_ref_unique;
mod m0014_body_consumption;
mod m0015_stream_ledger;
mod m0016_erasure;
mod m0017_erasure_indexes;
mod m0018_credentials_refused;
mod m0019_repository_renamed_at;
mod m0020_gitlab_watermark;
mod m0021_registration;
mod m0024_trace_context;
mod m0025_resource_kind_open;
mod m0026_listing_state;
mod m0027_integration_event;
mod m0028_delivery_erasure;
mod m0029_future_versions;
mod m0030_one_queued_job;
mod m0031_outline_subscription_scope;
mod m0032_tenant_keyed_endpoints;
mod m0033_deferred_jobs;
mod m0034_dead_messages_per_workspace;
mod m0035_workspace_usage;
mod m0036_slack;
mod m0037_slack_paused_ts;
mod m0038_outline;
mod m0039_gitlab_approvals;
mod m0040_gitlab_thread_ids;
mod m0041_gitlab_head_check;
mod m0042_gitlab_readiness;
mod m0043_gitlab_pushes_requested_changes;
mod m0044_organization_tier;
mod m0045_provider_repair;
mod m0046_registration_removed;
mod m0047_registration_capture_scope;
mod m0048_provider_repair_audit;
mod m0049_oauth;

/// A migration that is one SQL text. Forward-only: a fix is a new migration, never a rollback.
struct Sql {
    name: &'static str,
    up: &'static str,
}

impl MigrationName for Sql {
    fn name(&self) -> &str {
        self.name
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Sql {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared(self.up).await?;
        Ok(())
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration(
            "forgesync migrations are forward-only".into(),
        ))
    }
}

/// Every migration, oldest first.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(Sql {
                name: "m0001_core",
                up: m0001_core::UP,
            }),
            Box::new(m0002_schedules::Migration),
            Box::new(Sql {
                name: "m0003_ingress",
                up: m0003_ingress::UP,
            }),
            Box::new(Sql {
                name: "m0004_github",
                up: m0004_github::UP,
            }),
            Box::new(Sql {
                name: "m0005_reconciled_at",
                up: m0005_reconciled_at::UP,
            }),
            Box::new(Sql {
                name: "m0006_github_live",
                up: m0006_github_live::UP,
            }),
            Box::new(Sql {
                name: "m0007_sync_job_passes",
                up: m0007_sync_job_passes::UP,
            }),
            Box::new(Sql {
                name: "m0008_github_item_native_id",
                up: m0008_github_item_native_id::UP,
            }),
            Box::new(Sql {
                name: "m0009_github_comment_events",
                up: m0009_github_comment_events::UP,
            }),
            Box::new(Sql {
                name: "m0010_head_check_state",
                up: m0010_head_check_state::UP,
            }),
            Box::new(Sql {
                name: "m0011_dispatch_records",
                up: m0011_dispatch_records::UP,
            }),
            Box::new(Sql {
                name: "m0012_connection_grant",
                up: m0012_connection_grant::UP,
            }),
            Box::new(Sql {
                name: "m0013_endpoint_provider_ref_unique",
                up: m0013_endpoint_provider_ref_unique::UP,
            }),
            Box::new(Sql {
                name: "m0014_body_consumption",
                up: m0014_body_consumption::UP,
            }),
            Box::new(Sql {
                name: "m0015_stream_ledger",
                up: m0015_stream_ledger::UP,
            }),
            Box::new(Sql {
                name: "m0016_erasure",
                up: m0016_erasure::UP,
            }),
            Box::new(Sql {
                name: "m0017_erasure_indexes",
                up: m0017_erasure_indexes::UP,
            }),
            Box::new(Sql {
                name: "m0018_credentials_refused",
                up: m0018_credentials_refused::UP,
            }),
            Box::new(Sql {
                name: "m0019_repository_renamed_at",
                up: m0019_repository_renamed_at::UP,
            }),
            Box::new(Sql {
                name: "m0020_gitlab_watermark",
                up: m0020_gitlab_watermark::UP,
            }),
            Box::new(Sql {
                name: "m0021_registration",
                up: m0021_registration::UP,
            }),
            Box::new(Sql {
                name: "m0024_trace_context",
                up: m0024_trace_context::UP,
            }),
            Box::new(Sql {
                name: "m0025_resource_kind_open",
                up: m0025_resource_kind_open::UP,
            }),
            Box::new(Sql {
                name: "m0026_listing_state",
                up: m0026_listing_state::UP,
            }),
            Box::new(Sql {
                name: "m0027_integration_event",
                up: m0027_integration_event::UP,
            }),
            Box::new(Sql {
                name: "m0028_delivery_erasure",
                up: m0028_delivery_erasure::UP,
            }),
            Box::new(Sql {
                name: "m0029_future_versions",
                up: m0029_future_versions::UP,
            }),
            Box::new(Sql {
                name: "m0030_one_queued_job",
                up: m0030_one_queued_job::UP,
            }),
            Box::new(Sql {
                name: "m0031_outline_subscription_scope",
                up: m0031_outline_subscription_scope::UP,
            }),
            Box::new(Sql {
                name: "m0032_tenant_keyed_endpoints",
                up: m0032_tenant_keyed_endpoints::UP,
            }),
            Box::new(Sql {
                name: "m0033_deferred_jobs",
                up: m0033_deferred_jobs::UP,
            }),
            Box::new(Sql {
                name: "m0034_dead_messages_per_workspace",
                up: m0034_dead_messages_per_workspace::UP,
            }),
            Box::new(Sql {
                name: "m0035_workspace_usage",
                up: m0035_workspace_usage::UP,
            }),
            Box::new(Sql {
                name: "m0036_slack",
                up: m0036_slack::UP,
            }),
            Box::new(Sql {
                name: "m0037_slack_paused_ts",
                up: m0037_slack_paused_ts::UP,
            }),
            Box::new(Sql {
                name: "m0038_outline",
                up: m0038_outline::UP,
            }),
            Box::new(Sql {
                name: "m0039_gitlab_approvals",
                up: m0039_gitlab_approvals::UP,
            }),
            Box::new(Sql {
                name: "m0040_gitlab_thread_ids",
                up: m0040_gitlab_thread_ids::UP,
            }),
            Box::new(Sql {
                name: "m0041_gitlab_head_check",
                up: m0041_gitlab_head_check::UP,
            }),
            Box::new(Sql {
                name: "m0042_gitlab_readiness",
                up: m0042_gitlab_readiness::UP,
            }),
            Box::new(Sql {
                name: "m0043_gitlab_pushes_requested_changes",
                up: m0043_gitlab_pushes_requested_changes::UP,
            }),
            Box::new(Sql {
                name: "m0044_organization_tier",
                up: m0044_organization_tier::UP,
            }),
            Box::new(Sql {
                name: "m0045_provider_repair",
                up: m0045_provider_repair::UP,
            }),
            Box::new(Sql {
                name: "m0046_registration_removed",
                up: m0046_registration_removed::UP,
            }),
            Box::new(Sql {
                name: "m0047_registration_capture_scope",
                up: m0047_registration_capture_scope::UP,
            }),
            Box::new(Sql {
                name: "m0048_provider_repair_audit",
                up: m0048_provider_repair_audit::UP,
            }),
            Box::new(Sql {
                name: "m0049_oauth",
                up: m0049_oauth::UP,
            }),
        ]
    }
}
