//! How a Slack call failed, and what class of vendor failure that is.
//!
//! Bodies never reach an error's text: Slack's `ok: false` answers are reduced to their code
//! (and `needed` scope), and decoding errors have quoted values masked.

use std::time::Duration;

use lifecycle_core::vendor_error::VendorErrorClass;
use slack_morphism::errors::SlackClientError;
use vendor_http::mask_quoted;

/// A failed Slack Web API call; `method` is Slack's name for it (see [`crate::methods`]).
#[derive(Debug, thiserror::Error)]
pub enum SlackError {
    /// Slack answered `ok: false`; `error` is its code (`invalid_auth`, `not_in_channel`, ...).
    #[error("Slack {method}: {error}{}", needed.as_ref().map(|n| format!(" (needs {n})")).unwrap_or_default())]
    Api {
        method: &'static str,
        error: String,
        /// The scope Slack says is missing, with `missing_scope`.
        needed: Option<String>,
    },
    /// Slack throttled the call (HTTP 429, or `ratelimited`) after our retries.
    #[error("Slack {method}: rate limited (retry after {retry_after:?})")]
    RateLimited {
        method: &'static str,
        retry_after: Option<Duration>,
    },
    /// Slack failed (HTTP 5xx) after our retries.
    #[error("Slack {method}: server error HTTP {status}")]
    Server { method: &'static str, status: u16 },
    /// An attempt got no answer within the request timeout.
    #[error("Slack {method}: no answer in time")]
    Timeout { method: &'static str },
    /// The call, its retries and waits included, passed its deadline.
    #[error("Slack {method}: no result within the call's deadline of {deadline:?}")]
    DeadlinePassed {
        method: &'static str,
        deadline: Duration,
    },
    /// Slack could not be reached (connect, TLS, a broken body), or the client could not be
    /// set up to reach it.
    #[error("Slack {method}: unreachable: {detail}")]
    Unreachable {
        method: &'static str,
        detail: String,
    },
    /// The answer did not have the shape of Slack's, or had a status we do not act on.
    #[error("Slack {method}: invalid response: {detail}")]
    InvalidResponse {
        method: &'static str,
        detail: String,
    },
}

/// Codes Slack answers for a token it refuses.
const REFUSED_TOKEN: &[&str] = &[
    "invalid_auth",
    "not_authed",
    "token_revoked",
    "token_expired",
    "account_inactive",
];

/// Codes for a channel the bot cannot reach any more, while the token still works.
const SCOPE_LOST: &[&str] = &["not_in_channel", "channel_not_found"];

/// Codes for Slack failing on its side with `ok: false` (no 5xx status).
const SLACK_FAILED: &[&str] = &[
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
];

impl SlackError {
    /// The shared class of this failure.
    pub fn class(&self) -> VendorErrorClass {
        match self {
            SlackError::Api { error, needed, .. } => match error.as_str() {
                code if REFUSED_TOKEN.contains(&code) => VendorErrorClass::BadCredentials,
                code if SCOPE_LOST.contains(&code) => VendorErrorClass::ScopeLost,
                "missing_scope" => VendorErrorClass::Forbidden {
                    permission: needed.clone(),
                },
                "ratelimited" => VendorErrorClass::RateLimited,
                code if SLACK_FAILED.contains(&code) => VendorErrorClass::ServerError,
                _ => VendorErrorClass::InvalidResponse,
            },
            SlackError::RateLimited { .. } => VendorErrorClass::RateLimited,
            SlackError::Server { .. } => VendorErrorClass::ServerError,
            SlackError::Timeout { .. } | SlackError::DeadlinePassed { .. } => {
                VendorErrorClass::Timeout
            }
            SlackError::Unreachable { .. } => VendorErrorClass::Unreachable,
            SlackError::InvalidResponse { .. } => VendorErrorClass::InvalidResponse,
        }
    }

    /// Slack's `error` code of an `ok: false` answer.
    pub fn code(&self) -> Option<&str> {
        match self {
            SlackError::Api { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The bot lost this channel (`not_in_channel`, `channel_not_found`); the token still works.
    pub fn is_scope_lost(&self) -> bool {
        self.code().is_some_and(|code| SCOPE_LOST.contains(&code))
    }

    /// The call's method.
    pub fn method(&self) -> &'static str {
        match self {
            SlackError::Api { method, .. }
            | SlackError::RateLimited { method, .. }
            | SlackError::Server { method, .. }
            | SlackError::Timeout { method }
            | SlackError::DeadlinePassed { method, .. }
            | SlackError::Unreachable { method, .. }
            | SlackError::InvalidResponse { method, .. } => method,
        }
    }

    /// Sorts slack-morphism's error for one attempt of `method`.
    pub(crate) fn from_attempt(method: &'static str, err: SlackClientError) -> Self {
        match err {
            // Slack's own spelling of a throttled call, sent with HTTP 200.
            SlackClientError::ApiError(api) if api.code == "ratelimited" => {
                SlackError::RateLimited {
                    method,
                    retry_after: None,
                }
            }
            SlackClientError::ApiError(api) => SlackError::Api {
                method,
                needed: api.http_response_body.as_deref().and_then(needed_scope),
                error: api.code,
            },
            SlackClientError::RateLimitError(limited) => SlackError::RateLimited {
                method,
                retry_after: limited.retry_after,
            },
            SlackClientError::HttpError(http) if http.status_code.is_server_error() => {
                SlackError::Server {
                    method,
                    status: http.status_code.as_u16(),
                }
            }
            SlackClientError::HttpError(http) => SlackError::InvalidResponse {
                method,
                detail: format!("HTTP {}", http.status_code),
            },
            SlackClientError::ProtocolError(protocol) => SlackError::InvalidResponse {
                method,
                detail: mask_quoted(&protocol.json_error.to_string()),
            },
            // A request that never got an answer: connect, TLS, a body that broke off.
            SlackClientError::HttpProtocolError(protocol) => SlackError::Unreachable {
                method,
                detail: protocol
                    .cause
                    .map_or_else(|| "HTTP protocol error".to_owned(), |c| c.to_string()),
            },
            SlackClientError::SystemError(system) => SlackError::Unreachable {
                method,
                detail: system
                    .cause
                    .map(|c| c.to_string())
                    .or(system.message)
                    .unwrap_or_else(|| "transport error".to_owned()),
            },
            other @ (SlackClientError::EndOfStream(_)
            | SlackClientError::SocketModeProtocolError(_)) => SlackError::InvalidResponse {
                method,
                detail: other.to_string(),
            },
        }
    }
}

impl vendor_http::RetryableError for SlackError {
    const VENDOR: &'static str = "Slack";

    /// Retried: throttling (429, `ratelimited`), 5xx, timeouts and transport failures.
    fn is_retryable(&self) -> bool {
        matches!(
            self,
            SlackError::RateLimited { .. }
                | SlackError::Server { .. }
                | SlackError::Timeout { .. }
                | SlackError::Unreachable { .. }
        )
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            SlackError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    fn deadline_passed(method: &'static str, deadline: Duration) -> Self {
        SlackError::DeadlinePassed { method, deadline }
    }
}

/// `needed` of an `ok: false` body (`missing_scope` names the scope there).
fn needed_scope(body: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Needed {
        needed: Option<String>,
    }
    serde_json::from_str::<Needed>(body).ok()?.needed
}

#[cfg(test)]
mod tests {
    use super::*;
    use vendor_http::RetryableError as _;

    fn api(code: &str, needed: Option<&str>) -> SlackError {
        SlackError::Api {
            method: "conversations.history",
            error: code.to_owned(),
            needed: needed.map(str::to_owned),
        }
    }

    #[test]
    fn refused_tokens_are_bad_credentials() {
        for code in [
            "invalid_auth",
            "token_revoked",
            "account_inactive",
            "not_authed",
        ] {
            let err = api(code, None);
            assert_eq!(err.class(), VendorErrorClass::BadCredentials, "{code}");
            assert!(err.class().refuses_credentials());
            assert!(!err.is_scope_lost());
            assert!(!err.is_retryable());
        }
    }

    #[test]
    fn a_lost_channel_is_scope_lost_never_a_refusal() {
        for code in ["not_in_channel", "channel_not_found"] {
            let err = api(code, None);
            assert_eq!(err.class(), VendorErrorClass::ScopeLost, "{code}");
            assert!(err.is_scope_lost());
            assert!(!err.class().refuses_credentials());
            assert_eq!(err.code(), Some(code));
        }
    }

    #[test]
    fn missing_scope_is_forbidden_naming_the_scope() {
        let err = api("missing_scope", Some("channels:history"));
        assert_eq!(
            err.class(),
            VendorErrorClass::Forbidden {
                permission: Some("channels:history".into())
            }
        );
        assert_eq!(
            err.to_string(),
            "Slack conversations.history: missing_scope (needs channels:history)"
        );
    }

    #[test]
    fn other_codes_and_bad_shapes_are_invalid_responses() {
        assert_eq!(
            api("thread_not_found", None).class(),
            VendorErrorClass::InvalidResponse
        );
        let shape = SlackError::InvalidResponse {
            method: "auth.test",
            detail: "missing field `team_id`".into(),
        };
        assert_eq!(shape.class(), VendorErrorClass::InvalidResponse);
        assert_eq!(shape.code(), None);
        assert!(!shape.is_retryable());
    }

    #[test]
    fn throttling_server_and_transport_failures_are_retried_with_their_class() {
        let m = "conversations.list";
        let cases = [
            (
                SlackError::RateLimited {
                    method: m,
                    retry_after: Some(Duration::from_secs(3)),
                },
                VendorErrorClass::RateLimited,
            ),
            (
                SlackError::Server {
                    method: m,
                    status: 503,
                },
                VendorErrorClass::ServerError,
            ),
            (SlackError::Timeout { method: m }, VendorErrorClass::Timeout),
            (
                SlackError::Unreachable {
                    method: m,
                    detail: "connection refused".into(),
                },
                VendorErrorClass::Unreachable,
            ),
        ];
        for (err, class) in cases {
            assert!(err.is_retryable(), "{err}");
            assert_eq!(err.class(), class, "{err}");
        }
        let limited = SlackError::RateLimited {
            method: m,
            retry_after: Some(Duration::from_secs(3)),
        };
        assert_eq!(limited.retry_after(), Some(Duration::from_secs(3)));
    }

    #[test]
    fn a_passed_deadline_is_a_timeout_not_retried() {
        let err = SlackError::deadline_passed("auth.test", Duration::from_secs(60));
        assert_eq!(err.class(), VendorErrorClass::Timeout);
        assert!(!err.is_retryable());
        assert_eq!(err.method(), "auth.test");
    }

    #[test]
    fn slack_failing_with_ok_false_is_a_server_error() {
        assert_eq!(
            api("internal_error", None).class(),
            VendorErrorClass::ServerError
        );
    }

    #[test]
    fn ratelimited_sent_as_ok_false_is_throttling() {
        let err = SlackError::from_attempt(
            "conversations.history",
            SlackClientError::ApiError(slack_morphism::errors::SlackClientApiError::new(
                "ratelimited".into(),
            )),
        );
        assert!(matches!(err, SlackError::RateLimited { .. }));
        assert!(err.is_retryable());
    }

    #[test]
    fn the_needed_scope_is_read_from_the_answer() {
        let err = SlackError::from_attempt(
            "conversations.history",
            SlackClientError::ApiError(
                slack_morphism::errors::SlackClientApiError::new("missing_scope".into())
                    .with_http_response_body(
                        r#"{"ok":false,"error":"missing_scope","needed":"groups:history","provided":"channels:history"}"#.into(),
                    ),
            ),
        );
        assert_eq!(err.code(), Some("missing_scope"));
        assert_eq!(
            err.class(),
            VendorErrorClass::Forbidden {
                permission: Some("groups:history".into())
            }
        );
    }
}
