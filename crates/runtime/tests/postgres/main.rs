//! Integration tests against real Postgres (DATABASE_URL) and NATS (NATS_URL, default
//! nats://127.0.0.1:4222). Each test gets its own freshly created database.

mod db;
mod endpoint_claims;
mod health;
mod schedule;
