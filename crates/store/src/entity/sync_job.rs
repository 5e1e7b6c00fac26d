//! `sync_job`: the truth about a queued or running sync; the `jobs.*` message only announces it.

use sea_orm::QueryOrder;
use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

use super::ConnectionKind;

/// What a job may do (only RECONCILIATION may infer deletion; see `lifecycle_core`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Text")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobType {
    #[sea_orm(string_value = "INITIAL")]
    Initial,
    #[sea_orm(string_value = "RECONCILIATION")]
    Reconciliation,
    #[sea_orm(string_value = "BACKFILL")]
    Backfill,
}

impl JobType {
    /// The name used in subjects and APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            JobType::Initial => "INITIAL",
            JobType::Reconciliation => "RECONCILIATION",
            JobType::Backfill => "BACKFILL",
        }
    }
}

impl From<lifecycle_core::job::SyncJobType> for JobType {
    fn from(t: lifecycle_core::job::SyncJobType) -> Self {
        use lifecycle_core::job::SyncJobType as S;
        match t {
            S::Initial => JobType::Initial,
            S::Reconciliation => JobType::Reconciliation,
            S::Backfill => JobType::Backfill,
        }
    }
}

impl From<JobType> for lifecycle_core::job::SyncJobType {
    fn from(t: JobType) -> Self {
        use lifecycle_core::job::SyncJobType as S;
        match t {
            JobType::Initial => S::Initial,
            JobType::Reconciliation => S::Reconciliation,
            JobType::Backfill => S::Backfill,
        }
    }
}

/// Why a job exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Text")]
#[serde(rename_all = "lowercase")]
pub enum JobTrigger {
    #[sea_orm(string_value = "scheduled")]
    Scheduled,
    #[sea_orm(string_value = "manual")]
    Manual,
    #[sea_orm(string_value = "lifecycle")]
    Lifecycle,
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Text")]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    #[sea_orm(string_value = "queued")]
    Queued,
    #[sea_orm(string_value = "running")]
    Running,
    #[sea_orm(string_value = "succeeded")]
    Succeeded,
    #[sea_orm(string_value = "failed")]
    Failed,
    #[sea_orm(string_value = "canceled")]
    Canceled,
}

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "sync_job")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    pub kind: ConnectionKind,
    pub job_type: JobType,
    pub trigger: JobTrigger,
    pub status: JobStatus,
    pub progress_done: i64,
    pub progress_total: Option<i64>,
    pub error: Option<String>,
    pub claimed_by: Option<String>,
    pub lease_until: Option<TimeDateTimeWithTimeZone>,
    pub created_at: TimeDateTimeWithTimeZone,
    pub started_at: Option<TimeDateTimeWithTimeZone>,
    pub finished_at: Option<TimeDateTimeWithTimeZone>,
    pub updated_at: TimeDateTimeWithTimeZone,
    /// One job per logical request (`initial:<connection>:<generation>`), whoever asks.
    pub dedup_key: Option<String>,
    /// Passes started so far (a manual backfill repeats an incomplete one); `progress_done`
    /// counts the current pass.
    pub passes: i32,
    /// The trace context of whoever queued the job (`traceparent`, `tracestate`): the job's
    /// spans continue that trace.
    pub trace_context: Option<Json>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// Jobs of one connection in one workspace, newest first.
pub fn of_connection(workspace_id: Uuid, connection_id: Uuid) -> Select<Entity> {
    Entity::find()
        .filter(Column::WorkspaceId.eq(workspace_id))
        .filter(Column::ConnectionId.eq(connection_id))
        .order_by_desc(Column::CreatedAt)
}
