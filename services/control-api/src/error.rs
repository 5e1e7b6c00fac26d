//! API errors: every failure is JSON that names the problem and what to do about it.

use axum::Json;
use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answered to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

/// The JSON body of every error.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// A stable machine-readable code, e.g. `illegal_transition`.
    pub error: String,
    /// What happened and what to do, for a person.
    pub message: String,
}

// The errors most operations share, as reusable OpenAPI responses (each route lists those it
// can give; the 404, 409 and 422 of a route are described where the route is).

/// A path, query string or body that does not parse, or a value out of range (`bad_path`,
/// `bad_request`, `malformed_json`).
#[derive(utoipa::ToResponse)]
pub struct BadRequest(pub ErrorBody);

/// The bearer token is missing or not valid (`unauthorized`).
#[derive(utoipa::ToResponse)]
pub struct Unauthorized(pub ErrorBody);

/// The token lacks the admin role, or the operation needs an operator token (`forbidden`).
#[derive(utoipa::ToResponse)]
pub struct Forbidden(pub ErrorBody);

/// The body is larger than the configured limit, `FORGESYNC_MAX_BODY_BYTES`
/// (`payload_too_large`).
#[derive(utoipa::ToResponse)]
pub struct PayloadTooLarge(pub ErrorBody);

/// The body is not sent as `Content-Type: application/json` (`unsupported_media_type`).
#[derive(utoipa::ToResponse)]
pub struct UnsupportedMediaType(pub ErrorBody);

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    pub fn internal(error: impl std::fmt::Display) -> Self {
        // The detail goes to the log, not to the caller.
        tracing::error!(%error, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the server failed to handle the request; it was logged, try again later",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.code.to_owned(),
            message: self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<sea_orm::DbErr> for ApiError {
    fn from(e: sea_orm::DbErr) -> Self {
        use sea_orm::DbErr;
        match e {
            DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "the database is unavailable; retry shortly",
            ),
            other if store::repair::is_contended(&other) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "contended",
                "a vendor resource of the connection changed during the request; retry",
            ),
            other => ApiError::internal(other),
        }
    }
}

fn payload_too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "the request body is larger than this API accepts",
    )
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let message = rejection.body_text();
        match status {
            StatusCode::PAYLOAD_TOO_LARGE => payload_too_large(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
                status,
                "unsupported_media_type",
                "send the body as JSON with `Content-Type: application/json`",
            ),
            _ => ApiError::new(
                StatusCode::BAD_REQUEST,
                "malformed_json",
                format!("the request body is not valid for this endpoint: {message}"),
            ),
        }
    }
}

impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => payload_too_large(),
            _ => ApiError::bad_request(format!(
                "the request body could not be read: {}",
                rejection.body_text()
            )),
        }
    }
}

/// The raw request body, whose rejections are [`ApiError`]s.
#[derive(Debug, axum::extract::FromRequest)]
#[from_request(rejection(ApiError))]
pub struct RawBody(pub axum::body::Bytes);

/// `Json<T>` whose rejections are [`ApiError`]s.
#[derive(Debug, axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct JsonBody<T>(pub T);

impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::PathRejection) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_path",
            format!("the URL path is not valid: {}", rejection.body_text()),
        )
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> Self {
        ApiError::bad_request(format!(
            "the query string is not valid: {}",
            rejection.body_text()
        ))
    }
}

/// `Path<T>` whose rejections are [`ApiError`]s.
#[derive(Debug, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct PathParams<T>(pub T);

/// `Query<T>` whose rejections are [`ApiError`]s.
#[derive(Debug, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct QueryParams<T>(pub T);
