//! Logs, traces and metrics for a service process.
//!
//! Logs go to stdout (JSON or pretty) filtered by `RUST_LOG` (default `info`); spans are
//! exported over OTLP/HTTP only when an endpoint is configured; metrics are recorded into one
//! process-wide Prometheus recorder rendered at `/metrics` (see [`crate::health`]).
//! Secrets and message bodies never belong in fields: log ids, not payloads.

use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context as _;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::LogFormat;

static METRICS: OnceLock<PrometheusHandle> = OnceLock::new();

/// How long dropping a [`TelemetryGuard`] waits for buffered spans to be exported.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Keeps the trace exporter alive; flushes and shuts it down when dropped (or by
/// [`TelemetryGuard::shutdown`], the better path inside async code).
#[must_use = "dropping the guard stops trace export"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Flushes buffered spans and stops the exporter, without blocking the async runtime.
    pub async fn shutdown(mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        let Some(provider) = self.provider.take() else {
            return;
        };
        // The batch processor's worker runs on the Tokio runtime and shutdown blocks until it
        // answers: shut down on another thread and wait a bounded time, never forever. On a
        // current-thread runtime the worker cannot run while we wait, so do not wait at all.
        let wait = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread) => Duration::ZERO,
            _ => FLUSH_TIMEOUT,
        };
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done_tx.send(provider.shutdown());
        });
        if !wait.is_zero() {
            let _ = done_rx.recv_timeout(wait);
        }
    }
}

/// Sets up logging, optional OTLP trace export and the metrics recorder for `service`.
///
/// Safe to call more than once per process (tests, the all-in-one stack): the first call's
/// subscriber stays installed and later calls return a guard that exports nothing. When
/// `otlp_endpoint` is set this must run inside a Tokio runtime; the endpoint is the OTLP/HTTP
/// base URL (`http://collector:4318`), to which `/v1/traces` is appended.
pub fn init(
    service: &str,
    format: LogFormat,
    otlp_endpoint: Option<&str>,
) -> anyhow::Result<TelemetryGuard> {
    init_with_writer(service, format, otlp_endpoint, std::io::stdout)
}

/// [`init`], with log lines written to `writer` (a test reading back what was logged).
///
/// Spans are always traced, exported or not, so trace context travels between services and log
/// lines carry `trace_id`/`span_id` even without an exporter. `RUST_LOG` filters the log lines
/// only; spans at `info` and above are traced whatever it says (a quiet log must not cut a
/// trace in two). Sampling follows `OTEL_TRACES_SAMPLER`/`OTEL_TRACES_SAMPLER_ARG` (the SDK
/// reads them); the default, `parentbased_always_on`, keeps every trace, so every error trace.
pub fn init_with_writer<W>(
    service: &str,
    format: LogFormat,
    otlp_endpoint: Option<&str>,
    writer: W,
) -> anyhow::Result<TelemetryGuard>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    crate::crypto::install_crypto_provider();
    metrics_handle();

    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm_migration=warn"));
    let fmt_layer = log_layer(format, writer).with_filter(filter);

    let exporting = otlp_endpoint.is_some_and(|e| !e.trim().is_empty());
    let provider = tracer_provider(service, otlp_endpoint.filter(|e| !e.trim().is_empty()))?;
    let otel_layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(service.to_owned()))
        .with_filter(tracing_subscriber::filter::LevelFilter::INFO);

    let installed = tracing_subscriber::registry()
        .with(fmt_layer)
        .with(otel_layer)
        .try_init()
        .is_ok();
    if !installed {
        // Another call already installed the process's subscriber; ours would see no spans.
        return Ok(TelemetryGuard { provider: None });
    }
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    tracing::debug!(service, otlp = exporting, "telemetry initialised");
    Ok(TelemetryGuard {
        provider: Some(provider),
    })
}

/// The log lines of a service in `format`, written to `writer`: stdout in a service, a buffer in
/// a test that reads back what the services logged.
pub fn log_layer<S, W>(format: LogFormat, writer: W) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    match format {
        LogFormat::Json => Box::new(
            tracing_subscriber::fmt::layer()
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .map_event_format(WithTraceIds)
                .with_writer(writer),
        ),
        LogFormat::Pretty => Box::new(tracing_subscriber::fmt::layer().with_writer(writer)),
    }
}

/// A JSON log line with the `trace_id` and `span_id` of the span it was logged in, so logs and
/// traces join. The ids are asked of the process's (global) subscriber, as [`init`] installs
/// it; under a scoped one (`tracing::subscriber::with_default`) lines carry none.
struct WithTraceIds<F>(F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        // Asked before the inner format locks any span's extensions.
        let ids = current_ids();
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match (ids, line.trim_end().strip_suffix('}')) {
            (Some((trace_id, span_id)), Some(head)) => {
                let comma = if head.trim_end().ends_with('{') {
                    ""
                } else {
                    ","
                };
                writeln!(
                    writer,
                    "{head}{comma}\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}"
                )
            }
            _ => writer.write_str(&line),
        }
    }
}

/// The trace id and span id of the current span as lower-case hex, when it is traced.
pub fn current_ids() -> Option<(String, String)> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid()
        .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

/// The process's tracer: exporting over OTLP/HTTP to `endpoint` when set, else tracing only (ids
/// for propagation and logs, nothing exported).
fn tracer_provider(service: &str, endpoint: Option<&str>) -> anyhow::Result<SdkTracerProvider> {
    let resource = Resource::builder()
        .with_service_name(service.to_owned())
        .build();
    let Some(endpoint) = endpoint else {
        return Ok(SdkTracerProvider::builder().with_resource(resource).build());
    };
    // The exporter's HTTP client panics without a process-wide rustls provider.
    crate::install_crypto_provider();
    let base = endpoint.trim_end_matches('/');
    let url = if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .context("building the OTLP HTTP client")?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .with_http_client(client)
        .build()
        .with_context(|| {
            format!("building the OTLP span exporter for OTEL_EXPORTER_OTLP_ENDPOINT={endpoint}")
        })?;
    let processor =
        BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build())
}

/// Bucket bounds, in seconds, of every histogram named `*_seconds`: from a fast HTTP answer
/// (5 ms) to a long sync job (an hour). Rendered as Prometheus histograms, not summaries, so
/// dashboards can aggregate them across replicas (`histogram_quantile` over `_bucket`).
pub const SECONDS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// Serves one request of `service` inside a server span that continues the trace the request's
/// `traceparent`/`tracestate` carry (parsed by the W3C propagator, never copied), or starts one.
pub async fn trace_request(
    service: &'static str,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use tracing::Instrument as _;
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let method = request.method().clone();
    let span = tracing::info_span!(
        "http request",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        forgesync.service = service,
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
    );
    let headers = request.headers();
    store::trace::continue_from(&span, |name| headers.get(name)?.to_str().ok());
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    if response.status().is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

/// The process's Prometheus handle, installing the global metrics recorder on first use.
pub fn metrics_handle() -> PrometheusHandle {
    METRICS
        .get_or_init(|| match prometheus_builder().install_recorder() {
            Ok(handle) => handle,
            Err(err) => {
                // Someone else owns the global recorder; render an empty registry rather
                // than fail the service.
                tracing::warn!(error = %err, "a metrics recorder was already installed");
                prometheus_builder().build_recorder().handle()
            }
        })
        .clone()
}

fn prometheus_builder() -> PrometheusBuilder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .expect("the bucket list is not empty")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_twice_is_harmless_and_metrics_render() {
        let _first = init("test-a", LogFormat::Pretty, None).unwrap();
        let _second = init("test-b", LogFormat::Json, None).unwrap();
        metrics::counter!("runtime_telemetry_test_total").increment(3);
        let text = metrics_handle().render();
        assert!(
            text.contains("runtime_telemetry_test_total 3"),
            "metrics text was: {text}"
        );
    }

    #[derive(Clone, Default)]
    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_log_lines_carry_the_trace_and_span_ids_of_their_span() {
        // The process's subscriber, as a service installs it (nextest runs each test in its own
        // process): from inside an event only the global dispatcher can be asked for the span.
        let sink = Sink::default();
        let lines = sink.clone();
        let _guard =
            init_with_writer("test-ids", LogFormat::Json, None, move || lines.clone()).unwrap();
        tracing::info!("outside");
        let ids = {
            let span = tracing::info_span!("work", job = 7);
            let _entered = span.enter();
            tracing::info!("inside");
            current_ids().expect("a traced span")
        };
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].get("trace_id").is_none(), "{text}");
        assert_eq!(lines[1]["message"], "inside");
        assert_eq!(lines[1]["span"]["job"], 7, "the span's fields stay: {text}");
        assert_eq!(lines[1]["trace_id"], ids.0.as_str(), "{text}");
        assert_eq!(lines[1]["span_id"], ids.1.as_str(), "{text}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn otlp_export_builds_and_shuts_down() {
        // Nothing listens there: building must still work and shutdown must not hang.
        use opentelemetry::trace::{Span as _, Tracer as _};
        let guard = tracer_provider("test-otlp", Some("http://127.0.0.1:9/")).unwrap();
        guard.tracer("t").start("span").end();
        let started = std::time::Instant::now();
        drop(TelemetryGuard {
            provider: Some(guard),
        });
        assert!(started.elapsed() < FLUSH_TIMEOUT + Duration::from_secs(1));
    }
}
