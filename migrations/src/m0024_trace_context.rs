//! The W3C trace context (`traceparent`, `tracestate`) of the request or schedule that queued a
//! job, and of the request that delivered an inbound message, so work done later (by another
//! replica, after a restart, on replay) continues or links to that trace.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = "\
ALTER TABLE sync_job ADD COLUMN IF NOT EXISTS trace_context jsonb;
ALTER TABLE inbound_message ADD COLUMN IF NOT EXISTS trace_context jsonb;";
