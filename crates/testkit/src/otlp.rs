//! An OTLP/HTTP trace receiver in the process: tests point the services' exporter at it and read
//! back the spans; `forgesync-local up --otlp` runs it for the local stack, writing every span as
//! a JSON line and serving the traces it holds as text at `/traces`.
//!
//! It takes what the services' exporter sends (protobuf, `opentelemetry-otlp`'s `http-proto`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message as _;
use tokio_util::sync::CancellationToken;

/// One received span, flattened for assertions.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The exporting process's `service.name`.
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    /// `server`, `client`, `producer`, `consumer` or `internal`.
    pub kind: &'static str,
    pub error: bool,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    /// Attribute values as text.
    pub attributes: BTreeMap<String, String>,
    /// `(trace_id, span_id)` of each linked span.
    pub links: Vec<(String, String)>,
}

impl ReceivedSpan {
    /// An attribute's value as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "service": self.service,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "name": self.name,
            "kind": self.kind,
            "error": self.error,
            "start_unix_nano": self.start_unix_nano,
            "end_unix_nano": self.end_unix_nano,
            "attributes": self.attributes,
            "links": self.links.iter().map(|(t, s)| serde_json::json!({"trace_id": t, "span_id": s})).collect::<Vec<_>>(),
        })
    }
}

#[derive(Clone)]
struct Shared {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    out: Option<Arc<Mutex<std::fs::File>>>,
}

/// A running receiver; stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    shared: Shared,
    stop: CancellationToken,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl OtlpReceiver {
    /// Listens on `addr` (port 0 for any); with `out`, appends every span to it as a JSON line.
    pub async fn start(addr: SocketAddr, out: Option<&Path>) -> Result<OtlpReceiver> {
        let out = match out {
            Some(path) => Some(Arc::new(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening {}", path.display()))?,
            ))),
            None => None,
        };
        let shared = Shared {
            spans: Arc::default(),
            out,
        };
        let app = Router::new()
            .route("/v1/traces", post(export))
            .route("/traces", get(list))
            .route("/traces/{trace_id}", get(show))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("OTLP receiver: cannot bind {addr}"))?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await;
        });
        Ok(OtlpReceiver { addr, shared, stop })
    }

    /// The OTLP/HTTP base URL to give an exporter (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.shared
            .spans
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Waits up to `timeout` until `done` holds for the spans received, then returns them; the
    /// error lists what did arrive.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Result<Vec<ReceivedSpan>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return Ok(spans);
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "the expected spans did not arrive within {timeout:?}; received:\n{}",
                    render_all(&spans)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Where `forgesync-local up --otlp` writes spans: beside its other state.
pub fn default_out(state_dir: &Path) -> PathBuf {
    state_dir.join("traces.jsonl")
}

async fn export(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let protobuf = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-protobuf"));
    if !protobuf {
        return StatusCode::UNSUPPORTED_MEDIA_TYPE;
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let received = flatten(request);
    if let Some(out) = &shared.out
        && let Ok(mut file) = out.lock()
    {
        for span in &received {
            let _ = writeln!(file, "{}", span.json());
        }
    }
    if let Ok(mut spans) = shared.spans.lock() {
        spans.extend(received);
    }
    StatusCode::OK
}

fn flatten(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(r.attributes))
            .unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                out.push(ReceivedSpan {
                    service: service.clone(),
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    name: span.name,
                    kind: match span.kind {
                        2 => "server",
                        3 => "client",
                        4 => "producer",
                        5 => "consumer",
                        _ => "internal",
                    },
                    // STATUS_CODE_ERROR
                    error: span.status.is_some_and(|s| s.code == 2),
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                    attributes: attributes(span.attributes),
                    links: span
                        .links
                        .into_iter()
                        .map(|l| (hex::encode(l.trace_id), hex::encode(l.span_id)))
                        .collect(),
                });
            }
        }
    }
    out
}

fn attributes(kvs: Vec<KeyValue>) -> BTreeMap<String, String> {
    kvs.into_iter()
        .map(|kv| (kv.key, kv.value.map(text).unwrap_or_default()))
        .collect()
}

fn text(value: AnyValue) -> String {
    match value.value {
        Some(any_value::Value::StringValue(s)) => s,
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// `GET /traces`: one line per trace, newest first: id, root span, span count, duration, errors.
async fn list(State(shared): State<Shared>) -> String {
    let spans = shared.spans.lock().map(|s| s.clone()).unwrap_or_default();
    let mut traces: BTreeMap<&str, Vec<&ReceivedSpan>> = BTreeMap::new();
    for span in &spans {
        traces.entry(&span.trace_id).or_default().push(span);
    }
    let mut rows: Vec<(u64, String)> = traces
        .into_iter()
        .map(|(id, spans)| {
            let start = spans.iter().map(|s| s.start_unix_nano).min().unwrap_or(0);
            let end = spans.iter().map(|s| s.end_unix_nano).max().unwrap_or(0);
            let ids: BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
            let root = spans
                .iter()
                .find(|s| s.parent_span_id.is_empty() || !ids.contains(s.parent_span_id.as_str()))
                .map(|s| s.name.as_str())
                .unwrap_or_default();
            let errors = spans.iter().filter(|s| s.error).count();
            (
                start,
                format!(
                    "{id}  {root:<40} {:>4} spans {:>9.1} ms{}",
                    spans.len(),
                    end.saturating_sub(start) as f64 / 1e6,
                    if errors > 0 {
                        format!("  {errors} errors")
                    } else {
                        String::new()
                    }
                ),
            )
        })
        .collect();
    rows.sort_by_key(|row| std::cmp::Reverse(row.0));
    let mut text =
        String::from("trace id                          root span (GET /traces/<id> shows one)\n");
    for (_, row) in rows {
        text.push_str(&row);
        text.push('\n');
    }
    text
}

/// `GET /traces/<id>`: the trace as an indented tree.
async fn show(State(shared): State<Shared>, UrlPath(trace_id): UrlPath<String>) -> String {
    let spans: Vec<ReceivedSpan> = shared
        .spans
        .lock()
        .map(|s| {
            s.iter()
                .filter(|s| s.trace_id == trace_id)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if spans.is_empty() {
        return format!("no spans of trace {trace_id} received\n");
    }
    render_all(&spans)
}

/// Spans as indented trees per trace, children under their parent, in start order.
pub fn render_all(spans: &[ReceivedSpan]) -> String {
    let ids: BTreeSet<(&str, &str)> = spans
        .iter()
        .map(|s| (s.trace_id.as_str(), s.span_id.as_str()))
        .collect();
    let mut sorted: Vec<&ReceivedSpan> = spans.iter().collect();
    sorted.sort_by_key(|s| s.start_unix_nano);
    let mut out = String::new();
    fn walk(out: &mut String, all: &[&ReceivedSpan], span: &ReceivedSpan, depth: usize) {
        let attrs: Vec<String> = span
            .attributes
            .iter()
            .filter(|(k, _)| !k.starts_with("code.") && !k.starts_with("thread."))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let links: Vec<String> = span
            .links
            .iter()
            .map(|(t, s)| format!("link {t}/{s}"))
            .collect();
        out.push_str(&format!(
            "{}{} [{}{}] {:.1} ms {} {}\n",
            "  ".repeat(depth),
            span.name,
            span.kind,
            if span.error { ", error" } else { "" },
            span.end_unix_nano.saturating_sub(span.start_unix_nano) as f64 / 1e6,
            attrs.join(" "),
            links.join(" "),
        ));
        for child in all
            .iter()
            .filter(|c| c.trace_id == span.trace_id && c.parent_span_id == span.span_id)
        {
            walk(out, all, child, depth + 1);
        }
    }
    for root in sorted.iter().filter(|s| {
        s.parent_span_id.is_empty()
            || !ids.contains(&(s.trace_id.as_str(), s.parent_span_id.as_str()))
    }) {
        out.push_str(&format!("trace {}\n", root.trace_id));
        walk(&mut out, &sorted, root, 1);
    }
    out
}
