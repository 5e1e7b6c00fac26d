//! `connection_audit`: who changed a connection's state, from what to what.

use sea_orm::QueryOrder;
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "connection_audit")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    pub actor: String,
    pub action: String,
    pub before_status: Option<String>,
    pub after_status: Option<String>,
    pub version: i64,
    pub created_at: TimeDateTimeWithTimeZone,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// Audit rows of one connection in one workspace, newest first.
pub fn of_connection(workspace_id: Uuid, connection_id: Uuid) -> Select<Entity> {
    Entity::find()
        .filter(Column::WorkspaceId.eq(workspace_id))
        .filter(Column::ConnectionId.eq(connection_id))
        .order_by_desc(Column::CreatedAt)
}
