//! `inbound_endpoint`: one address a vendor delivers webhooks to, owned by one connection.

use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// How the vendor-side hook came to exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Text")]
#[serde(rename_all = "lowercase")]
pub enum Registration {
    /// An operator created the hook at the vendor and gave us its secret.
    #[sea_orm(string_value = "operator")]
    Operator,
    /// We registered the hook (e.g. GitLab group hooks on connect).
    #[sea_orm(string_value = "registered")]
    Registered,
    /// The vendor's app configuration delivers it (GitHub App, Slack app).
    #[sea_orm(string_value = "app")]
    App,
}

/// Whether deliveries are accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Text")]
#[serde(rename_all = "lowercase")]
pub enum EndpointStatus {
    #[sea_orm(string_value = "active")]
    Active,
    /// A new secret was issued; the previous one still verifies until `previous_valid_until`.
    #[sea_orm(string_value = "rotating")]
    Rotating,
    /// The connection was disconnected: deliveries are answered 410 and nothing is stored.
    #[sea_orm(string_value = "disabled")]
    Disabled,
}

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "inbound_endpoint")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
    pub kind: super::ConnectionKind,
    /// The path token of token-addressed routes (`/hooks/{token}`, `/webhooks/outline/{token}`).
    pub address_token: Option<String>,
    pub registration: Registration,
    /// The vendor's name for the hook: GitHub hook id, Slack team id, Outline subscription id.
    pub provider_ref: Option<String>,
    /// Name of the sealed `connection_secret` that verifies deliveries.
    pub secret_current: String,
    pub secret_previous: Option<String>,
    pub previous_valid_until: Option<TimeDateTimeWithTimeZone>,
    pub token_lookup: Option<String>,
    pub previous_token_lookup: Option<String>,
    pub status: EndpointStatus,
    /// A tenant chose or was shown the current secret: what it signs is a claim (m0032).
    pub tenant_keyed: bool,
    /// The same of the previous secret, while it still verifies.
    pub previous_tenant_keyed: bool,
    pub created_at: TimeDateTimeWithTimeZone,
    pub updated_at: TimeDateTimeWithTimeZone,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// One endpoint of one connection of one workspace; anything else is not found.
pub async fn find_in_connection<C: ConnectionTrait>(
    db: &C,
    workspace_id: Uuid,
    connection_id: Uuid,
    id: Uuid,
) -> Result<Option<Model>, DbErr> {
    Entity::find()
        .filter(Column::WorkspaceId.eq(workspace_id))
        .filter(Column::ConnectionId.eq(connection_id))
        .filter(Column::Id.eq(id))
        .one(db)
        .await
}
