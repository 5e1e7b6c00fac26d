//! The machinery every forgesync service shares: configuration, telemetry, health endpoints,
//! graceful shutdown, task supervision, the service builder, the database connection and Postgres-claimed cron
//! schedules.
#![forbid(unsafe_code)]

pub mod config;
pub mod crypto;
pub mod db;
pub mod health;
pub mod http_metrics;
pub mod schedule;
pub mod service;
pub mod shutdown;
pub mod supervisor;
pub mod telemetry;

pub use config::{CommonArgs, LogFormat};
pub use crypto::install_crypto_provider;
pub use health::HealthState;
pub use schedule::{ScheduleError, ScheduleRunner, ScheduledRun};
pub use service::{Launch, Service};
pub use shutdown::shutdown_token;
pub use supervisor::{Readiness, Supervisor};
pub use telemetry::TelemetryGuard;
