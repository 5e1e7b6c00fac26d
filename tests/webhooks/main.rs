//! Live GitHub webhooks end to end: signed deliveries through ingress, JetStream, github-sync's
//! consumers and the mirror, with the GitHub simulator and real Postgres and NATS.

// Each test module uses its own part of the stack.
mod admission;
mod claims;
mod repos;
mod reviews;
#[allow(dead_code)]
mod support;

mod checks;
mod consumers;
mod gitlab;
mod history;
mod metrics;
mod redeliver;
mod released;
mod signals;
mod traces;
