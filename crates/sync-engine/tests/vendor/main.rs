//! The sync engine driven by vendors that exist only in tests. The forge-shaped one
//! ([`scripted`]): its job rules (`engine`), the webhook front half and its monitor-following
//! consumer (`webhooks`), and the whole service wiring of `SyncJobs` on a `runtime::Service` over
//! real JetStream (`service`). The channel-shaped one ([`channel`]), declared like a new vendor
//! and registered with nothing shared edited, through its whole life (`channel_life`). All
//! against real Postgres and NATS.

mod channel;
mod scripted;

mod channel_life;
mod engine;
mod follow;
mod primitives;
mod service;
mod webhooks;
