//! `outbox`: messages committed with the state change they announce, until the stream accepts
//! them (see `crate::outbox`).

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
    /// Relays take the row from then on (an inline publisher has it until then).
    pub available_at: TimeDateTimeWithTimeZone,
    /// Explicit `Nats-Msg-Id`; the row id is used when unset.
    pub msg_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
