//! ingress end to end: the real service on port 0 against real Postgres and NATS.

mod cache;
mod dedup;
mod durability;
mod front_door;
mod github;
mod gitlab;
mod key_rotation;
mod outage;
mod outline;
mod quota;
mod rotation;
mod slack;
mod support;
