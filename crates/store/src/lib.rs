//! Postgres storage shared by the services: sea-orm entities with tenant-scoped query helpers,
//! connection secrets encrypted at rest, the transactional outbox, and webhook ingress records.
#![forbid(unsafe_code)]

pub mod activity;
pub mod admission;
pub mod contracts;
pub mod credentials;
pub mod declaration;
pub mod entity;
pub mod erasure;
pub mod events;
pub mod headers;
pub mod inbound;
pub mod jobs;
pub mod lifecycle;
pub mod oauth;
pub mod outbox;
pub mod registration;
pub mod repair;
pub mod repair_admin;
pub mod scm_scope;
pub mod secrets;
pub mod trace;
pub mod usage;

pub use sea_orm;
