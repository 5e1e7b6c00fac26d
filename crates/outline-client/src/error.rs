//! How an Outline call failed, and what class of vendor failure that is.
//!
//! Bodies never reach an error's text whole: Outline's error answers are reduced to their
//! `error` code and (shortened) `message`, and decoding errors have quoted values masked, since
//! serde quotes the value it could not read, which may be a document's text.

use std::time::Duration;

use lifecycle_core::vendor_error::VendorErrorClass;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use vendor_http::{mask_quoted, retry_after};

use crate::generated::types;

/// The most of Outline's `message` an error keeps.
const MESSAGE_CHARS: usize = 200;

/// A failed Outline API call; `method` is Outline's name for it (see [`crate::methods`]).
#[derive(Debug, thiserror::Error)]
pub enum OutlineError {
    /// The token was refused (HTTP 401): invalid, expired or revoked.
    #[error("Outline {method}: the API token was refused: {message}")]
    BadCredentials {
        method: &'static str,
        message: String,
    },
    /// The token is valid but may not do this (HTTP 403), e.g. a non-admin listing webhook
    /// subscriptions.
    #[error("Outline {method}: forbidden: {message}")]
    Forbidden {
        method: &'static str,
        message: String,
    },
    /// The object does not exist or is not visible to this token (HTTP 404).
    #[error("Outline {method}: not found")]
    NotFound { method: &'static str },
    /// Outline throttled the call (HTTP 429) after our retries.
    #[error("Outline {method}: rate limited (retry after {retry_after:?})")]
    RateLimited {
        method: &'static str,
        retry_after: Option<Duration>,
    },
    /// Outline failed (HTTP 5xx) after our retries.
    #[error("Outline {method}: server error HTTP {status}")]
    Server {
        method: &'static str,
        status: u16,
        retry_after: Option<Duration>,
    },
    /// Another status we do not act on (400 validation, 409, a redirect, which is never
    /// followed since it would carry the token elsewhere).
    #[error("Outline {method}: HTTP {status} {error}: {message}")]
    Status {
        method: &'static str,
        status: u16,
        /// Outline's `error` code (`validation_error`), or empty.
        error: String,
        /// Outline's `message`, shortened, or empty.
        message: String,
    },
    /// An attempt got no answer within the request timeout.
    #[error("Outline {method}: no answer in time")]
    Timeout { method: &'static str },
    /// The call, its retries and waits included, passed its deadline.
    #[error("Outline {method}: no result within the call's deadline of {deadline:?}")]
    DeadlinePassed {
        method: &'static str,
        deadline: Duration,
    },
    /// Outline could not be reached (connect, TLS, a broken body).
    #[error("Outline {method}: unreachable: {detail}")]
    Unreachable {
        method: &'static str,
        detail: String,
    },
    /// The call would connect where the egress policy forbids (an internal address); nothing
    /// was sent.
    #[error("Outline {method}: unreachable: {detail}")]
    Refused {
        method: &'static str,
        detail: String,
    },
    /// A success answer that does not have the contract's shape (malformed JSON, no `data`).
    #[error("Outline {method}: invalid response: {detail}")]
    Decode {
        method: &'static str,
        detail: String,
    },
    /// The answer was larger than [`crate::Settings::max_response_bytes`]; nothing was used.
    #[error("Outline {method}: the answer is larger than {limit} bytes, the most the client reads")]
    TooLarge { method: &'static str, limit: usize },
    /// The request could not be built (a bad base URL or argument); nothing was sent.
    #[error("Outline {method}: invalid request: {detail}")]
    Request {
        method: &'static str,
        detail: String,
    },
    /// The caller's call budget is spent; nothing was sent.
    #[error("Outline {method}: the call budget is spent; not sent")]
    BudgetExhausted { method: &'static str },
}

impl OutlineError {
    /// The shared class of this failure.
    pub fn class(&self) -> VendorErrorClass {
        match self {
            OutlineError::BadCredentials { .. } => VendorErrorClass::BadCredentials,
            OutlineError::Forbidden { .. } => VendorErrorClass::Forbidden { permission: None },
            OutlineError::NotFound { .. } => VendorErrorClass::NotFound,
            OutlineError::RateLimited { .. } => VendorErrorClass::RateLimited,
            OutlineError::Server { .. } => VendorErrorClass::ServerError,
            OutlineError::Timeout { .. } | OutlineError::DeadlinePassed { .. } => {
                VendorErrorClass::Timeout
            }
            OutlineError::Unreachable { .. } | OutlineError::Refused { .. } => {
                VendorErrorClass::Unreachable
            }
            OutlineError::Status { .. }
            | OutlineError::TooLarge { .. }
            | OutlineError::Decode { .. }
            | OutlineError::Request { .. } => VendorErrorClass::InvalidResponse,
            OutlineError::BudgetExhausted { .. } => VendorErrorClass::BudgetExhausted,
        }
    }

    /// Outline says the object is not there (or not visible to the token).
    pub fn is_not_found(&self) -> bool {
        matches!(self, OutlineError::NotFound { .. })
    }

    /// The call's method.
    pub fn method(&self) -> &'static str {
        match self {
            OutlineError::BadCredentials { method, .. }
            | OutlineError::Forbidden { method, .. }
            | OutlineError::NotFound { method }
            | OutlineError::RateLimited { method, .. }
            | OutlineError::Server { method, .. }
            | OutlineError::Status { method, .. }
            | OutlineError::Timeout { method }
            | OutlineError::DeadlinePassed { method, .. }
            | OutlineError::Unreachable { method, .. }
            | OutlineError::Refused { method, .. }
            | OutlineError::Decode { method, .. }
            | OutlineError::TooLarge { method, .. }
            | OutlineError::Request { method, .. }
            | OutlineError::BudgetExhausted { method } => method,
        }
    }

    /// Sorts progenitor's error for one attempt of `method`.
    pub(crate) fn from_attempt(
        method: &'static str,
        err: progenitor_client::Error<types::Error>,
    ) -> Self {
        use progenitor_client::Error as E;
        match err {
            E::CommunicationError(e) | E::ResponseBodyError(e) | E::InvalidUpgrade(e) => {
                OutlineError::from_transport(method, &e)
            }
            E::ErrorResponse(answer) => {
                let status = answer.status();
                let headers = answer.headers().clone();
                OutlineError::from_status(method, status, &headers, Some(answer.into_inner()))
            }
            E::UnexpectedResponse(response) => {
                OutlineError::from_status(method, response.status(), response.headers(), None)
            }
            E::InvalidResponsePayload(_, e) => OutlineError::Decode {
                method,
                detail: mask_quoted(&e.to_string()),
            },
            E::InvalidRequest(detail) | E::Custom(detail) => {
                OutlineError::Request { method, detail }
            }
        }
    }

    /// A request that got no answer: refused by the egress policy, timed out, or broken off.
    pub(crate) fn from_transport(method: &'static str, e: &reqwest::Error) -> Self {
        if let Some(too_large) = crate::hooks::too_large_in(e) {
            return OutlineError::TooLarge {
                method,
                limit: too_large.limit,
            };
        }
        if let Some(refused) = vendor_http::egress::refused_in(e) {
            return OutlineError::Refused {
                method,
                detail: refused.to_string(),
            };
        }
        if e.is_timeout() {
            return OutlineError::Timeout { method };
        }
        // reqwest's text names the URL; the error chain names the cause.
        let mut detail = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            detail = format!("{detail}: {cause}");
            source = cause.source();
        }
        OutlineError::Unreachable { method, detail }
    }

    /// The error an answer's status means; `body` is Outline's error object, when it sent one.
    pub(crate) fn from_status(
        method: &'static str,
        status: StatusCode,
        headers: &HeaderMap,
        body: Option<types::Error>,
    ) -> Self {
        let (error, message) = body
            .map(|b| {
                (
                    b.error.unwrap_or_default(),
                    b.message
                        .unwrap_or_default()
                        .chars()
                        .take(MESSAGE_CHARS)
                        .collect(),
                )
            })
            .unwrap_or_default();
        match status.as_u16() {
            401 => OutlineError::BadCredentials { method, message },
            403 => OutlineError::Forbidden { method, message },
            404 => OutlineError::NotFound { method },
            429 => OutlineError::RateLimited {
                method,
                retry_after: retry_after(headers),
            },
            500..=599 => OutlineError::Server {
                method,
                status: status.as_u16(),
                retry_after: retry_after(headers),
            },
            200..=299 => OutlineError::Decode {
                method,
                detail: format!("unexpected success status {status}"),
            },
            300..=399 => OutlineError::Status {
                method,
                status: status.as_u16(),
                error: "redirect".to_owned(),
                message: "not followed, since it would carry the token elsewhere: check the \
                          server URL"
                    .to_owned(),
            },
            other => OutlineError::Status {
                method,
                status: other,
                error,
                message,
            },
        }
    }
}

impl vendor_http::RetryableError for OutlineError {
    const VENDOR: &'static str = "Outline";

    /// Retried: throttling (429), 5xx, timeouts and transport failures.
    fn is_retryable(&self) -> bool {
        matches!(
            self,
            OutlineError::RateLimited { .. }
                | OutlineError::Server { .. }
                | OutlineError::Timeout { .. }
                | OutlineError::Unreachable { .. }
        )
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            OutlineError::RateLimited { retry_after, .. }
            | OutlineError::Server { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    fn deadline_passed(method: &'static str, deadline: Duration) -> Self {
        OutlineError::DeadlinePassed { method, deadline }
    }
}

#[cfg(test)]
mod tests {
    use vendor_http::RetryableError as _;

    use super::*;

    fn status(code: u16, headers: &[(&'static str, &'static str)]) -> OutlineError {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, value.parse().unwrap());
        }
        OutlineError::from_status(
            "documents.info",
            StatusCode::from_u16(code).unwrap(),
            &map,
            Some(types::Error {
                data: Default::default(),
                error: Some("some_error".into()),
                message: Some("m".repeat(500)),
                ok: Some(false),
                status: Some(f64::from(code)),
            }),
        )
    }

    #[test]
    fn each_status_is_its_class() {
        let cases = [
            (401, VendorErrorClass::BadCredentials),
            (403, VendorErrorClass::Forbidden { permission: None }),
            (404, VendorErrorClass::NotFound),
            (429, VendorErrorClass::RateLimited),
            (500, VendorErrorClass::ServerError),
            (503, VendorErrorClass::ServerError),
            (400, VendorErrorClass::InvalidResponse),
            (302, VendorErrorClass::InvalidResponse),
        ];
        for (code, class) in cases {
            let err = status(code, &[]);
            assert_eq!(err.class(), class, "{code}");
            assert_eq!(err.method(), "documents.info");
        }
        assert!(status(404, &[]).is_not_found());
        assert!(status(401, &[]).class().refuses_credentials());
    }

    #[test]
    fn only_throttling_server_failures_and_transport_are_retried() {
        for code in [429, 500, 502, 503] {
            assert!(status(code, &[]).is_retryable(), "{code}");
        }
        for code in [400, 401, 403, 404, 409] {
            assert!(!status(code, &[]).is_retryable(), "{code}");
        }
        assert!(
            OutlineError::Timeout {
                method: "auth.info"
            }
            .is_retryable()
        );
        let budget = OutlineError::BudgetExhausted {
            method: "auth.info",
        };
        assert!(!budget.is_retryable());
        assert_eq!(budget.class(), VendorErrorClass::BudgetExhausted);
        let deadline = OutlineError::deadline_passed("auth.info", Duration::from_secs(60));
        assert!(!deadline.is_retryable());
        assert_eq!(deadline.class(), VendorErrorClass::Timeout);
    }

    #[test]
    fn retry_after_is_read_in_whole_or_fractional_seconds() {
        let wait = |value| status(429, &[("retry-after", value)]).retry_after();
        assert_eq!(wait("3"), Some(Duration::from_secs(3)));
        assert_eq!(wait("1.2"), Some(Duration::from_secs(2)));
        assert_eq!(wait("Fri, 04 Dec 2026 23:00:00 GMT"), None);
        assert_eq!(wait("-1"), None);
        assert_eq!(
            status(503, &[("retry-after", "7")]).retry_after(),
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn outline_messages_are_shortened_and_decoding_errors_masked() {
        let OutlineError::Status { error, message, .. } = status(400, &[]) else {
            panic!("a 400 is a status error");
        };
        assert_eq!(error, "some_error");
        assert_eq!(message.chars().count(), MESSAGE_CHARS);
    }
}
