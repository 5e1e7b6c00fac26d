//! One module per table. Tenant-scoped lookups take the workspace as an argument, so a handler
//! cannot forget the tenant filter.

pub mod connection;
pub mod connection_activity;
pub mod connection_audit;
pub mod connection_secret;
pub mod dead_message;
pub mod dedup_key;
pub mod inbound_endpoint;
pub mod inbound_message;
pub mod inbound_message_body;
pub mod outbox;
pub mod provider_instance;
pub mod sync_job;
pub mod workspace;

pub use connection::{ConnectionKind, ConnectionStatus};
pub use sync_job::{JobStatus, JobTrigger, JobType};
pub use workspace::WorkspaceStatus;
