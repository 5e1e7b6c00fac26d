//! The client against a scripted Slack over HTTP: what it sends, how it reads Slack's answers,
//! and which failures it retries.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use lifecycle_core::vendor_error::VendorErrorClass;
use serde_json::{Value, json};
use slack_client::{HistoryQuery, RepliesQuery, Settings, SlackClient, SlackError, methods};

/// One scripted answer.
struct Reply {
    status: StatusCode,
    retry_after: Option<&'static str>,
    body: Value,
    delay: Duration,
}

fn ok(body: Value) -> Reply {
    let mut body = body;
    body["ok"] = json!(true);
    Reply {
        status: StatusCode::OK,
        retry_after: None,
        body,
        delay: Duration::ZERO,
    }
}

fn failed(code: &str) -> Reply {
    Reply {
        body: json!({ "ok": false, "error": code }),
        ..ok(json!({}))
    }
}

fn status(status: StatusCode) -> Reply {
    Reply {
        status,
        body: json!({ "ok": false }),
        ..ok(json!({}))
    }
}

fn throttled(retry_after: &'static str) -> Reply {
    Reply {
        status: StatusCode::TOO_MANY_REQUESTS,
        retry_after: Some(retry_after),
        body: json!({ "ok": false, "error": "ratelimited" }),
        delay: Duration::ZERO,
    }
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    query: HashMap<String, String>,
    authorization: Option<String>,
    body: Option<Value>,
}

#[derive(Default)]
struct Script {
    replies: Mutex<HashMap<String, VecDeque<Reply>>>,
    seen: Mutex<Vec<Seen>>,
}

/// Serves Slack-shaped answers under `/custom/api/`, in the order scripted per method.
struct FakeSlack {
    base: String,
    script: Arc<Script>,
}

const PREFIX: &str = "/custom/api";

impl FakeSlack {
    async fn start() -> FakeSlack {
        let script = Arc::new(Script::default());
        let app = Router::new()
            .route(&format!("{PREFIX}/{{method}}"), any(answer))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeSlack {
            base: format!("http://{addr}{PREFIX}"),
            script,
        }
    }

    fn script(&self, method: &str, replies: impl IntoIterator<Item = Reply>) {
        self.script
            .replies
            .lock()
            .unwrap()
            .entry(method.to_owned())
            .or_default()
            .extend(replies);
    }

    fn seen(&self) -> Vec<Seen> {
        self.script.seen.lock().unwrap().clone()
    }

    /// A client of this server with `retry`; `base` without its final `/`, which the
    /// client adds.
    fn client(&self, retry: vendor_http::RetryPolicy) -> SlackClient {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let settings = Settings {
            base_url: self.base.clone(),
            retry,
            request_timeout: Duration::from_secs(5),
        };
        SlackClient::new(&settings, "xoxb-test-token").unwrap()
    }
}

async fn answer(
    State(script): State<Arc<Script>>,
    Path(method): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    script.seen.lock().unwrap().push(Seen {
        method: method.clone(),
        query,
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: serde_json::from_slice(&body).ok(),
    });
    let reply = script
        .replies
        .lock()
        .unwrap()
        .get_mut(&method)
        .and_then(VecDeque::pop_front)
        .unwrap_or_else(|| failed("unknown_method"));
    tokio::time::sleep(reply.delay).await;
    let mut response = (reply.status, axum::Json(reply.body)).into_response();
    if let Some(after) = reply.retry_after {
        response
            .headers_mut()
            .insert("retry-after", after.parse().unwrap());
    }
    response
}

/// Retries a few milliseconds apart.
fn quick(max_retries: usize) -> vendor_http::RetryPolicy {
    vendor_http::RetryPolicy {
        max_retries,
        min_delay: Duration::from_millis(2),
        max_delay: Duration::from_millis(10),
        max_retry_after: Duration::from_secs(5),
        deadline: Duration::from_secs(10),
    }
}

#[tokio::test]
async fn calls_go_to_the_base_url_with_the_bot_token() {
    let slack = FakeSlack::start().await;
    slack.script(
        methods::AUTH_TEST,
        [ok(
            json!({ "team_id": "T1", "user_id": "U1", "bot_id": "B1", "url": "x" }),
        )],
    );
    let client = slack.client(quick(0));

    let me = client.auth_test().await.unwrap();

    assert_eq!((me.team_id.as_str(), me.user_id.as_str()), ("T1", "U1"));
    assert_eq!(me.bot_id.as_deref(), Some("B1"));
    let seen = slack.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "auth.test");
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some("Bearer xoxb-test-token")
    );
    assert_eq!(client.calls(), 1);
}

#[tokio::test]
async fn a_base_url_without_the_api_path_reaches_nothing() {
    let slack = FakeSlack::start().await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Settings {
        base_url: slack.base.trim_end_matches(PREFIX).to_owned() + "/api/",
        retry: quick(2),
        request_timeout: Duration::from_secs(5),
    };
    let client = SlackClient::new(&settings, "xoxb-test-token").unwrap();

    let err = client.auth_test().await.unwrap_err();

    // The server's 404 for a path it does not serve: not Slack's shape, not retried.
    assert_eq!(err.class(), VendorErrorClass::InvalidResponse, "{err}");
    assert!(slack.seen().is_empty());
    assert_eq!(client.calls(), 1);
}

#[tokio::test]
async fn a_base_url_that_is_not_http_is_refused() {
    let settings = Settings {
        base_url: "slack.com/api/".into(),
        ..Settings::default()
    };
    let err = SlackClient::new(&settings, "xoxb").unwrap_err();
    assert_eq!(err.class(), VendorErrorClass::Unreachable);
}

#[tokio::test]
async fn ok_false_is_typed_and_not_retried() {
    let slack = FakeSlack::start().await;
    slack.script(methods::AUTH_TEST, [failed("invalid_auth")]);
    slack.script(methods::CONVERSATIONS_HISTORY, [failed("not_in_channel")]);
    slack.script(
        methods::CONVERSATIONS_INFO,
        [Reply {
            body: json!({ "ok": false, "error": "missing_scope", "needed": "groups:read" }),
            ..failed("")
        }],
    );
    let client = slack.client(quick(3));

    let refused = client.auth_test().await.unwrap_err();
    assert_eq!(refused.class(), VendorErrorClass::BadCredentials);
    assert_eq!(refused.code(), Some("invalid_auth"));

    let lost = client
        .conversations_history(&history("C1"))
        .await
        .unwrap_err();
    assert_eq!(lost.class(), VendorErrorClass::ScopeLost);
    assert!(lost.is_scope_lost());
    assert!(matches!(
        lost,
        SlackError::Api {
            method: "conversations.history",
            ..
        }
    ));

    let forbidden = client.conversations_info("G1").await.unwrap_err();
    assert_eq!(
        forbidden.class(),
        VendorErrorClass::Forbidden {
            permission: Some("groups:read".into())
        }
    );

    assert_eq!(client.calls(), 3, "each failed once, none retried");
}

#[tokio::test]
async fn a_throttled_call_waits_out_retry_after_then_succeeds() {
    let slack = FakeSlack::start().await;
    slack.script(
        methods::CONVERSATIONS_INFO,
        [throttled("0"), ok(json!({ "channel": channel_json("C1") }))],
    );
    // A backoff this long would pass the deadline and end the retries: only Slack's
    // Retry-After lets the second attempt happen.
    let policy = vendor_http::RetryPolicy {
        min_delay: Duration::from_secs(30),
        max_delay: Duration::from_secs(30),
        deadline: Duration::from_secs(10),
        ..quick(3)
    };
    let client = slack.client(policy);

    let channel = client.conversations_info("C1").await.unwrap();

    assert_eq!(channel.id, "C1");
    assert_eq!(client.calls(), 2);
}

#[tokio::test]
async fn a_retry_after_longer_than_we_wait_ends_the_call_rate_limited() {
    let slack = FakeSlack::start().await;
    slack.script(methods::CONVERSATIONS_INFO, [throttled("600")]);
    let client = slack.client(quick(3));

    let err = client.conversations_info("C1").await.unwrap_err();

    assert_eq!(err.class(), VendorErrorClass::RateLimited);
    assert!(matches!(
        err,
        SlackError::RateLimited { retry_after: Some(after), .. } if after == Duration::from_secs(600)
    ));
    assert_eq!(client.calls(), 1);
}

#[tokio::test]
async fn server_errors_are_retried_until_the_retries_run_out() {
    let slack = FakeSlack::start().await;
    slack.script(
        methods::CONVERSATIONS_LIST,
        [
            status(StatusCode::BAD_GATEWAY),
            ok(json!({ "channels": [] })),
        ],
    );
    slack.script(
        methods::CONVERSATIONS_INFO,
        (0..3).map(|_| status(StatusCode::SERVICE_UNAVAILABLE)),
    );
    let client = slack.client(quick(2));

    let page = client.conversations_list(None, 100).await.unwrap();
    assert!(page.items.is_empty());
    assert_eq!(client.calls(), 2);

    let err = client.conversations_info("C1").await.unwrap_err();
    assert!(matches!(
        err,
        SlackError::Server {
            method: "conversations.info",
            status: 503
        }
    ));
    assert_eq!(err.class(), VendorErrorClass::ServerError);
    assert_eq!(client.calls(), 2 + 3, "the first attempt and two retries");
}

#[tokio::test]
async fn an_attempt_without_an_answer_in_time_is_a_timeout() {
    let slack = FakeSlack::start().await;
    slack.script(
        methods::AUTH_TEST,
        [Reply {
            delay: Duration::from_secs(3),
            ..ok(json!({ "team_id": "T1", "user_id": "U1" }))
        }],
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Settings {
        base_url: slack.base.clone(),
        retry: quick(0),
        request_timeout: Duration::from_millis(100),
    };
    let client = SlackClient::new(&settings, "xoxb").unwrap();

    let err = client.auth_test().await.unwrap_err();

    assert!(matches!(
        err,
        SlackError::Timeout {
            method: "auth.test"
        }
    ));
    assert_eq!(err.class(), VendorErrorClass::Timeout);
}

#[tokio::test]
async fn a_closed_port_is_unreachable_after_the_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Settings {
        base_url: format!("http://{addr}/api/"),
        retry: quick(1),
        request_timeout: Duration::from_secs(5),
    };
    let client = SlackClient::new(&settings, "xoxb").unwrap();

    let err = client.auth_test().await.unwrap_err();

    assert_eq!(err.class(), VendorErrorClass::Unreachable, "{err}");
    assert_eq!(client.calls(), 2);
}

#[tokio::test]
async fn an_answer_without_slack_fields_is_invalid() {
    let slack = FakeSlack::start().await;
    slack.script(methods::AUTH_TEST, [ok(json!({ "user_id": "U1" }))]);
    let client = slack.client(quick(2));

    let err = client.auth_test().await.unwrap_err();

    assert_eq!(err.class(), VendorErrorClass::InvalidResponse, "{err}");
    assert!(err.to_string().contains("team_id"), "{err}");
    assert_eq!(client.calls(), 1);
}

#[tokio::test]
async fn channels_are_listed_page_by_page_with_the_cursor() {
    let slack = FakeSlack::start().await;
    slack.script(
        methods::CONVERSATIONS_LIST,
        [
            ok(json!({
                "channels": [channel_json("C1")],
                "response_metadata": { "next_cursor": "dGVhbTpDMg==" }
            })),
            ok(json!({
                "channels": [channel_json("C2")],
                "response_metadata": { "next_cursor": "" }
            })),
        ],
    );
    let client = slack.client(quick(0));

    let first = client.conversations_list(None, 200).await.unwrap();
    assert_eq!(first.next_cursor.as_deref(), Some("dGVhbTpDMg=="));
    assert!(first.has_more);
    let second = client
        .conversations_list(first.next_cursor.as_deref(), 200)
        .await
        .unwrap();
    assert_eq!(second.next_cursor, None);
    assert!(!second.has_more);
    assert_eq!(second.items[0].id, "C2");

    let seen = slack.seen();
    for call in &seen {
        assert_eq!(call.query["types"], "public_channel,private_channel");
        assert_eq!(call.query["exclude_archived"], "false");
        assert_eq!(call.query["limit"], "200");
    }
    assert!(!seen[0].query.contains_key("cursor"));
    // The cursor arrives as Slack gave it, `=` included.
    assert_eq!(seen[1].query["cursor"], "dGVhbTpDMg==");
}

#[tokio::test]
async fn history_sends_its_window_cursor_and_limit() {
    let slack = FakeSlack::start().await;
    slack.script(
        methods::CONVERSATIONS_HISTORY,
        [
            ok(json!({
                "messages": [{ "type": "message", "ts": "1700000001.000100", "user": "U1",
                               "text": "hi" }],
                "has_more": true,
                "response_metadata": { "next_cursor": "bmV4dA==" }
            })),
            ok(json!({ "messages": [], "has_more": false })),
        ],
    );
    let client = slack.client(quick(0));

    let page = client
        .conversations_history(&HistoryQuery {
            channel: "C1",
            oldest: Some("1700000000.000000"),
            latest: Some("1700000099.000000"),
            inclusive: true,
            cursor: Some("Y3Vy"),
            limit: 150,
        })
        .await
        .unwrap();
    assert!(page.has_more);
    assert_eq!(page.items[0].ts, "1700000001.000100");
    client.conversations_history(&history("C1")).await.unwrap();

    let seen = slack.seen();
    let windowed = &seen[0].query;
    assert_eq!(windowed["channel"], "C1");
    assert_eq!(windowed["oldest"], "1700000000.000000");
    assert_eq!(windowed["latest"], "1700000099.000000");
    assert_eq!(windowed["inclusive"], "true");
    assert_eq!(windowed["cursor"], "Y3Vy");
    assert_eq!(windowed["limit"], "150");
    // Unset bounds are left out, and exclusive is Slack's default.
    let plain = &seen[1].query;
    for absent in ["oldest", "latest", "inclusive", "cursor"] {
        assert!(!plain.contains_key(absent), "{absent} sent: {plain:?}");
    }
}

#[tokio::test]
async fn replies_send_the_thread_and_its_window() {
    let slack = FakeSlack::start().await;
    slack.script(
        methods::CONVERSATIONS_REPLIES,
        [ok(json!({
            "messages": [
                { "ts": "1.000001", "thread_ts": "1.000001", "reply_count": 1,
                  "latest_reply": "2.000002", "user": "U1" },
                { "ts": "2.000002", "thread_ts": "1.000001", "user": "U2" }
            ],
            "has_more": false
        }))],
    );
    let client = slack.client(quick(0));

    let page = client
        .conversations_replies(&RepliesQuery {
            channel: "C1",
            ts: "1.000001",
            oldest: Some("1.500000"),
            cursor: Some("cur"),
            limit: 50,
        })
        .await
        .unwrap();

    assert_eq!(page.items.len(), 2);
    assert_eq!(page.items[0].reply_count, Some(1));
    assert_eq!(page.items[1].thread_ts.as_deref(), Some("1.000001"));
    let query = &slack.seen()[0].query;
    assert_eq!(query["channel"], "C1");
    assert_eq!(query["ts"], "1.000001");
    assert_eq!(query["oldest"], "1.500000");
    assert_eq!(query["cursor"], "cur");
    assert_eq!(query["limit"], "50");
}

#[tokio::test]
async fn a_post_returns_its_ts_and_is_retried_only_when_throttled() {
    let slack = FakeSlack::start().await;
    slack.script(
        methods::CHAT_POST_MESSAGE,
        [
            throttled("0"),
            ok(json!({ "channel": "C1", "ts": "1700000001.000100" })),
            status(StatusCode::INTERNAL_SERVER_ERROR),
        ],
    );
    let client = slack.client(quick(3));

    let ts = client.chat_post_message("C1", "hello").await.unwrap();
    assert_eq!(ts, "1700000001.000100");
    assert_eq!(client.calls(), 2);
    let sent = slack.seen()[1].body.clone().unwrap();
    assert_eq!(sent["channel"], "C1");
    assert_eq!(sent["text"], "hello");

    // A 5xx may have posted: not sent again.
    let err = client.chat_post_message("C1", "again").await.unwrap_err();
    assert_eq!(err.class(), VendorErrorClass::ServerError);
    assert_eq!(client.calls(), 3);
}

fn history(channel: &str) -> HistoryQuery<'_> {
    HistoryQuery {
        channel,
        oldest: None,
        latest: None,
        inclusive: false,
        cursor: None,
        limit: 100,
    }
}

fn channel_json(id: &str) -> Value {
    json!({ "id": id, "name": id.to_lowercase(), "is_archived": false, "is_member": true,
            "is_private": false })
}
