//! RED metrics of a service's HTTP routes, recorded by a layer [`crate::Service`] puts around
//! the routes it serves (not the health routes, which probes and scrapes would drown):
//!
//! - `http_requests_total{service, method, route, status}`: requests answered;
//! - `http_request_duration_seconds{service, method, route}`: time to the response's head.
//!
//! `route` is the matched route template (`/webhooks/outline/{token}`), never the request's
//! path, and `unmatched` when no route matched; `method` is one of the standard methods or
//! `other`. Every label is bounded by the code, none by what a client sends.

use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::Response;

/// What `route` says for a request no route matched (the fallback).
pub const UNMATCHED: &str = "unmatched";

/// `routes`, with every request counted and timed under `service`.
pub fn layer(routes: Router, service: &'static str) -> Router {
    routes.layer(middleware::from_fn(move |req: Request, next: Next| {
        record(service, req, next)
    }))
}

async fn record(service: &'static str, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |p| p.as_str().to_owned());
    let method = method_label(req.method());
    let started = Instant::now();
    let res = next.run(req).await;
    let status = res.status().as_u16().to_string();
    metrics::counter!("http_requests_total", "service" => service, "method" => method, "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("http_request_duration_seconds", "service" => service, "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    res
}

/// The method as a label: a client may send any token as a method; only the standard ones
/// become values.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt as _;

    use super::*;

    async fn call(app: &Router, method: &str, path: &str) {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        app.clone().oneshot(req).await.unwrap();
    }

    #[tokio::test]
    async fn labels_are_route_templates_never_paths() {
        let handle = crate::telemetry::metrics_handle();
        let app = layer(
            Router::new().route("/things/{thing_id}", get(|| async { "ok" })),
            "http-metrics-test",
        );
        call(&app, "GET", "/things/secret-42").await;
        call(&app, "GET", "/things/secret-43").await;
        call(&app, "GET", "/nowhere/secret-44").await;
        call(&app, "BREW", "/things/secret-45").await;
        let text = handle.render();
        let ours: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("service=\"http-metrics-test\""))
            .collect();
        assert!(
            ours.iter().any(|l| l.starts_with("http_requests_total{")
                && l.contains("route=\"/things/{thing_id}\"")
                && l.contains("method=\"GET\"")
                && l.contains("status=\"200\"")
                && l.ends_with(" 2")),
            "{text}"
        );
        assert!(
            ours.iter().any(|l| l.starts_with("http_requests_total{")
                && l.contains("route=\"unmatched\"")
                && l.contains("status=\"404\"")),
            "{text}"
        );
        assert!(
            ours.iter()
                .any(|l| l.starts_with("http_requests_total{") && l.contains("method=\"other\"")),
            "{text}"
        );
        // Timed as a histogram (buckets aggregate across replicas; quantiles would not).
        assert!(
            ours.iter()
                .any(|l| l.starts_with("http_request_duration_seconds_bucket{")),
            "{text}"
        );
        assert!(
            !text.contains("secret-4"),
            "a path leaked into a label: {text}"
        );
    }
}
