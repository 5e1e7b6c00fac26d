//! Message header names shared by everything that writes or reads forgesync's messages (the
//! outbox writers here, `bus` consumers, ingress). One place, so a producer and its consumer
//! cannot drift apart.

/// The workspace a message concerns.
pub const WORKSPACE: &str = "Forgesync-Workspace";
/// The connection a message concerns.
pub const CONNECTION: &str = "Forgesync-Connection";
/// The inbound message (webhook delivery) a message carries.
pub const DELIVERY: &str = "Forgesync-Delivery";
/// The vendor's event name of a webhook delivery.
pub const EVENT: &str = "Forgesync-Event";
/// Set instead of an inline body: the inbound message whose stored body to read.
pub const BODY_REF: &str = "Forgesync-Body-Ref";
/// The message this one replays (a dead message or an inbound message).
pub const REPLAY_OF: &str = "Forgesync-Replay-Of";
