//! `connection`: one workspace's link to one vendor account, with its lifecycle state.

use lifecycle_core::connection::ConnectionState;
use lifecycle_core::job::JobSupport;
use sea_orm::QuerySelect;
use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// The vendor a connection talks to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize,
)]
#[sea_orm(rs_type = "String", db_type = "Text")]
#[serde(rename_all = "lowercase")]
pub enum ConnectionKind {
    #[sea_orm(string_value = "github")]
    Github,
    #[sea_orm(string_value = "gitlab")]
    Gitlab,
    #[sea_orm(string_value = "slack")]
    Slack,
    #[sea_orm(string_value = "outline")]
    Outline,
}

impl ConnectionKind {
    /// The lowercase name used in subjects and APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionKind::Github => "github",
            ConnectionKind::Gitlab => "gitlab",
            ConnectionKind::Slack => "slack",
            ConnectionKind::Outline => "outline",
        }
    }

    /// The job types this vendor's sync runs, as the vendor's rules declare them.
    pub fn jobs(self) -> JobSupport {
        match self {
            ConnectionKind::Github => lifecycle_core::github::JOBS,
            ConnectionKind::Gitlab => lifecycle_core::gitlab::JOBS,
            ConnectionKind::Slack => lifecycle_core::slack::JOBS,
            ConnectionKind::Outline => lifecycle_core::outline::JOBS,
        }
    }

    /// The secret names a connection of this kind takes through the API, as the vendor's rules
    /// declare them (endpoint secrets are named by `store::inbound`, never by a caller).
    pub fn secret_names(self) -> &'static [&'static str] {
        match self {
            ConnectionKind::Github => lifecycle_core::github::SECRETS,
            ConnectionKind::Gitlab => lifecycle_core::gitlab::SECRETS,
            ConnectionKind::Slack => lifecycle_core::slack::SECRETS,
            ConnectionKind::Outline => lifecycle_core::outline::SECRETS,
        }
    }
}

/// The stored form of [`ConnectionState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Text")]
#[serde(rename_all = "lowercase")]
pub enum ConnectionStatus {
    #[sea_orm(string_value = "pending")]
    Pending,
    #[sea_orm(string_value = "active")]
    Active,
    #[sea_orm(string_value = "suspended")]
    Suspended,
    #[sea_orm(string_value = "paused")]
    Paused,
    #[sea_orm(string_value = "uninstalled")]
    Uninstalled,
    #[sea_orm(string_value = "disconnected")]
    Disconnected,
}

impl From<ConnectionStatus> for ConnectionState {
    fn from(s: ConnectionStatus) -> Self {
        match s {
            ConnectionStatus::Pending => ConnectionState::Pending,
            ConnectionStatus::Active => ConnectionState::Active,
            ConnectionStatus::Suspended => ConnectionState::Suspended,
            ConnectionStatus::Paused => ConnectionState::Paused,
            ConnectionStatus::Uninstalled => ConnectionState::Uninstalled,
            ConnectionStatus::Disconnected => ConnectionState::Disconnected,
        }
    }
}

impl From<ConnectionState> for ConnectionStatus {
    fn from(s: ConnectionState) -> Self {
        match s {
            ConnectionState::Pending => ConnectionStatus::Pending,
            ConnectionState::Active => ConnectionStatus::Active,
            ConnectionState::Suspended => ConnectionStatus::Suspended,
            ConnectionState::Paused => ConnectionStatus::Paused,
            ConnectionState::Uninstalled => ConnectionStatus::Uninstalled,
            ConnectionState::Disconnected => ConnectionStatus::Disconnected,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "connection")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub kind: ConnectionKind,
    pub status: ConnectionStatus,
    pub version: i64,
    pub lifecycle_generation: i64,
    pub provider_instance_id: Uuid,
    pub settings: Json,
    pub created_at: TimeDateTimeWithTimeZone,
    pub updated_at: TimeDateTimeWithTimeZone,
    /// When the vendor last refused the credentials; set until they are replaced
    /// (`store::credentials`).
    pub credentials_refused_at: Option<TimeDateTimeWithTimeZone>,
    /// Why, as the job that met the refusal said it (`bad_credentials: ...`).
    pub credentials_refusal: Option<String>,
    /// When an operator last replaced the secrets.
    pub credentials_replaced_at: Option<TimeDateTimeWithTimeZone>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// Connections of one workspace: the only way handlers reach connections.
pub fn in_workspace(workspace_id: Uuid) -> Select<Entity> {
    Entity::find().filter(Column::WorkspaceId.eq(workspace_id))
}

/// One connection of one workspace; another workspace's connection is simply not found.
pub async fn find_in_workspace<C: ConnectionTrait>(
    db: &C,
    workspace_id: Uuid,
    id: Uuid,
) -> Result<Option<Model>, DbErr> {
    in_workspace(workspace_id)
        .filter(Column::Id.eq(id))
        .one(db)
        .await
}

/// Like [`find_in_workspace`], but locks the row (`FOR UPDATE`) for a compare-and-write.
pub async fn lock_in_workspace<C: ConnectionTrait>(
    db: &C,
    workspace_id: Uuid,
    id: Uuid,
) -> Result<Option<Model>, DbErr> {
    in_workspace(workspace_id)
        .filter(Column::Id.eq(id))
        .lock_exclusive()
        .one(db)
        .await
}
