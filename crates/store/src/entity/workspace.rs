//! `workspace`: the tenant.

use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// A workspace is active until a purge starts; purged once the eraser has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Text")]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceStatus {
    #[sea_orm(string_value = "active")]
    Active,
    #[sea_orm(string_value = "purging")]
    Purging,
    #[sea_orm(string_value = "purged")]
    Purged,
}

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "workspace")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub name: String,
    pub status: WorkspaceStatus,
    pub created_at: TimeDateTimeWithTimeZone,
    pub updated_at: TimeDateTimeWithTimeZone,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
