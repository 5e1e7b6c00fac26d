//! `dead_message`: a message that exhausted its deliveries, kept with its reason for replay.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "dead_message")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub stream: String,
    pub consumer: String,
    pub subject: String,
    pub headers: Json,
    pub payload: Vec<u8>,
    pub reason: String,
    pub attempts: i64,
    pub created_at: TimeDateTimeWithTimeZone,
    pub replayed_at: Option<TimeDateTimeWithTimeZone>,
    pub replay_count: i32,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
