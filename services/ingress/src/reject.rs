//! Why a delivery was refused: one status per reason, counted in
//! `ingress_rejections_total{vendor,reason}` and logged without the body.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// A refused delivery. Nothing was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub status: StatusCode,
    /// Seconds the sender should wait before trying again (`Retry-After`), when it should.
    pub retry_after: Option<u64>,
    /// Stable metric label and error code, e.g. `bad_signature`.
    pub reason: &'static str,
    pub message: String,
    /// The metric label and log reason when it says more than the answer may (an unknown hook
    /// id is counted as such, but answered like a bad signature).
    cause: Option<&'static str>,
}

impl Rejection {
    fn new(status: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Rejection {
            status,
            retry_after: None,
            reason,
            message: message.into(),
            cause: None,
        }
    }

    /// Why it was refused, as counted and logged.
    pub fn cause(&self) -> &'static str {
        self.cause.unwrap_or(self.reason)
    }

    /// 401, answered exactly like [`Rejection::bad_signature`]: no endpoint has this hook id or
    /// token on a route every tenant shares, whose refusals must all look alike so that hook ids
    /// cannot be enumerated. Counted as `unknown_endpoint`.
    pub fn unknown_hook() -> Self {
        Rejection {
            cause: Some("unknown_endpoint"),
            ..Self::bad_signature()
        }
    }

    /// 503: the bodies being read together already hold the whole buffer budget; the vendor
    /// retries later.
    pub fn busy() -> Self {
        Rejection {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "ingress is reading as many bodies as it may hold at once; retry later",
            )
        }
    }

    /// 429: the workspace sent more deliveries it signed itself than its quota allows; one fits
    /// again after `wait`.
    pub fn over_quota(wait: std::time::Duration) -> Self {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        Rejection {
            retry_after: Some(secs),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "over_quota",
                format!(
                    "this workspace sent more deliveries a second than its quota allows; retry in {secs} s"
                ),
            )
        }
    }

    /// 429: the workspace stored as many bytes today (UTC) as its quota allows, of what it signs
    /// itself; room comes back at midnight UTC.
    pub fn over_daily_quota(limit: u64) -> Self {
        let now = time::OffsetDateTime::now_utc();
        let left = 86_400
            - i64::from(now.hour()) * 3600
            - i64::from(now.minute()) * 60
            - i64::from(now.second());
        Rejection {
            retry_after: Some(u64::try_from(left.max(1)).unwrap_or(1)),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "over_daily_quota",
                format!(
                    "this workspace stored its {limit} bytes of deliveries for today (UTC); retry after midnight UTC"
                ),
            )
        }
    }

    /// 401: the signature (or token) is absent.
    pub fn missing_signature(header: &str) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "missing_signature",
            format!("the {header} header is required"),
        )
    }

    /// 401: the signature (or token) does not verify with the endpoint's secret.
    pub fn bad_signature() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "bad_signature",
            "the delivery's signature does not verify with this endpoint's secret",
        )
    }

    /// 401: outside the vendor's replay tolerance.
    pub fn stale_timestamp(limit_secs: u64) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "stale_timestamp",
            format!("the request timestamp is more than {limit_secs} s from now"),
        )
    }

    /// 401: a header contradicts what the credential binds.
    pub fn origin_mismatch() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "origin_mismatch",
            "X-Gitlab-Instance differs from the origin the route credential was issued for",
        )
    }

    /// 404
    pub fn unknown_endpoint() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown_endpoint",
            "no webhook endpoint is registered for this delivery",
        )
    }

    /// 410
    pub fn disabled() -> Self {
        Self::new(
            StatusCode::GONE,
            "disabled",
            "this webhook endpoint is disabled (its connection was disconnected); remove the hook",
        )
    }

    /// 400
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed", message)
    }

    /// 400: a vendor-supplied name or id that cannot travel as a message header (a control
    /// character, or too long).
    pub fn bad_header_value(error: &store::headers::HeaderError) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "bad_header_value",
            format!(
                "{error}; event names and delivery ids must be printable text of at most {} bytes",
                crate::accept::MAX_VENDOR_VALUE_BYTES
            ),
        )
    }

    /// 400: a name in the delivery makes a subject token or the subject too long to publish.
    pub fn subject_too_long(message: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "subject_too_long",
            format!("the delivery cannot be routed: {message}"),
        )
    }

    /// 408: the request or its body took longer than allowed.
    pub fn timed_out(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "timed_out",
            format!("the request was not received within {} s", limit.as_secs()),
        )
    }

    /// 413
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body is larger than {limit} bytes"),
        )
    }

    /// 503: the delivery could not be made durable; the vendor should retry.
    pub fn unavailable(error: &dyn std::fmt::Display) -> Self {
        tracing::error!(%error, "cannot store a delivery");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "database_unavailable",
            "the delivery could not be stored; retry later",
        )
    }

    /// 503: the endpoint stopped accepting deliveries verified this way while this one was being
    /// stored (disabled, disconnected, the secret rotated out); nothing was stored, and a retry
    /// is answered by the endpoint's new state.
    pub fn endpoint_changed() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "endpoint_changed",
            "the webhook endpoint changed while the delivery was being stored; retry",
        )
    }

    /// A refusal a cached endpoint may have caused: the route runs again on a fresh read.
    pub fn worth_a_fresh_read(&self) -> bool {
        matches!(
            self.reason,
            "bad_signature" | "disabled" | "endpoint_changed"
        )
    }

    /// Counts and logs the rejection, then answers it.
    pub fn respond(self, vendor: &'static str) -> Response {
        let cause = self.cause();
        metrics::counter!("ingress_rejections_total", "vendor" => vendor, "reason" => cause)
            .increment(1);
        tracing::warn!(
            vendor,
            reason = cause,
            status = self.status.as_u16(),
            "delivery refused"
        );
        let body = serde_json::json!({ "error": self.reason, "message": self.message });
        if let Some(secs) = self.retry_after {
            let retry = [(axum::http::header::RETRY_AFTER, secs.to_string())];
            return (self.status, retry, Json(body)).into_response();
        }
        (self.status, Json(body)).into_response()
    }
}

impl From<lifecycle_core::subject::SubjectError> for Rejection {
    fn from(e: lifecycle_core::subject::SubjectError) -> Self {
        Rejection::subject_too_long(e)
    }
}

impl From<sea_orm::DbErr> for Rejection {
    fn from(e: sea_orm::DbErr) -> Self {
        Rejection::unavailable(&e)
    }
}
