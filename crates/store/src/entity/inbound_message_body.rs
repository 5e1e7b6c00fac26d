//! `inbound_message_body`: the raw bytes of a delivery, kept apart so they expire and are erasable.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "inbound_message_body")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub message_id: Uuid,
    pub connection_id: Uuid,
    pub body: Vec<u8>,
    pub retain_until: TimeDateTimeWithTimeZone,
    /// Its message carries it by reference: a consumer reads it here.
    pub by_reference: bool,
    /// When a consumer handled its message (set only for bodies by reference).
    pub consumed_at: Option<TimeDateTimeWithTimeZone>,
    /// By when the stream has dropped its message (set by retention once published).
    pub stream_expires_at: Option<TimeDateTimeWithTimeZone>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
