//! `outbox`: messages committed with the state change they announce (see `crate::outbox`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "outbox")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub subject: String,
    pub headers: Json,
    pub payload: Vec<u8>,
    pub created_at: TimeDateTimeWithTimeZone,
    pub published_at: Option<TimeDateTimeWithTimeZone>,
    /// Explicit `Nats-Msg-Id`; the row id is used when unset.
    pub msg_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
