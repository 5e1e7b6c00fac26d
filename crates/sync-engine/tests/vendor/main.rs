//! The sync engine driven by a second vendor that exists only in tests ([`scripted`]): its job
//! rules (`engine`), the webhook front half and its monitor-following consumer (`webhooks`), and
//! the whole service wiring of `SyncJobs` on a `runtime::Service` over real JetStream
//! (`service`), all against real Postgres and NATS.

mod scripted;

mod engine;
mod primitives;
mod service;
mod webhooks;
