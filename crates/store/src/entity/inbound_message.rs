//! `inbound_message`: one accepted webhook delivery (its raw body is `inbound_message_body`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "inbound_message")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub endpoint_id: Uuid,
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
    pub kind: super::ConnectionKind,
    /// How the delivery proved itself (e.g. `signature`, `previous_signature`, `replay`).
    pub verification: String,
    /// The selected vendor headers kept with the message.
    pub headers: Json,
    pub body_digest: String,
    pub provider_event_id: Option<String>,
    pub event: String,
    pub subject: String,
    /// The `Nats-Msg-Id` it is published with: its dedup key.
    pub msg_id: String,
    /// Its dispatch record; `dispatched` once that row is gone (view `inbound_message_state`).
    pub outbox_id: Uuid,
    pub replay_of: Option<Uuid>,
    /// Verified by a secret a tenant knows: a claim its consumer confirms with the vendor.
    pub tenant_signed: bool,
    pub received_at: TimeDateTimeWithTimeZone,
    /// When its body, headers and stream copies were erased on their own
    /// (`crate::inbound::erase_delivery`); the row stays as history.
    pub erased_at: Option<TimeDateTimeWithTimeZone>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// One message of one workspace; another workspace's message is simply not found.
pub async fn find_in_workspace<C: ConnectionTrait>(
    db: &C,
    workspace_id: Uuid,
    id: Uuid,
) -> Result<Option<Model>, DbErr> {
    Entity::find()
        .filter(Column::WorkspaceId.eq(workspace_id))
        .filter(Column::Id.eq(id))
        .one(db)
        .await
}
