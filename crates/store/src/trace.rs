//! Trace context on messages and rows: the W3C `traceparent`/`tracestate` of the span that wrote
//! a dispatch record, a job or a message travels with it, so whoever handles it later (another
//! process, after a restart) continues the same trace.
//!
//! Values are never copied from a request or payload into a header: what arrives is parsed by the
//! W3C propagator (which refuses anything but its exact format) and what leaves is written by it
//! from our own span, then vetted like every other header ([`crate::headers::check_value`]).

use std::collections::BTreeMap;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::headers;

/// The W3C header naming the trace and the parent span.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C header with vendor-specific trace state.
pub const TRACESTATE: &str = "tracestate";
/// The `traceparent` of the trace a replayed message first travelled in: its handling is linked
/// to that trace (it is parented on the replay's own).
pub const TRACE_LINK: &str = "Forgesync-Trace-Link";

/// The trace context of `span` as headers (`traceparent`, and `tracestate` when not empty);
/// empty when the span is not traced.
pub fn headers_of(span: &tracing::Span) -> BTreeMap<String, String> {
    vetted(&span.context())
}

/// `cx` as W3C headers, each value vetted.
fn vetted(cx: &opentelemetry::Context) -> BTreeMap<String, String> {
    let mut out = Carrier(BTreeMap::new());
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(cx, &mut out);
    }
    // What the propagator wrote is ours, but it is vetted like any header: a value NATS cannot
    // carry is dropped, never published.
    out.0
        .retain(|name, value| !value.is_empty() && headers::check_value(name, value).is_ok());
    out.0
}

/// The trace context of the current span; see [`headers_of`].
pub fn current() -> BTreeMap<String, String> {
    headers_of(&tracing::Span::current())
}

/// Adds the current trace context to `headers` unless they already carry one (a message written
/// for a delivery keeps the delivery's trace).
pub fn stamp(headers: &mut BTreeMap<String, String>) {
    if headers.keys().any(|k| k.eq_ignore_ascii_case(TRACEPARENT)) {
        return;
    }
    headers.extend(current());
}

/// The remote span context `get` carries (`traceparent`, `tracestate`), if it is a valid one.
pub fn remote_context<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Option<SpanContext> {
    let cx = TraceContextPropagator::new().extract(&Lookup(&get));
    let span = cx.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// The span context a `traceparent` value names, if valid.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    remote_context(|name| (name == TRACEPARENT).then_some(value))
}

/// Continues on `span` the trace `get` carries: the span becomes a child of the remote span, and
/// is linked to the trace a replay first travelled in ([`TRACE_LINK`]). Call before the span is
/// entered. Without a valid context the span starts its own trace.
pub fn continue_from<'a>(span: &tracing::Span, get: impl Fn(&str) -> Option<&'a str>) {
    if let Some(parent) = remote_context(&get) {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }
    if let Some(linked) = get(TRACE_LINK).and_then(parse_traceparent) {
        span.add_link(linked);
    }
}

/// [`continue_from`] over a header map (as stored on an outbox row or a job).
pub fn continue_from_map(span: &tracing::Span, headers: &BTreeMap<String, String>) {
    continue_from(span, |name| headers.get(name).map(String::as_str));
}

struct Carrier(BTreeMap<String, String>);

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

struct Lookup<'g, G>(&'g G);

impl<'a: 'g, 'g, G: Fn(&str) -> Option<&'a str>> Extractor for Lookup<'g, G> {
    fn get(&self, key: &str) -> Option<&str> {
        (self.0)(key)
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_traceparent_is_no_context() {
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nX: y",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?} parsed");
        }
        let good = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            .expect("valid traceparent");
        assert_eq!(
            good.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
    }

    #[test]
    fn a_tracestate_with_a_line_break_never_reaches_a_header() {
        let get = |name: &str| match name {
            TRACEPARENT => Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            TRACESTATE => Some("a=b\r\nInjected: yes"),
            _ => None,
        };
        let sc = remote_context(get).expect("the traceparent alone is valid");
        let out = vetted(&opentelemetry::Context::new().with_remote_span_context(sc));
        assert!(out.contains_key(TRACEPARENT), "{out:?}");
        assert!(
            out.values()
                .all(|v| headers::control_character(v).is_none()),
            "{out:?}"
        );
    }

    #[test]
    fn stamp_keeps_a_context_already_carried() {
        let mut h = BTreeMap::from([(TRACEPARENT.to_owned(), "kept".to_owned())]);
        stamp(&mut h);
        assert_eq!(h[TRACEPARENT], "kept");
    }
}
