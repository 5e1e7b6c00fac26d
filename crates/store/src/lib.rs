//! Postgres storage shared by the services: sea-orm entities with tenant-scoped query helpers,
//! connection secrets encrypted at rest, and the transactional outbox.
#![forbid(unsafe_code)]

pub mod entity;
pub mod outbox;
pub mod secrets;

pub use sea_orm;
