//! The client against a scripted Outline over HTTP: what it sends, how it reads Outline's
//! answers, which failures it retries and what each failure is.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use lifecycle_core::vendor_error::VendorErrorClass;
use outline_client::{
    CallBudget, Direction, DocumentSort, OutlineClient, OutlineError, RetryPolicy, Settings,
    methods,
};
use serde_json::{Value, json};
use uuid::Uuid;
use vendor_http::egress::Egress;

/// One scripted answer.
struct Reply {
    status: StatusCode,
    headers: Vec<(&'static str, &'static str)>,
    body: String,
    /// How long the server takes to answer.
    delay: Duration,
}

/// Outline's success envelope around `data`.
fn ok(data: Value) -> Reply {
    ok_with(json!({ "data": data }))
}

fn ok_with(mut body: Value) -> Reply {
    body["ok"] = json!(true);
    body["status"] = json!(200);
    Reply {
        status: StatusCode::OK,
        headers: vec![("content-type", "application/json")],
        body: body.to_string(),
        delay: Duration::ZERO,
    }
}

/// A page of a listing, with the pagination Outline adds.
fn page(items: Value, offset: u64, limit: u64) -> Reply {
    ok_with(json!({
        "data": items,
        "pagination": { "offset": offset, "limit": limit, "nextPath": "/api/next" },
        "policies": [],
    }))
}

/// Outline's error object with `status`.
fn error(status: StatusCode, code: &str) -> Reply {
    Reply {
        status,
        headers: vec![("content-type", "application/json")],
        body: json!({
            "ok": false,
            "error": code,
            "status": status.as_u16(),
            "message": format!("{code} happened"),
        })
        .to_string(),
        delay: Duration::ZERO,
    }
}

fn throttled(retry_after: &'static str) -> Reply {
    let mut reply = error(StatusCode::TOO_MANY_REQUESTS, "rate_limit_exceeded");
    reply.headers.push(("retry-after", retry_after));
    reply
}

fn raw(status: StatusCode, body: &str) -> Reply {
    Reply {
        status,
        headers: vec![("content-type", "text/html")],
        body: body.to_owned(),
        delay: Duration::ZERO,
    }
}

fn slow(mut reply: Reply, delay: Duration) -> Reply {
    reply.delay = delay;
    reply
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    authorization: Option<String>,
    content_type: Option<String>,
    body: Value,
}

#[derive(Default)]
struct Script {
    replies: Mutex<HashMap<String, VecDeque<Reply>>>,
    seen: Mutex<Vec<Seen>>,
}

/// Serves Outline-shaped answers under `/api/`, in the order scripted per method; an
/// unscripted call is a 500 naming it.
struct FakeOutline {
    base: String,
    script: Arc<Script>,
}

impl FakeOutline {
    async fn start() -> FakeOutline {
        let script = Arc::new(Script::default());
        let app = Router::new()
            .route("/api/{method}", post(answer))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeOutline {
            // A final `/` is ignored by the client.
            base: format!("http://{addr}/"),
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

    fn attempts(&self, method: &str) -> usize {
        self.seen().iter().filter(|s| s.method == method).count()
    }

    /// Settings for this server with `retry`.
    fn settings(&self, retry: RetryPolicy) -> Settings {
        Settings {
            base_url: self.base.clone(),
            retry,
            request_timeout: Duration::from_secs(5),
            egress: Egress::unrestricted(),
            ..Settings::default()
        }
    }

    /// A client of this server with `retry`.
    fn client(&self, retry: RetryPolicy) -> OutlineClient {
        install_crypto();
        OutlineClient::new(&self.settings(retry), "ol_api_test-token").unwrap()
    }
}

/// The process's rustls provider, as a binary installs it first thing.
fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Quick retries, so tests spend their time only where `Retry-After` says.
fn retries(max_retries: usize) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(20),
        ..RetryPolicy::default()
    }
}

async fn answer(
    State(script): State<Arc<Script>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    script.seen.lock().unwrap().push(Seen {
        method: method.clone(),
        authorization: text(header::AUTHORIZATION),
        content_type: text(header::CONTENT_TYPE),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let reply = script
        .replies
        .lock()
        .unwrap()
        .get_mut(&method)
        .and_then(VecDeque::pop_front);
    let Some(reply) = reply else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{method} unscripted"),
        )
            .into_response();
    };
    tokio::time::sleep(reply.delay).await;
    let mut response = (reply.status, reply.body).into_response();
    for (name, value) in reply.headers {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}

fn uuid(n: u128) -> Uuid {
    Uuid::from_u128(0x0195_0000_0000_7000_8000_0000_0000_0000 | n)
}

fn document(n: u128, collection: Uuid) -> Value {
    json!({
        "id": uuid(n),
        "collectionId": collection,
        "parentDocumentId": null,
        "title": format!("Doc {n}"),
        "text": "body",
        "url": format!("/doc/doc-{n}"),
        "urlId": format!("doc{n}"),
        "revision": 3,
        "createdAt": "2026-11-01T10:00:00.000Z",
        "updatedAt": "2026-12-01T10:00:00.000Z",
        "publishedAt": "2026-11-01T10:00:00.000Z",
        "archivedAt": null,
        "deletedAt": null,
        "collaboratorIds": [],
    })
}

fn collection(n: u128) -> Value {
    json!({
        "id": uuid(n),
        "name": format!("Collection {n}"),
        "urlId": format!("col{n}"),
        "sharing": false,
        "permission": "read_write",
        "createdAt": "2026-10-01T10:00:00.000Z",
        "updatedAt": "2026-10-02T10:00:00.000Z",
        "deletedAt": null,
        "archivedAt": null,
    })
}

fn subscription(n: u128) -> Value {
    json!({
        "id": uuid(n),
        "name": "forgesync:abc",
        "url": "https://hooks.example/outline",
        "events": ["documents", "collections"],
        "enabled": true,
        "createdAt": "2026-12-01T10:00:00.000Z",
        "updatedAt": "2026-12-01T10:00:00.000Z",
    })
}

mod happy_paths {
    use super::*;

    #[tokio::test]
    async fn auth_info_names_the_user_and_team_and_sends_the_token_as_bearer() {
        let outline = FakeOutline::start().await;
        outline.script(
            methods::AUTH_INFO,
            [ok(json!({
                "user": { "id": uuid(1), "name": "Ada", "role": "admin" },
                "team": { "id": uuid(2), "name": "Acme", "url": "https://acme.getoutline.com" },
            }))],
        );
        let auth = outline.client(retries(0)).auth_info().await.unwrap();
        assert_eq!(auth.user.unwrap().id, Some(uuid(1)));
        assert_eq!(auth.team.unwrap().name.as_deref(), Some("Acme"));
        let seen = outline.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0].authorization.as_deref(),
            Some("Bearer ol_api_test-token")
        );
        // Outline's `auth.info` takes no parameters: nothing is sent.
        assert_eq!(seen[0].body, Value::Null);
    }

    #[tokio::test]
    async fn collections_are_listed_by_offset_and_read_one_by_one() {
        let outline = FakeOutline::start().await;
        outline.script(
            methods::COLLECTIONS_LIST,
            [page(json!([collection(1), collection(2)]), 25, 2)],
        );
        outline.script(methods::COLLECTIONS_INFO, [ok(collection(1))]);
        let client = outline.client(retries(0));
        let page = client.collections_list(25, 2).await.unwrap();
        assert_eq!((page.offset, page.limit), (25, 2));
        let ids: Vec<_> = page.items.iter().map(|c| c.id).collect();
        assert_eq!(ids, [Some(uuid(1)), Some(uuid(2))]);
        let one = client.collections_info(uuid(1)).await.unwrap();
        assert_eq!(one.name.as_deref(), Some("Collection 1"));
        let seen = outline.seen();
        assert_eq!(seen[0].content_type.as_deref(), Some("application/json"));
        assert_eq!(seen[0].body, json!({ "offset": 25, "limit": 2 }));
        assert_eq!(seen[1].body, json!({ "id": uuid(1) }));
    }

    #[tokio::test]
    async fn documents_are_listed_in_the_asked_order_and_read_with_their_deletion() {
        let outline = FakeOutline::start().await;
        let col = uuid(10);
        outline.script(
            methods::DOCUMENTS_LIST,
            [page(json!([document(1, col), document(2, col)]), 0, 100)],
        );
        let mut deleted = document(3, col);
        deleted["deletedAt"] = json!("2026-12-02T08:00:00.000Z");
        outline.script(methods::DOCUMENTS_INFO, [ok(document(1, col)), ok(deleted)]);
        let client = outline.client(retries(0));
        let page = client
            .documents_list(Some(col), 0, 100, DocumentSort::CreatedAt, Direction::Asc)
            .await
            .unwrap();
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.items[1].title.as_deref(), Some("Doc 2"));
        assert_eq!(page.items[0].collection_id, Some(col));
        let live = client.documents_info(uuid(1)).await.unwrap();
        assert!(live.deleted_at.is_none());
        assert!(live.updated_at.is_some());
        let gone = client.documents_info(uuid(3)).await.unwrap();
        assert!(gone.deleted_at.is_some(), "a deleted document says so");
        let seen = outline.seen();
        assert_eq!(
            seen[0].body,
            json!({
                "collectionId": col,
                "offset": 0,
                "limit": 100,
                "sort": "createdAt",
                "direction": "ASC",
            })
        );
        assert_eq!(seen[1].body, json!({ "id": uuid(1).to_string() }));
    }

    #[tokio::test]
    async fn webhook_subscriptions_are_created_listed_and_deleted() {
        let outline = FakeOutline::start().await;
        outline.script(methods::WEBHOOK_SUBSCRIPTIONS_CREATE, [ok(subscription(7))]);
        outline.script(
            methods::WEBHOOK_SUBSCRIPTIONS_LIST,
            [page(json!([subscription(7)]), 0, 25)],
        );
        outline.script(
            methods::WEBHOOK_SUBSCRIPTIONS_DELETE,
            [ok_with(json!({ "success": true }))],
        );
        let client = outline.client(retries(0));
        let events = vec!["documents".to_owned(), "collections".to_owned()];
        let created = client
            .webhook_subscriptions_create(
                "forgesync:abc",
                "https://hooks.example/outline",
                &events,
                Some("s3cret"),
            )
            .await
            .unwrap();
        assert_eq!(created.id, Some(uuid(7)));
        let listed = client.webhook_subscriptions_list(0, 25).await.unwrap();
        assert_eq!(listed.items[0].name.as_deref(), Some("forgesync:abc"));
        client.webhook_subscriptions_delete(uuid(7)).await.unwrap();
        let seen = outline.seen();
        assert_eq!(
            seen[0].body,
            json!({
                "name": "forgesync:abc",
                "url": "https://hooks.example/outline",
                "events": ["documents", "collections"],
                "secret": "s3cret",
            })
        );
        assert_eq!(seen[1].body, json!({ "offset": 0, "limit": 25 }));
        assert_eq!(seen[2].body, json!({ "id": uuid(7) }));
    }
}

mod retries {
    use super::*;

    #[tokio::test]
    async fn a_429_is_retried_after_its_retry_after() {
        let outline = FakeOutline::start().await;
        outline.script(
            methods::COLLECTIONS_LIST,
            [throttled("1"), page(json!([collection(1)]), 0, 25)],
        );
        let started = Instant::now();
        let page = outline
            .client(retries(3))
            .collections_list(0, 25)
            .await
            .unwrap();
        assert_eq!(page.items.len(), 1);
        assert_eq!(outline.attempts(methods::COLLECTIONS_LIST), 2);
        // The backoff alone waits at most 20 ms: the second second is Outline's `Retry-After`.
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_429_still_answered_after_the_retries_is_rate_limited_with_its_wait() {
        let outline = FakeOutline::start().await;
        outline.script(methods::DOCUMENTS_INFO, [throttled("0"), throttled("0")]);
        let err = outline
            .client(retries(1))
            .documents_info(uuid(1))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                OutlineError::RateLimited {
                    retry_after: Some(d),
                    ..
                } if d == Duration::ZERO
            ),
            "{err:?}"
        );
        assert_eq!(err.class(), VendorErrorClass::RateLimited);
        assert_eq!(outline.attempts(methods::DOCUMENTS_INFO), 2);
    }

    #[tokio::test]
    async fn a_429_from_a_proxy_without_outlines_body_is_still_throttling() {
        let outline = FakeOutline::start().await;
        let mut proxy = raw(StatusCode::TOO_MANY_REQUESTS, "<html>slow down</html>");
        proxy.headers.push(("retry-after", "0"));
        outline.script(methods::AUTH_INFO, [proxy]);
        let err = outline.client(retries(0)).auth_info().await.unwrap_err();
        assert!(matches!(err, OutlineError::RateLimited { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn a_5xx_is_retried_and_a_recovered_call_succeeds() {
        let outline = FakeOutline::start().await;
        outline.script(
            methods::DOCUMENTS_LIST,
            [
                error(StatusCode::BAD_GATEWAY, "bad_gateway"),
                raw(StatusCode::SERVICE_UNAVAILABLE, "down"),
                page(json!([]), 0, 25),
            ],
        );
        let page = outline
            .client(retries(3))
            .documents_list(None, 0, 25, DocumentSort::UpdatedAt, Direction::Desc)
            .await
            .unwrap();
        assert!(page.items.is_empty());
        assert_eq!(outline.attempts(methods::DOCUMENTS_LIST), 3);
    }

    #[tokio::test]
    async fn a_5xx_outlasting_the_retries_is_surfaced_as_a_server_error() {
        let outline = FakeOutline::start().await;
        outline.script(
            methods::DOCUMENTS_LIST,
            (0..3).map(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "internal_error")),
        );
        let err = outline
            .client(retries(2))
            .documents_list(None, 0, 25, DocumentSort::UpdatedAt, Direction::Desc)
            .await
            .unwrap_err();
        assert!(
            matches!(err, OutlineError::Server { status: 500, .. }),
            "{err:?}"
        );
        assert_eq!(err.class(), VendorErrorClass::ServerError);
        assert_eq!(outline.attempts(methods::DOCUMENTS_LIST), 3);
    }

    #[tokio::test]
    async fn an_attempt_past_the_request_timeout_is_retried_then_a_timeout() {
        let outline = FakeOutline::start().await;
        let late = Duration::from_millis(800);
        outline.script(
            methods::COLLECTIONS_INFO,
            [
                slow(ok(collection(1)), late),
                ok(collection(1)),
                slow(ok(collection(1)), late),
                slow(ok(collection(1)), late),
            ],
        );
        install_crypto();
        let settings = Settings {
            request_timeout: Duration::from_millis(200),
            ..outline.settings(retries(1))
        };
        let client = OutlineClient::new(&settings, "t").unwrap();
        let found = client.collections_info(uuid(1)).await.unwrap();
        assert_eq!(found.id, Some(uuid(1)));
        let err = client.collections_info(uuid(1)).await.unwrap_err();
        assert!(matches!(err, OutlineError::Timeout { .. }), "{err:?}");
        assert_eq!(err.class(), VendorErrorClass::Timeout);
        assert_eq!(outline.attempts(methods::COLLECTIONS_INFO), 4);
        assert_eq!(client.calls(), 4, "attempts that timed out count");
    }

    #[tokio::test]
    async fn a_create_is_retried_when_throttled_but_never_after_a_5xx() {
        let outline = FakeOutline::start().await;
        outline.script(
            methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
            [
                throttled("0"),
                error(StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
                ok(subscription(1)),
            ],
        );
        let err = outline
            .client(retries(3))
            .webhook_subscriptions_create("n", "https://hooks.example/x", &[], None)
            .await
            .unwrap_err();
        // The 5xx may have created it: the caller looks for it rather than sending it again.
        assert!(matches!(err, OutlineError::Server { .. }), "{err:?}");
        assert_eq!(outline.attempts(methods::WEBHOOK_SUBSCRIPTIONS_CREATE), 2);
    }
}

mod failures {
    use super::*;

    #[tokio::test]
    async fn a_refused_token_is_bad_credentials_and_not_retried() {
        let outline = FakeOutline::start().await;
        outline.script(
            methods::AUTH_INFO,
            [error(StatusCode::UNAUTHORIZED, "authentication_required")],
        );
        let err = outline.client(retries(3)).auth_info().await.unwrap_err();
        assert!(
            matches!(err, OutlineError::BadCredentials { ref message, .. } if message.contains("authentication_required")),
            "{err:?}"
        );
        assert_eq!(err.class(), VendorErrorClass::BadCredentials);
        assert_eq!(outline.attempts(methods::AUTH_INFO), 1);
        assert!(!err.to_string().contains("ol_api_test-token"));
    }

    #[tokio::test]
    async fn a_forbidden_call_is_forbidden() {
        let outline = FakeOutline::start().await;
        outline.script(
            methods::WEBHOOK_SUBSCRIPTIONS_LIST,
            [error(StatusCode::FORBIDDEN, "authorization_error")],
        );
        let err = outline
            .client(retries(3))
            .webhook_subscriptions_list(0, 25)
            .await
            .unwrap_err();
        assert_eq!(
            err.class(),
            VendorErrorClass::Forbidden { permission: None }
        );
        assert_eq!(outline.attempts(methods::WEBHOOK_SUBSCRIPTIONS_LIST), 1);
    }

    #[tokio::test]
    async fn an_unknown_document_or_collection_is_not_found() {
        let outline = FakeOutline::start().await;
        outline.script(
            methods::DOCUMENTS_INFO,
            [error(StatusCode::NOT_FOUND, "not_found")],
        );
        // A 404 from something other than Outline (a proxy's page) is just as final.
        outline.script(
            methods::COLLECTIONS_INFO,
            [raw(StatusCode::NOT_FOUND, "<h1>Not Found</h1>")],
        );
        let client = outline.client(retries(3));
        let err = client.documents_info(uuid(1)).await.unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
        assert_eq!(err.class(), VendorErrorClass::NotFound);
        assert_eq!(err.method(), methods::DOCUMENTS_INFO);
        let err = client.collections_info(uuid(2)).await.unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
        assert_eq!(outline.seen().len(), 2, "a 404 is not retried");
    }

    #[tokio::test]
    async fn malformed_json_is_a_decode_error_never_an_empty_page() {
        let outline = FakeOutline::start().await;
        outline.script(
            methods::DOCUMENTS_LIST,
            [
                raw(StatusCode::OK, "{\"data\": [ {\"id\": \"secret text"),
                // Well-formed, but without `data`: not a page of nothing.
                ok_with(json!({ "pagination": { "offset": 0, "limit": 25 } })),
                // `data` of the wrong shape.
                ok_with(json!({ "data": { "id": "x" } })),
            ],
        );
        let client = outline.client(retries(3));
        for _ in 0..3 {
            let err = client
                .documents_list(None, 0, 25, DocumentSort::CreatedAt, Direction::Asc)
                .await
                .unwrap_err();
            assert!(matches!(err, OutlineError::Decode { .. }), "{err:?}");
            assert_eq!(err.class(), VendorErrorClass::InvalidResponse);
            assert!(!err.to_string().contains("secret text"), "{err}");
        }
        assert_eq!(outline.attempts(methods::DOCUMENTS_LIST), 3, "not retried");
    }

    #[tokio::test]
    async fn a_redirect_is_not_followed_with_the_token() {
        let outline = FakeOutline::start().await;
        let mut moved = raw(StatusCode::FOUND, "");
        moved
            .headers
            .push(("location", "https://elsewhere.example/api/auth.info"));
        outline.script(methods::AUTH_INFO, [moved]);
        let err = outline.client(retries(3)).auth_info().await.unwrap_err();
        assert!(
            matches!(err, OutlineError::Status { status: 302, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("check the server URL"), "{err}");
        assert_eq!(outline.seen().len(), 1, "not followed, not retried");
    }

    #[tokio::test]
    async fn an_internal_address_is_refused_before_anything_is_sent() {
        let outline = FakeOutline::start().await;
        let settings = Settings {
            egress: Egress::public_only(),
            ..outline.settings(retries(3))
        };
        install_crypto();
        let client = OutlineClient::new(&settings, "t").unwrap();
        let err = client.auth_info().await.unwrap_err();
        assert!(matches!(err, OutlineError::Refused { .. }), "{err:?}");
        assert_eq!(err.class(), VendorErrorClass::Unreachable);
        assert!(outline.seen().is_empty());
    }

    #[tokio::test]
    async fn an_answer_larger_than_the_cap_is_not_read_nor_retried() {
        let outline = FakeOutline::start().await;
        let col = uuid(1);
        let many: Vec<Value> = (0..40).map(|n| document(n, col)).collect();
        outline.script(
            methods::DOCUMENTS_LIST,
            [
                page(json!(many), 0, 40),
                page(json!([document(1, col)]), 0, 1),
            ],
        );
        install_crypto();
        let settings = Settings {
            max_response_bytes: 4096,
            ..outline.settings(retries(3))
        };
        let client = OutlineClient::new(&settings, "t").unwrap();
        let err = client
            .documents_list(Some(col), 0, 40, DocumentSort::CreatedAt, Direction::Asc)
            .await
            .unwrap_err();
        assert!(
            matches!(err, OutlineError::TooLarge { limit: 4096, .. }),
            "{err:?}"
        );
        assert_eq!(err.class(), VendorErrorClass::InvalidResponse);
        assert_eq!(outline.attempts(methods::DOCUMENTS_LIST), 1);
        // An answer within the cap is read as usual.
        let page = client
            .documents_list(Some(col), 0, 1, DocumentSort::CreatedAt, Direction::Asc)
            .await
            .unwrap();
        assert_eq!(page.items.len(), 1);
    }

    #[tokio::test]
    async fn a_bad_base_url_fails_at_setup() {
        let settings = Settings {
            base_url: "ftp://outline.example".into(),
            ..Settings::default()
        };
        let err = OutlineClient::new(&settings, "t").unwrap_err();
        assert_eq!(err.method(), "client setup");
    }
}

mod budget {
    use super::*;

    #[tokio::test]
    async fn every_attempt_spends_the_budget_and_a_spent_one_sends_nothing() {
        let outline = FakeOutline::start().await;
        outline.script(
            methods::COLLECTIONS_LIST,
            [
                page(json!([]), 0, 25),
                error(StatusCode::BAD_GATEWAY, "bad_gateway"),
                page(json!([]), 0, 25),
            ],
        );
        let client = outline.client(retries(3));
        let budget = CallBudget::new(2);
        let pass = client.with_budget(budget.clone());
        pass.collections_list(0, 25).await.unwrap();
        assert_eq!(budget.left(), 1);
        // The 502 takes the last call; its retry finds the budget spent.
        let err = pass.collections_list(0, 25).await.unwrap_err();
        assert!(
            matches!(err, OutlineError::BudgetExhausted { .. }),
            "{err:?}"
        );
        assert_eq!(err.class(), VendorErrorClass::BudgetExhausted);
        assert_eq!(budget.left(), 0);
        assert_eq!(outline.attempts(methods::COLLECTIONS_LIST), 2);
        // Clones share the count; the client without the budget still calls.
        assert_eq!(client.calls(), 2);
        client.collections_list(0, 25).await.unwrap();
        assert_eq!(pass.calls(), 3);
    }
}

mod quota {
    use super::*;

    #[tokio::test]
    async fn what_outline_says_is_left_is_reported_for_the_connection() {
        let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .expect("the only recorder of this process");
        let outline = FakeOutline::start().await;
        let mut answer = page(json!([]), 0, 25);
        answer.headers.push(("ratelimit-limit", "1000"));
        answer.headers.push(("ratelimit-remaining", "998"));
        let mut limited = throttled("0");
        limited.headers.push(("ratelimit-limit", "1000"));
        limited.headers.push(("ratelimit-remaining", "0"));
        outline.script(methods::COLLECTIONS_LIST, [answer, limited]);
        let client = outline.client(retries(0));
        client.report_quota_as("conn-1");
        let labels = r#"{vendor="outline",resource="api",connection="conn-1"}"#;
        // Clones report where the client does.
        client
            .with_budget(CallBudget::new(10))
            .collections_list(0, 25)
            .await
            .unwrap();
        let rendered = metrics.render();
        assert!(
            rendered.contains(&format!("vendor_quota_remaining{labels} 998\n")),
            "{rendered}"
        );
        assert!(
            rendered.contains(&format!("vendor_quota_limit{labels} 1000\n")),
            "{rendered}"
        );
        // A throttled answer says what is left too.
        client.collections_list(0, 25).await.unwrap_err();
        let rendered = metrics.render();
        assert!(
            rendered.contains(&format!("vendor_quota_remaining{labels} 0\n")),
            "{rendered}"
        );
    }
}
