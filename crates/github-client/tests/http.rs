//! The client against a scripted HTTP server: canned answers in order, every request recorded.
//!
//! Not a GitHub simulator (that is `crates/vendor-sim`): each test scripts exactly the answers
//! its rule needs and checks what the client sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use github_client::{
    AppClaims, AppCredentials, Auth, Budget, ClientConfig, Error, GithubApp, GithubClient,
    IssueState, RateLimitKind, Resource, RetryPolicy,
};
use serde_json::{Value, json};
use vendor_http::egress::Egress;

const PRIVATE: &[u8] = include_bytes!("fixtures/test-app-key.pem");
const PUBLIC: &[u8] = include_bytes!("fixtures/test-app-key.pub.pem");

#[derive(Clone)]
struct Canned {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Value,
}

fn ok(body: Value) -> Canned {
    Canned {
        status: 200,
        headers: Vec::new(),
        body,
    }
}

fn status(status: u16, body: Value) -> Canned {
    Canned {
        status,
        headers: Vec::new(),
        body,
    }
}

impl Canned {
    fn header(mut self, name: &'static str, value: impl ToString) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }
}

#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    authorization: Option<String>,
    body: Option<Value>,
}

#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<Canned>>,
    seen: Mutex<Vec<Seen>>,
}

/// A server on 127.0.0.1:0 that answers with `answers` in order; the last answer repeats.
struct Scripted {
    url: String,
    script: Arc<Script>,
}

impl Scripted {
    async fn start(answers: Vec<Canned>) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let script = Arc::new(Script {
            answers: Mutex::new(answers.into()),
            seen: Mutex::default(),
        });
        let state = script.clone();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let script = state.clone();
                async move { script.answer(method, uri, headers, body) }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, script }
    }

    fn seen(&self) -> Vec<Seen> {
        self.script.seen.lock().unwrap().clone()
    }

    fn config(&self) -> ClientConfig {
        ClientConfig {
            retry: RetryPolicy {
                max_retries: 2,
                min_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(5),
                max_retry_after: Duration::from_secs(5),
                deadline: vendor_http::DEFAULT_CALL_DEADLINE,
            },
            ..ClientConfig::new(&self.url).with_egress(Egress::unrestricted())
        }
    }

    fn pat_client(&self) -> GithubClient {
        GithubClient::new(&self.config(), Auth::personal_token("pat-1")).unwrap()
    }
}

impl Script {
    fn answer(&self, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
        self.seen.lock().unwrap().push(Seen {
            method,
            path: uri.to_string(),
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: serde_json::from_slice(&body).ok(),
        });
        let canned = {
            let mut answers = self.answers.lock().unwrap();
            if answers.len() > 1 {
                answers.pop_front().unwrap()
            } else {
                answers.front().cloned().expect("no answer scripted")
            }
        };
        let mut response = (
            StatusCode::from_u16(canned.status).unwrap(),
            axum::Json(canned.body),
        )
            .into_response();
        for (name, value) in canned.headers {
            response.headers_mut().insert(name, value.parse().unwrap());
        }
        response
    }
}

fn in_one_hour() -> String {
    (time::OffsetDateTime::now_utc() + time::Duration::hours(1))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn rate_limit(cost: i64, remaining: i64) -> Value {
    json!({"cost": cost, "limit": 5000, "remaining": remaining, "resetAt": in_one_hour()})
}

fn issue(number: i64) -> Value {
    json!({
        "id": format!("I_{number}"), "databaseId": 1000 + number, "number": number,
        "title": format!("issue {number}"), "body": "b", "state": "CLOSED",
        "stateReason": "NOT_PLANNED", "createdAt": "2024-01-02T03:04:05Z",
        "updatedAt": "2024-01-03T03:04:05Z", "closedAt": "2024-01-03T03:04:05Z",
        "locked": true, "activeLockReason": "RESOLVED", "author": {"login": "octo"},
        "comments": {"totalCount": 0, "pageInfo": {"hasNextPage": false, "endCursor": null}, "nodes": []}
    })
}

fn issues_page(nodes: Vec<Value>, has_next: bool, remaining: i64) -> Value {
    json!({"data": {
        "repository": {
            "id": "R_1", "databaseId": 77, "nameWithOwner": "acme/socket.io", "isArchived": false,
            "owner": {"login": "acme"},
            "issues": {
                "totalCount": 5,
                "pageInfo": {"hasNextPage": has_next, "endCursor": if has_next { json!("c2") } else { Value::Null }},
                "nodes": nodes
            }
        },
        "rateLimit": rate_limit(1, remaining)
    }})
}

// ---- pages and their decoding ----

#[tokio::test]
async fn issues_page_carries_nodes_counts_cursor_header_and_rate_limit() {
    let server = Scripted::start(vec![ok(issues_page(vec![issue(1), issue(2)], true, 4999))]).await;
    let client = server.pat_client();
    let page = client
        .issues_page("acme", "socket.io", 2, Some("c1"))
        .await
        .unwrap();

    assert_eq!(page.repository.name_with_owner, "acme/socket.io");
    assert_eq!(page.repository.database_id, Some(77));
    assert_eq!(page.total_count, 5);
    assert!(page.page_info.has_next_page);
    assert_eq!(page.page_info.end_cursor.as_deref(), Some("c2"));
    assert!(page.is_whole());
    let first = page.nodes[0].as_ref().unwrap();
    assert_eq!(first.number, 1);
    assert_eq!(first.state, IssueState::Closed);
    assert_eq!(first.author.as_ref().unwrap().login, "octo");
    assert_eq!(page.rate_limit.unwrap().remaining, 4999);
    assert_eq!(
        client.rate_limit(Resource::Graphql).unwrap().remaining,
        4999
    );

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, Method::POST);
    assert_eq!(seen[0].path, "/graphql");
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer pat-1"));
    let body = seen[0].body.as_ref().unwrap();
    assert!(
        body["query"]
            .as_str()
            .unwrap()
            .starts_with("query RepositoryIssues(")
    );
    assert_eq!(
        body["variables"],
        json!({"owner": "acme", "name": "socket.io", "first": 2, "after": "c1"})
    );
}

#[tokio::test]
async fn unknown_enum_values_do_not_fail_a_page() {
    let mut odd = issue(1);
    odd["stateReason"] = json!("SOMETHING_NEW");
    let server = Scripted::start(vec![ok(issues_page(vec![odd], false, 10))]).await;
    let page = server
        .pat_client()
        .issues_page("acme", "r", 100, None)
        .await
        .unwrap();
    let reason = page.nodes[0].as_ref().unwrap().state_reason.clone();
    assert_eq!(
        reason,
        Some(github_client::IssueStateReason::Other(
            "SOMETHING_NEW".into()
        ))
    );
}

// ---- GraphQL errors ----

#[tokio::test]
async fn graphql_errors_keep_their_paths_and_mark_the_page_not_whole() {
    let mut body = issues_page(vec![issue(1), Value::Null], false, 100);
    body["errors"] = json!([{
        "message": "Something went wrong while executing your query.",
        "type": "SERVICE_UNAVAILABLE",
        "path": ["repository", "issues", "nodes", 1, "author"]
    }]);
    let server = Scripted::start(vec![ok(body)]).await;
    let page = server
        .pat_client()
        .issues_page("acme", "r", 2, None)
        .await
        .unwrap();
    assert!(!page.is_whole());
    assert!(page.nodes[1].is_none());
    let error = &page.errors[0];
    assert_eq!(error.node_index(), Some(1));
    assert_eq!(error.node_fields(), vec!["author"]);
    assert_eq!(error.kind.as_deref(), Some("SERVICE_UNAVAILABLE"));
}

#[tokio::test]
async fn a_missing_repository_is_not_found() {
    let server = Scripted::start(vec![ok(json!({
        "data": {"repository": null, "rateLimit": rate_limit(1, 100)},
        "errors": [{"type": "NOT_FOUND", "path": ["repository"],
                    "message": "Could not resolve to a Repository with the name 'acme/gone'."}]
    }))])
    .await;
    let err = server
        .pat_client()
        .pull_requests_page("acme", "gone", 50, None)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(matches!(err, Error::Graphql { ref errors } if errors[0].path.len() == 1));
}

#[tokio::test]
async fn repository_by_node_id_finds_renames_and_answers_none_when_gone() {
    let server = Scripted::start(vec![
        ok(json!({"data": {
            "node": {"__typename": "Repository", "id": "R_1", "databaseId": 77,
                     "nameWithOwner": "new-owner/new-name", "owner": {"login": "new-owner"}},
            "rateLimit": rate_limit(1, 100)
        }})),
        ok(json!({
            "data": {"node": null, "rateLimit": rate_limit(1, 99)},
            "errors": [{"type": "NOT_FOUND", "path": ["node"],
                        "message": "Could not resolve to a node with the global id of 'R_2'"}]
        })),
    ])
    .await;
    let client = server.pat_client();
    let found = client.repository_by_node_id("R_1").await.unwrap().unwrap();
    assert_eq!(found.name_with_owner, "new-owner/new-name");
    assert_eq!(client.repository_by_node_id("R_2").await.unwrap(), None);
    let query = server.seen()[0].body.as_ref().unwrap()["query"].clone();
    assert!(query.as_str().unwrap().starts_with("query RepositoryById("));
}

#[tokio::test]
async fn repository_by_name_resolves_and_tells_invisible_from_failing() {
    let server = Scripted::start(vec![
        ok(json!({"data": {
            "repository": {"id": "R_1", "databaseId": 77, "nameWithOwner": "acme/widgets",
                           "owner": {"login": "acme"}},
            "rateLimit": rate_limit(1, 100)
        }})),
        ok(json!({
            "data": {"repository": null, "rateLimit": rate_limit(1, 99)},
            "errors": [{"type": "NOT_FOUND", "path": ["repository"],
                        "message": "Could not resolve to a Repository with the name 'victim/private'."}]
        })),
        ok(json!({
            "data": {"repository": null, "rateLimit": rate_limit(1, 98)},
            "errors": [{"type": "INTERNAL", "path": ["repository"], "message": "boom"}]
        })),
    ])
    .await;
    let client = server.pat_client();
    let found = client
        .repository_by_name("acme", "widgets")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.database_id, Some(77));
    assert_eq!(
        client
            .repository_by_name("victim", "private")
            .await
            .unwrap(),
        None
    );
    // An error that is not "not found" is doubt, never "not found".
    let err = client
        .repository_by_name("acme", "gadgets")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Graphql { .. }), "{err}");
    let query = server.seen()[0].body.as_ref().unwrap()["query"].clone();
    assert!(
        query
            .as_str()
            .unwrap()
            .starts_with("query RepositoryByName(")
    );
}

// ---- rate limits and budgets ----

#[tokio::test]
async fn budget_stops_before_the_call_that_would_go_below_it_and_says_why() {
    let mut expensive = issues_page(vec![issue(1)], true, 105);
    expensive["data"]["rateLimit"]["cost"] = json!(3);
    let mut after = issues_page(vec![issue(2)], true, 102);
    after["data"]["rateLimit"]["cost"] = json!(3);
    let server = Scripted::start(vec![ok(expensive), ok(after)]).await;
    let client = server.pat_client().with_budget(Budget::keep(100));

    client.issues_page("acme", "r", 1, None).await.unwrap();
    client
        .issues_page("acme", "r", 1, Some("c2"))
        .await
        .unwrap();
    let err = client
        .issues_page("acme", "r", 1, Some("c3"))
        .await
        .unwrap_err();

    let Error::BudgetExhausted(stop) = &err else {
        panic!("expected a budget stop, got {err}");
    };
    assert_eq!(
        (stop.remaining, stop.expected_cost, stop.min_remaining),
        (102, 3, 100)
    );
    assert_eq!(stop.operation, "RepositoryIssues");
    assert!(err.is_rate_limited());
    assert_eq!(client.last_budget_stop().as_ref(), Some(stop));
    assert_eq!(server.seen().len(), 2, "the refused call was never sent");
}

#[tokio::test]
async fn github_rate_limited_error_stops_and_spends_the_budget() {
    let server = Scripted::start(vec![ok(json!({
        "data": null,
        "errors": [{"type": "RATE_LIMITED", "message": "API rate limit exceeded for installation ID 1."}]
    }))])
    .await;
    let client = server.pat_client().with_budget(Budget::keep(1));
    let err = client.issues_page("acme", "r", 10, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::RateLimited {
                kind: RateLimitKind::Primary,
                ..
            }
        ),
        "{err}"
    );
    // The pool is known to be empty now: the next call is refused without asking GitHub.
    let next = client.issues_page("acme", "r", 10, None).await.unwrap_err();
    assert!(matches!(next, Error::BudgetExhausted(_)), "{next}");
    assert_eq!(server.seen().len(), 1, "RATE_LIMITED is not retried");
}

// ---- retries ----

#[tokio::test]
async fn server_errors_are_retried_then_succeed() {
    let server = Scripted::start(vec![
        status(502, json!({"message": "Bad gateway"})),
        ok(issues_page(vec![issue(1)], false, 10)),
    ])
    .await;
    let page = server
        .pat_client()
        .issues_page("acme", "r", 1, None)
        .await
        .unwrap();
    assert_eq!(page.nodes.len(), 1);
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn server_errors_stop_after_the_bounded_retries() {
    let server = Scripted::start(vec![status(500, json!({"message": "boom"}))]).await;
    let err = server
        .pat_client()
        .issues_page("acme", "r", 1, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Http { status: 500, .. }), "{err}");
    assert_eq!(server.seen().len(), 3, "one attempt and two retries");
}

#[tokio::test]
async fn secondary_limits_are_waited_out_as_retry_after_says() {
    let server = Scripted::start(vec![
        status(
            403,
            json!({"message": "You have exceeded a secondary rate limit."}),
        )
        .header("retry-after", 1),
        ok(issues_page(vec![issue(1)], false, 10)),
    ])
    .await;
    let started = std::time::Instant::now();
    server
        .pat_client()
        .issues_page("acme", "r", 1, None)
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited only {:?}",
        started.elapsed()
    );
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn bad_credentials_and_missing_objects_are_not_retried() {
    let server = Scripted::start(vec![status(401, json!({"message": "Bad credentials"}))]).await;
    let err = server
        .pat_client()
        .issues_page("acme", "r", 1, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Auth { status: Some(401), ref message } if message == "Bad credentials"),
        "{err}"
    );
    assert_eq!(server.seen().len(), 1);

    let server = Scripted::start(vec![status(404, json!({"message": "Not Found"}))]).await;
    assert_eq!(server.pat_client().repository_by_id(9).await.unwrap(), None);
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn a_spent_rest_pool_is_primary_rate_limited_and_not_retried() {
    let reset = time::OffsetDateTime::now_utc().unix_timestamp() + 600;
    let server = Scripted::start(vec![
        status(403, json!({"message": "API rate limit exceeded"}))
            .header("x-ratelimit-remaining", 0)
            .header("x-ratelimit-reset", reset),
    ])
    .await;
    let client = server.pat_client();
    let err = client.repository_by_id(1).await.unwrap_err();
    assert!(
        matches!(err, Error::RateLimited { kind: RateLimitKind::Primary, reset_at: Some(at), .. } if at.unix_timestamp() == reset),
        "{err}"
    );
    assert_eq!(server.seen().len(), 1);
    assert!(matches!(
        client.repository_by_id(1).await.unwrap_err(),
        Error::BudgetExhausted(_)
    ));
}

// ---- REST ----

#[tokio::test]
async fn installation_repositories_follow_the_link_header() {
    let reset = time::OffsetDateTime::now_utc().unix_timestamp() + 600;
    let server = Scripted::start(vec![
        ok(json!({"total_count": 101, "repositories": [
            {"id": 1, "node_id": "R_1", "name": "a", "full_name": "acme/a", "owner": {"login": "acme"}}
        ]}))
        .header(
            "link",
            "<http://x/installation/repositories?per_page=100&page=2>; rel=\"next\", <http://x/installation/repositories?per_page=100&page=2>; rel=\"last\"",
        )
        .header("x-ratelimit-remaining", 4321)
        .header("x-ratelimit-reset", reset),
    ])
    .await;
    let client = server.pat_client();
    let page = client.installation_repositories(1).await.unwrap();
    assert_eq!(page.total_count, 101);
    assert_eq!(page.repositories[0].full_name, "acme/a");
    assert_eq!(page.next_page, Some(2));
    assert_eq!(
        server.seen()[0].path,
        "/installation/repositories?per_page=100&page=1"
    );
    assert_eq!(client.rate_limit(Resource::Rest).unwrap().remaining, 4321);
}

// ---- GitHub App ----

fn token_answer(token: &str, lifetime: time::Duration) -> Canned {
    let expires_at = (time::OffsetDateTime::now_utc() + lifetime)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    status(201, json!({"token": token, "expires_at": expires_at}))
}

fn app_client(server: &Scripted) -> GithubClient {
    let app = GithubApp::new(
        &server.config(),
        AppCredentials::from_pem(4242, PRIVATE).unwrap(),
    )
    .unwrap();
    GithubClient::new(
        &server.config(),
        Auth::Installation {
            app: Arc::new(app),
            installation_id: 99,
        },
    )
    .unwrap()
}

#[tokio::test]
async fn app_installation_token_is_minted_with_a_jwt_and_cached() {
    let server = Scripted::start(vec![
        token_answer("ghs_one", time::Duration::hours(1)),
        ok(issues_page(vec![issue(1)], false, 100)),
    ])
    .await;
    let client = app_client(&server);
    for _ in 0..3 {
        client.issues_page("acme", "r", 1, None).await.unwrap();
    }
    let seen = server.seen();
    assert_eq!(seen.len(), 4, "one token request, three queries");
    assert_eq!(seen[0].method, Method::POST);
    assert_eq!(seen[0].path, "/app/installations/99/access_tokens");
    let jwt = seen[0]
        .authorization
        .as_deref()
        .unwrap()
        .strip_prefix("Bearer ")
        .unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    validation.set_issuer(&["4242"]);
    jsonwebtoken::decode::<AppClaims>(
        jwt,
        &jsonwebtoken::DecodingKey::from_rsa_pem(PUBLIC).unwrap(),
        &validation,
    )
    .expect("the JWT verifies with the App's public key");
    for query in &seen[1..] {
        assert_eq!(query.authorization.as_deref(), Some("Bearer ghs_one"));
    }
}

#[tokio::test]
async fn concurrent_calls_share_one_token_request() {
    let server = Scripted::start(vec![
        token_answer("ghs_one", time::Duration::hours(1)),
        ok(issues_page(vec![issue(1)], false, 100)),
    ])
    .await;
    let client = app_client(&server);
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.issues_page("acme", "r", 1, None).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let token_requests = server
        .seen()
        .iter()
        .filter(|s| s.path.starts_with("/app/"))
        .count();
    assert_eq!(token_requests, 1);
}

#[tokio::test]
async fn a_token_near_expiry_is_renewed_and_a_refused_one_forgotten() {
    // Four minutes left is inside the refresh margin: every call mints anew.
    let server = Scripted::start(vec![
        token_answer("ghs_short", time::Duration::minutes(4)),
        ok(issues_page(vec![issue(1)], false, 100)),
        token_answer("ghs_short", time::Duration::minutes(4)),
        ok(issues_page(vec![issue(1)], false, 100)),
    ])
    .await;
    let client = app_client(&server);
    client.issues_page("acme", "r", 1, None).await.unwrap();
    client.issues_page("acme", "r", 1, None).await.unwrap();
    let mints = server
        .seen()
        .iter()
        .filter(|s| s.path.starts_with("/app/"))
        .count();
    assert_eq!(mints, 2);

    // A long-lived token GitHub refuses (revoked) is dropped: the next call mints a new one.
    let server = Scripted::start(vec![
        token_answer("ghs_revoked", time::Duration::hours(1)),
        status(401, json!({"message": "Bad credentials"})),
        token_answer("ghs_new", time::Duration::hours(1)),
        ok(issues_page(vec![issue(1)], false, 100)),
    ])
    .await;
    let client = app_client(&server);
    let err = client.issues_page("acme", "r", 1, None).await.unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err}");
    client.issues_page("acme", "r", 1, None).await.unwrap();
    let seen = server.seen();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[3].authorization.as_deref(), Some("Bearer ghs_new"));
}

#[tokio::test]
async fn a_pat_client_cannot_mint_installation_tokens() {
    let server = Scripted::start(vec![ok(json!({}))]).await;
    let err = server.pat_client().installation_token(1).await.unwrap_err();
    assert!(matches!(err, Error::Auth { status: None, .. }), "{err}");
    assert!(server.seen().is_empty());
}

// ---- what the client refuses to read or follow ----

#[tokio::test]
async fn a_redirect_is_not_followed_with_credentials_and_is_named() {
    // Where the redirect points: it must never see a request, let alone the token.
    let elsewhere = Scripted::start(vec![ok(issues_page(vec![issue(1)], false, 10))]).await;
    let server = Scripted::start(vec![
        status(307, json!({})).header("location", format!("{}/graphql?token=leak", elsewhere.url)),
    ])
    .await;
    let err = server
        .pat_client()
        .issues_page("acme", "r", 1, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Redirected { status: 307, ref location } if location.as_deref() == Some(&*format!("{}/graphql", elsewhere.url))),
        "{err:?}"
    );
    assert!(err.to_string().contains("redirect"), "{err}");
    assert!(!err.to_string().contains("leak"), "{err}");
    assert_eq!(server.seen().len(), 1, "a redirect is not retried");
    assert!(elsewhere.seen().is_empty(), "the redirect was followed");
}

#[tokio::test]
async fn an_answer_over_the_size_cap_is_refused() {
    let nodes: Vec<Value> = (1..=50).map(issue).collect();
    let server = Scripted::start(vec![ok(issues_page(nodes, false, 10))]).await;
    let config = ClientConfig {
        max_response_bytes: 4 * 1024,
        ..server.config()
    };
    let client = GithubClient::new(&config, Auth::personal_token("pat-1")).unwrap();
    let err = client.issues_page("acme", "r", 50, None).await.unwrap_err();
    assert!(matches!(err, Error::TooLarge { limit: 4096 }), "{err:?}");
    assert!(err.to_string().contains("4096 bytes"), "{err}");
    assert_eq!(server.seen().len(), 1, "an oversized answer is not retried");
}

#[tokio::test]
async fn an_answer_streamed_without_a_length_is_cut_at_the_cap() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A server that streams chunks without Content-Length, well past the cap.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 8192];
        let _ = socket.read(&mut request).await;
        let _ = socket
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
            )
            .await;
        let chunk = format!("400\r\n{}\r\n", " ".repeat(0x400));
        for _ in 0..64 {
            if socket.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
        }
        let _ = socket.write_all(b"0\r\n\r\n").await;
    });
    let config = ClientConfig {
        max_response_bytes: 8 * 1024,
        retry: RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        },
        ..ClientConfig::new(&url).with_egress(Egress::unrestricted())
    };
    let client = GithubClient::new(&config, Auth::personal_token("pat-1")).unwrap();
    let err = client.issues_page("acme", "r", 1, None).await.unwrap_err();
    assert!(matches!(err, Error::TooLarge { limit: 8192 }), "{err:?}");
}

/// A tenant's server URL naming an internal address, as an address or as a name that resolves
/// to one, is never connected to: the call fails as "vendor unreachable", nothing is sent, and
/// it is not retried. The operator's allowed range lets it through.
#[tokio::test]
async fn internal_addresses_are_unreachable_unless_the_operator_allows_them() {
    let server = Scripted::start(vec![ok(issues_page(vec![issue(1)], false, 10))]).await;
    let port = server.url.rsplit(':').next().unwrap().to_owned();
    for base in [
        server.url.clone(),
        format!("http://localhost:{port}"),
        format!("http://[::ffff:127.0.0.1]:{port}"),
    ] {
        let config = ClientConfig {
            retry: server.config().retry,
            ..ClientConfig::new(&base)
        };
        let client = GithubClient::new(&config, Auth::personal_token("pat-1")).unwrap();
        let err = client.issues_page("acme", "r", 50, None).await.unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, Error::Unreachable(_)) && text.contains("vendor unreachable"),
            "{base}: {err:?}"
        );
        assert!(
            !text.contains("127.0.0.1"),
            "{base}: the address reached the error: {text}"
        );
    }
    assert!(server.seen().is_empty(), "an internal address was reached");
    let allowed = ClientConfig {
        retry: server.config().retry,
        ..ClientConfig::new(format!("http://localhost:{port}"))
            .with_egress(Egress::allowing("127.0.0.0/8,::1/128").unwrap())
    };
    let client = GithubClient::new(&allowed, Auth::personal_token("pat-1")).unwrap();
    client.issues_page("acme", "r", 50, None).await.unwrap();
    assert_eq!(server.seen().len(), 1);
}

/// A server that answers every page of the installation's repositories with a `next` link: the
/// listing ends at its page cap as incomplete, having asked for no more pages than the cap; a
/// listing longer than the total it states ends as incomplete too.
#[tokio::test]
async fn an_endless_installation_listing_ends_at_its_cap_as_incomplete() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let asked = Arc::new(AtomicU32::new(0));
    let total = Arc::new(AtomicU32::new(1_000_000));
    let (seen, stated) = (asked.clone(), total.clone());
    let app = axum::Router::new().route(
        "/installation/repositories",
        axum::routing::get(
            move |axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>| {
                let (seen, stated) = (seen.clone(), stated.clone());
                async move {
                    seen.fetch_add(1, Ordering::SeqCst);
                    let page: u32 = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
                    let body = json!({"total_count": stated.load(Ordering::SeqCst), "repositories": [
                        {"id": page, "node_id": format!("R_{page}"), "name": format!("r{page}"),
                         "full_name": format!("acme/r{page}"), "owner": {"login": "acme"}}
                    ]});
                    let next = format!(
                        "<http://x/installation/repositories?per_page=100&page={}>; rel=\"next\"",
                        page + 1
                    );
                    ([("link", next)], axum::Json(body))
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = ClientConfig::new(&url).with_egress(Egress::unrestricted());
    let client = GithubClient::new(&config, Auth::personal_token("pat-1")).unwrap();

    let err = client.installation_repositories_all(50).await.unwrap_err();
    assert!(matches!(err, Error::Incomplete { .. }), "{err:?}");
    assert!(err.to_string().contains("50 pages"), "{err}");
    assert_eq!(asked.load(Ordering::SeqCst), 50, "read past its cap");

    total.store(3, Ordering::SeqCst);
    asked.store(0, Ordering::SeqCst);
    let err = client.installation_repositories_all(50).await.unwrap_err();
    assert!(
        err.to_string().contains("more repositories than the 3"),
        "{err}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 4);
}
