//! The simulated Outline over real HTTP: listings paged to their empty end, `documents.info`
//! on deleted documents, each fault kind, webhook subscriptions (a lost create answer leaving
//! the subscription behind), signed deliveries checked as ingress checks them, duplicated and
//! reordered deliveries, and the admin routes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{KeyInit as _, Mac as _};
use serde_json::{Value as Json, json};
use vendor_sim::outline::{
    Change, DeliveryPlan, Fault, Model, NewDocument, Order, OutlineFault, OutlineSim, RateLimit,
    methods,
};

const TOKEN: &str = "ol_api_test";
const SECRET: &str = "subscription-secret";

/// A team with a token and two collections: `docs` with `n` documents created a second apart
/// (oldest first in `ids`), `other` with one.
struct Fixture {
    sim: OutlineSim,
    docs: String,
    other: String,
    ids: Vec<String>,
    stray: String,
    http: reqwest::Client,
}

async fn fixture(n: usize) -> Fixture {
    let mut m = Model::new("acme");
    m.add_token(TOKEN);
    m.set_clock(time::macros::datetime!(2026-11-01 09:00 UTC));
    let docs = m.add_collection("Docs");
    let other = m.add_collection("Other");
    let mut ids = Vec::new();
    for i in 0..n {
        m.advance_clock(Duration::from_secs(1));
        let id = m
            .add_document(NewDocument::new(&docs, &format!("Doc {i}")).text("body"))
            .unwrap();
        ids.push(id);
    }
    let stray = m
        .add_document(NewDocument::new(&other, "Elsewhere"))
        .unwrap();
    Fixture {
        sim: OutlineSim::start(m).await.unwrap(),
        docs,
        other,
        ids,
        stray,
        http: reqwest::Client::new(),
    }
}

#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Json,
}

impl Fixture {
    async fn call(&self, method: &str, body: Json) -> Answer {
        self.call_as(Some(TOKEN), method, body).await
    }

    async fn call_as(&self, token: Option<&str>, method: &str, body: Json) -> Answer {
        let mut r = self
            .http
            .post(format!("{}{method}", self.sim.api_url()))
            .json(&body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let r = r.send().await.unwrap();
        let status = r.status();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap();
        Answer {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Json::String(text)),
        }
    }

    async fn admin(&self, action: &str, body: Json) -> Answer {
        let r = self
            .http
            .post(format!("{}/_admin/{action}", self.sim.base_url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let headers = r.headers().clone();
        Answer {
            status,
            headers,
            body: r.json().await.unwrap(),
        }
    }

    /// The ids of `docs` read to the empty page, `limit` at a time, by `createdAt` ascending;
    /// the size of each page.
    async fn list_all(&self, limit: usize) -> (Vec<String>, Vec<usize>) {
        let mut ids = Vec::new();
        let mut sizes = Vec::new();
        let mut offset = 0;
        loop {
            let a = self
                .call(
                    methods::DOCUMENTS_LIST,
                    json!({ "collectionId": self.docs, "sort": "createdAt", "direction": "ASC",
                            "offset": offset, "limit": limit }),
                )
                .await;
            assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
            let page = a.body["data"].as_array().unwrap().clone();
            sizes.push(page.len());
            if page.is_empty() {
                return (ids, sizes);
            }
            ids.extend(page.iter().map(|d| d["id"].as_str().unwrap().to_owned()));
            offset += limit;
        }
    }
}

fn ids_of(a: &Answer) -> Vec<String> {
    a.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect()
}

// ---- the API's shapes

#[tokio::test]
async fn auth_info_names_the_team_and_a_missing_or_unknown_token_is_401() {
    let f = fixture(0).await;
    let a = f.call(methods::AUTH_INFO, json!({})).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body["ok"], true);
    assert_eq!(a.body["data"]["team"]["name"], "acme");
    assert!(a.body["data"]["user"]["id"].is_string());

    for token in [None, Some("nope")] {
        let a = f.call_as(token, methods::AUTH_INFO, json!({})).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED);
        assert_eq!(a.body["ok"], false);
        assert_eq!(a.body["error"], "authentication_required");
    }
    f.sim.model(|m| m.revoke_token(TOKEN));
    let a = f.call(methods::COLLECTIONS_LIST, json!({})).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert_eq!(f.sim.calls(methods::COLLECTIONS_LIST), 1);
}

#[tokio::test]
async fn documents_list_pages_to_an_empty_page_with_a_next_path_on_every_page() {
    let f = fixture(7).await;
    let (ids, sizes) = f.list_all(3).await;
    assert_eq!(
        ids, f.ids,
        "createdAt ascending, only the collection's documents"
    );
    assert_eq!(sizes, vec![3, 3, 1, 0]);
    let last = f
        .call(
            methods::DOCUMENTS_LIST,
            json!({ "collectionId": f.docs, "offset": 9, "limit": 3 }),
        )
        .await;
    assert_eq!(last.body["data"], json!([]));
    assert_eq!(
        last.body["pagination"],
        json!({ "offset": 9, "limit": 3, "nextPath": "/api/documents.list?limit=3&offset=12" })
    );
    assert!(last.body["pagination"].get("total").is_none());

    // By default: every collection, updatedAt descending, 25 a page.
    f.sim
        .model(|m| m.update_document(&f.ids[2], Some("Touched"), None))
        .unwrap();
    let a = f.call(methods::DOCUMENTS_LIST, json!({})).await;
    let listed = ids_of(&a);
    assert_eq!(listed.len(), 8);
    assert_eq!(listed[0], f.ids[2]);
    assert!(listed.contains(&f.stray));
    assert_eq!(a.body["pagination"]["limit"], 25);
    assert_eq!(a.body["policies"].as_array().unwrap().len(), 8);
    let doc = &a.body["data"][0];
    for field in [
        "urlId",
        "title",
        "text",
        "collectionId",
        "parentDocumentId",
        "createdAt",
        "updatedAt",
        "publishedAt",
        "archivedAt",
        "deletedAt",
    ] {
        assert!(doc.get(field).is_some(), "{field} missing: {doc}");
    }
    assert_eq!(doc["title"], "Touched");
    assert!(doc["updatedAt"].as_str().unwrap().ends_with('Z'));

    // Bounds and filters.
    let a = f
        .call(methods::DOCUMENTS_LIST, json!({ "limit": 101 }))
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.body["error"], "validation_error");
    let a = f
        .call(
            methods::DOCUMENTS_LIST,
            json!({ "filters": [{ "field": "collectionId", "operator": "eq", "value": f.other }] }),
        )
        .await;
    assert_eq!(ids_of(&a), vec![f.stray.clone()]);
    let a = f
        .call(
            methods::DOCUMENTS_LIST,
            json!({ "collectionId": uuid::Uuid::new_v4().to_string() }),
        )
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn documents_info_answers_a_soft_deleted_document_with_deleted_at_and_a_gone_one_404() {
    let f = fixture(3).await;
    let a = f
        .call(methods::DOCUMENTS_INFO, json!({ "id": f.ids[0] }))
        .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body["data"]["deletedAt"], Json::Null);
    let url_id = a.body["data"]["urlId"].as_str().unwrap().to_owned();
    let by_url = f
        .call(methods::DOCUMENTS_INFO, json!({ "id": url_id }))
        .await;
    assert_eq!(by_url.body["data"]["id"], f.ids[0].as_str());

    f.sim.model(|m| m.delete_document(&f.ids[0])).unwrap();
    let a = f
        .call(methods::DOCUMENTS_INFO, json!({ "id": f.ids[0] }))
        .await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.body["data"]["deletedAt"].is_string());
    let (listed, _) = f.list_all(25).await;
    assert!(
        !listed.contains(&f.ids[0]),
        "a deleted document is not listed"
    );

    // Archived: not listed, still found.
    f.sim.model(|m| m.archive_document(&f.ids[1])).unwrap();
    let (listed, _) = f.list_all(25).await;
    assert_eq!(listed, vec![f.ids[2].clone()]);
    let a = f
        .call(methods::DOCUMENTS_INFO, json!({ "id": f.ids[1] }))
        .await;
    assert!(a.body["data"]["archivedAt"].is_string());

    f.sim
        .model(|m| m.permanently_delete_document(&f.ids[0]))
        .unwrap();
    for id in [f.ids[0].clone(), uuid::Uuid::new_v4().to_string()] {
        let a = f.call(methods::DOCUMENTS_INFO, json!({ "id": id })).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND);
        assert_eq!(a.body["error"], "not_found");
        assert_eq!(a.body["ok"], false);
    }
}

#[tokio::test]
async fn collections_list_and_info_leave_a_deleted_collection_out() {
    let f = fixture(2).await;
    let a = f
        .call(methods::COLLECTIONS_LIST, json!({ "limit": 1 }))
        .await;
    assert_eq!(ids_of(&a), vec![f.docs.clone()]);
    let a = f
        .call(
            methods::COLLECTIONS_LIST,
            json!({ "limit": 1, "offset": 1 }),
        )
        .await;
    assert_eq!(ids_of(&a), vec![f.other.clone()]);
    let a = f
        .call(
            methods::COLLECTIONS_LIST,
            json!({ "limit": 1, "offset": 2 }),
        )
        .await;
    assert_eq!(a.body["data"], json!([]));

    f.sim.model(|m| m.delete_collection(&f.other)).unwrap();
    let a = f.call(methods::COLLECTIONS_LIST, json!({})).await;
    assert_eq!(ids_of(&a), vec![f.docs.clone()]);
    let a = f
        .call(methods::COLLECTIONS_INFO, json!({ "id": f.other }))
        .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let a = f
        .call(methods::COLLECTIONS_INFO, json!({ "id": f.docs }))
        .await;
    assert_eq!(a.body["data"]["name"], "Docs");
    // Its documents went with it.
    let a = f
        .call(methods::DOCUMENTS_INFO, json!({ "id": f.stray }))
        .await;
    assert!(a.body["data"]["deletedAt"].is_string());
}

// ---- faults

#[tokio::test]
async fn rate_limited_call_answers_429_with_retry_after_then_succeeds() {
    let f = fixture(1).await;
    f.sim.inject(Fault::nth(
        methods::DOCUMENTS_LIST,
        1,
        OutlineFault::RateLimited { retry_after: 7 },
    ));
    let a = f.call(methods::DOCUMENTS_LIST, json!({})).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.headers["retry-after"], "7");
    assert_eq!(a.body["error"], "rate_limit_exceeded");
    let a = f.call(methods::DOCUMENTS_LIST, json!({})).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(f.sim.calls(methods::DOCUMENTS_LIST), 2);
}

#[tokio::test]
async fn the_rate_limiter_counts_calls_per_key_and_answers_429_past_the_limit() {
    let f = fixture(1).await;
    f.sim.model(|m| {
        m.rate_limit = Some(RateLimit {
            limit: 2,
            window: Duration::from_millis(400),
        })
    });
    let a = f.call(methods::AUTH_INFO, json!({})).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.headers["ratelimit-limit"], "2");
    assert_eq!(a.headers["ratelimit-remaining"], "1");
    assert!(a.headers.contains_key("ratelimit-reset"));
    let a = f.call(methods::AUTH_INFO, json!({})).await;
    assert_eq!(a.headers["ratelimit-remaining"], "0");
    let a = f.call(methods::DOCUMENTS_LIST, json!({})).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    // What is left of the window, in seconds with milliseconds as Outline writes it (not
    // rounded up to a whole second): a client must read the fraction.
    let wait = a.headers["retry-after"].to_str().unwrap();
    let seconds: f64 = wait.parse().unwrap();
    assert!(seconds > 0.0 && seconds <= 0.4, "{wait}");
    assert!(wait.starts_with("0."), "{wait}");
    assert_eq!(a.body["error"], "rate_limit_exceeded");
    // A refused key is not counted, and the next window starts afresh.
    let a = f.call_as(Some("nope"), methods::AUTH_INFO, json!({})).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    tokio::time::sleep(Duration::from_millis(450)).await;
    let a = f.call(methods::AUTH_INFO, json!({})).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.headers["ratelimit-remaining"], "1");
}

#[tokio::test]
async fn server_errors_answer_their_status_and_do_nothing() {
    let f = fixture(1).await;
    f.sim.inject(Fault::nth(
        methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
        1,
        OutlineFault::Status(503),
    ));
    f.sim.inject(Fault::nth(
        methods::DOCUMENTS_INFO,
        1,
        OutlineFault::Status(500),
    ));
    let a = f
        .call(
            methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
            json!({ "name": "x", "url": "http://127.0.0.1:9/", "events": ["documents"] }),
        )
        .await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(f.sim.model(|m| m.subscriptions().count()), 0);
    let a = f
        .call(methods::DOCUMENTS_INFO, json!({ "id": f.ids[0] }))
        .await;
    assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(a.body["error"], "internal_server_error");
}

#[tokio::test]
async fn a_slow_call_is_answered_after_its_delay() {
    let f = fixture(1).await;
    f.sim.inject(Fault::nth(
        methods::COLLECTIONS_LIST,
        1,
        OutlineFault::Delay(Duration::from_millis(300)),
    ));
    let started = Instant::now();
    let a = f.call(methods::COLLECTIONS_LIST, json!({})).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn a_short_page_mid_listing_is_followed_by_more() {
    let f = fixture(7).await;
    f.sim.inject(Fault::nth(
        methods::DOCUMENTS_LIST,
        1,
        OutlineFault::ShortPage { keep: 1 },
    ));
    let (ids, sizes) = f.list_all(3).await;
    assert_eq!(sizes, vec![1, 3, 1, 0], "a short page, then full ones");
    // Following `nextPath` skips what the short page left out.
    assert_eq!(ids.len(), 5);
    assert!(!ids.contains(&f.ids[1]) && !ids.contains(&f.ids[2]));
}

#[tokio::test]
async fn documents_created_deleted_or_moved_between_pages_shift_the_listing() {
    let f = fixture(6).await;
    // Before page 2: one created, one deleted from page 1, one moved away from page 2.
    let created = Arc::new(Mutex::new(None));
    let seen = created.clone();
    let docs = f.docs.clone();
    f.sim.inject(Fault::nth(
        methods::DOCUMENTS_LIST,
        2,
        OutlineFault::Change(vec![
            Change::DeleteDocument {
                id: f.ids[0].clone(),
            },
            Change::MoveDocument {
                id: f.ids[4].clone(),
                collection_id: f.other.clone(),
                parent_document_id: None,
            },
        ]),
    ));
    f.sim.inject(Fault::nth(
        methods::DOCUMENTS_LIST,
        2,
        OutlineFault::mutate(move |m| {
            let id = m.add_document(NewDocument::new(&docs, "Late")).unwrap();
            *seen.lock().unwrap() = Some(id);
        }),
    ));
    let (ids, _) = f.list_all(3).await;
    let late = created.lock().unwrap().clone().unwrap();
    // Page 1 had 0,1,2; the deletion shifts 3 onto offset 2 where it is never read, and 4 left.
    assert_eq!(
        ids,
        vec![
            f.ids[0].clone(),
            f.ids[1].clone(),
            f.ids[2].clone(),
            f.ids[5].clone(),
            late.clone()
        ]
    );
    assert!(!ids.contains(&f.ids[3]), "a shifted document is skipped");
    let moved = f
        .call(methods::DOCUMENTS_INFO, json!({ "id": f.ids[4] }))
        .await;
    assert_eq!(moved.body["data"]["collectionId"], f.other.as_str());
    assert_eq!(moved.body["data"]["deletedAt"], Json::Null);
}

#[tokio::test]
async fn a_lost_create_answer_leaves_the_subscription_created() {
    let f = fixture(0).await;
    f.sim.inject(Fault::nth(
        methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
        1,
        OutlineFault::lost_with(502),
    ));
    f.sim.inject(Fault::nth(
        methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
        2,
        OutlineFault::dropped(),
    ));
    let body = |name: &str| {
        json!({ "name": name, "url": "http://127.0.0.1:9/hook", "events": ["documents"],
                "secret": SECRET })
    };
    let a = f
        .call(methods::WEBHOOK_SUBSCRIPTIONS_CREATE, body("forgesync-1"))
        .await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    // The connection drops before the answer is whole.
    let dropped = async {
        let r = f
            .http
            .post(format!(
                "{}{}",
                f.sim.api_url(),
                methods::WEBHOOK_SUBSCRIPTIONS_CREATE
            ))
            .bearer_auth(TOKEN)
            .json(&body("forgesync-2"))
            .send()
            .await?;
        r.json::<Json>().await
    }
    .await;
    assert!(dropped.is_err(), "{dropped:?}");

    let a = f.call(methods::WEBHOOK_SUBSCRIPTIONS_LIST, json!({})).await;
    let mut names: Vec<&str> = a.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, vec!["forgesync-1", "forgesync-2"]);

    // The next create answers whole; delete removes one.
    let a = f
        .call(methods::WEBHOOK_SUBSCRIPTIONS_CREATE, body("forgesync-3"))
        .await;
    assert_eq!(a.status, StatusCode::OK);
    let id = a.body["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(a.body["data"]["events"], json!(["documents"]));
    let a = f
        .call(methods::WEBHOOK_SUBSCRIPTIONS_DELETE, json!({ "id": id }))
        .await;
    assert_eq!(a.body["success"], true);
    let a = f
        .call(methods::WEBHOOK_SUBSCRIPTIONS_DELETE, json!({ "id": id }))
        .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(f.sim.model(|m| m.subscriptions().count()), 2);
}

// ---- deliveries

/// A receiver that records every request and answers 200.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
}

async fn receiver() -> Receiver {
    let got: Arc<Mutex<Vec<(HeaderMap, Bytes)>>> = Arc::default();
    let sink = got.clone();
    let app = Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push((headers, body));
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    Receiver { url, got }
}

impl Receiver {
    fn bodies(&self) -> Vec<Json> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| serde_json::from_slice(b).unwrap())
            .collect()
    }
}

/// Checks `Outline-Signature` the way ingress does (`t=<ms>,s=<hex>`, HMAC over
/// `"<t>.<body>"`), recomputed here.
fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    let Some(header) = headers
        .get("outline-signature")
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mut t = None;
    let mut s = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = Some(v.to_owned()),
            Some(("s", v)) => s = Some(v.to_owned()),
            _ => {}
        }
    }
    let (Some(t), Some(s)) = (t, s) else {
        return false;
    };
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    let age = vendor_sim::outline::unix_ms() - t.parse::<i64>().unwrap();
    hex::encode(mac.finalize().into_bytes()) == s && (0..60_000).contains(&age)
}

async fn subscribe(f: &Fixture, url: &str, events: Json, secret: Option<&str>) -> String {
    let a = f
        .call(
            methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
            json!({ "name": "forgesync", "url": url, "events": events, "secret": secret }),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    a.body["data"]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn deliveries_are_signed_and_reach_only_subscriptions_taking_the_event() {
    let f = fixture(2).await;
    let r = receiver().await;
    let quiet = receiver().await;
    let sub = subscribe(
        &f,
        &r.url,
        json!([
            "documents.update",
            "documents.delete",
            "documents.permanent_delete"
        ]),
        Some(SECRET),
    )
    .await;
    subscribe(&f, &quiet.url, json!(["collections"]), Some("other")).await;

    f.sim
        .model(|m| m.update_document(&f.ids[0], Some("New title"), None))
        .unwrap();
    f.sim
        .model(|m| m.move_document(&f.ids[0], &f.other, None))
        .unwrap();
    f.sim.model(|m| m.delete_document(&f.ids[1])).unwrap();
    f.sim
        .model(|m| m.permanently_delete_document(&f.ids[1]))
        .unwrap();
    f.sim.settle().await;

    let got = r.got.lock().unwrap().clone();
    assert_eq!(got.len(), 3, "the move is not among the events taken");
    for (headers, body) in &got {
        assert!(verify(SECRET, headers, body), "signature checks");
        assert!(!verify("wrong", headers, body));
        assert_eq!(headers["content-type"], "application/json");
    }
    let bodies = r.bodies();
    let events: Vec<&str> = bodies
        .iter()
        .map(|b| b["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        vec![
            "documents.update",
            "documents.delete",
            "documents.permanent_delete"
        ]
    );
    let update = &bodies[0];
    assert_eq!(update["webhookSubscriptionId"], sub.as_str());
    assert!(update["id"].is_string() && update["actorId"].is_string());
    assert!(update["createdAt"].is_string());
    assert_eq!(update["payload"]["id"], f.ids[0].as_str());
    assert_eq!(update["payload"]["model"]["title"], "New title");
    assert!(bodies[1]["payload"]["model"]["deletedAt"].is_string());
    assert_eq!(bodies[2]["payload"]["id"], f.ids[1].as_str());
    assert_eq!(
        bodies[2]["payload"]["model"],
        Json::Null,
        "gone: model null"
    );
    assert!(quiet.got.lock().unwrap().is_empty());

    // A collection event reaches the one that takes `collections`.
    f.sim.model(|m| m.delete_collection(&f.other)).unwrap();
    f.sim.settle().await;
    let b = quiet.bodies();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0]["event"], "collections.delete");
    assert!(b[0]["payload"]["model"]["deletedAt"].is_string());
    assert_eq!(r.got.lock().unwrap().len(), 3);
    assert_eq!(f.sim.deliveries().len(), 4);
    assert!(f.sim.deliveries().iter().all(|d| d.succeeded()));
}

#[tokio::test]
async fn a_subscription_without_a_secret_gets_unsigned_deliveries() {
    let f = fixture(1).await;
    let r = receiver().await;
    subscribe(&f, &r.url, json!(["*"]), None).await;
    f.sim
        .model(|m| m.update_document(&f.ids[0], None, Some("new text")))
        .unwrap();
    f.sim.settle().await;
    let got = r.got.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert!(got[0].0.get("outline-signature").is_none());
}

#[tokio::test]
async fn deliveries_can_be_duplicated_and_reordered() {
    let f = fixture(3).await;
    let r = receiver().await;
    subscribe(&f, &r.url, json!(["documents"]), Some(SECRET)).await;

    f.sim.set_delivery_plan(DeliveryPlan {
        copies: 2,
        ..DeliveryPlan::default()
    });
    f.sim
        .model(|m| m.update_document(&f.ids[0], Some("a"), None))
        .unwrap();
    f.sim.settle().await;
    let bodies = r.bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0], bodies[1], "the same delivery twice");

    // Copies as separate deliveries of one change: new ids, the same event and payload.
    f.sim.set_delivery_plan(DeliveryPlan {
        copies: 3,
        fresh_copy_ids: true,
        ..DeliveryPlan::default()
    });
    f.sim
        .model(|m| m.update_document(&f.ids[1], Some("b"), None))
        .unwrap();
    f.sim.settle().await;
    let copies = r.bodies().split_off(2);
    assert_eq!(copies.len(), 3);
    let mut ids: Vec<&str> = copies.iter().map(|b| b["id"].as_str().unwrap()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3, "each copy its own delivery id");
    assert!(copies.iter().all(|b| b["payload"] == copies[0]["payload"]));
    r.got.lock().unwrap().truncate(2);

    f.sim.set_delivery_plan(DeliveryPlan {
        hold: true,
        ..DeliveryPlan::default()
    });
    for (i, id) in f.ids.iter().enumerate() {
        f.sim
            .model(|m| m.update_document(id, Some(&format!("t{i}")), None))
            .unwrap();
    }
    f.sim.settle().await;
    assert_eq!(f.sim.held(), 3);
    assert_eq!(r.bodies().len(), 2, "held back");
    assert_eq!(f.sim.release(Order::Reversed).await, 3);
    let titles: Vec<String> = r.bodies()[2..]
        .iter()
        .map(|b| b["payload"]["model"]["title"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(titles, vec!["t2", "t1", "t0"]);

    // A delivery sent before can be sent again, freshly signed.
    let first = f.sim.deliveries()[0].delivery_id.clone();
    assert!(f.sim.redeliver(&first).await);
    let got = r.got.lock().unwrap().clone();
    let (headers, body) = got.last().unwrap();
    assert!(verify(SECRET, headers, body));
    assert_eq!(
        serde_json::from_slice::<Json>(body).unwrap()["id"],
        first.as_str()
    );
}

// ---- admin routes

#[tokio::test]
async fn admin_routes_change_the_team_and_deliver_as_asked() {
    let f = fixture(2).await;
    let r = receiver().await;
    let sub = subscribe(
        &f,
        &r.url,
        json!(["documents", "collections"]),
        Some(SECRET),
    )
    .await;

    // A deletion delivers only when asked to.
    let a = f
        .admin(
            "documents.delete",
            json!({ "id": f.ids[0], "deliver": false }),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let a = f
        .admin(
            "documents.delete",
            json!({ "id": f.ids[1], "deliver": true }),
        )
        .await;
    assert_eq!(a.body["ok"], true);
    f.sim.settle().await;
    let bodies = r.bodies();
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0]["event"], "documents.delete");
    assert_eq!(bodies[0]["payload"]["id"], f.ids[1].as_str());
    let a = f
        .call(methods::DOCUMENTS_INFO, json!({ "id": f.ids[0] }))
        .await;
    assert!(
        a.body["data"]["deletedAt"].is_string(),
        "deleted all the same"
    );

    // Seeding, then an update that delivers and moves updatedAt on.
    let c = f
        .admin("collections.create", json!({ "name": "Seeded" }))
        .await;
    let coll = c.body["id"].as_str().unwrap().to_owned();
    let d = f
        .admin(
            "documents.create",
            json!({ "collectionId": coll, "title": "Old", "text": "x",
                    "createdAt": "2026-01-01T00:00:00.000Z", "deliver": false }),
        )
        .await;
    let doc = d.body["id"].as_str().unwrap().to_owned();
    let before = f.call(methods::DOCUMENTS_INFO, json!({ "id": doc })).await;
    assert_eq!(before.body["data"]["createdAt"], "2026-01-01T00:00:00.000Z");
    let a = f
        .admin("documents.update", json!({ "id": doc, "title": "Renamed" }))
        .await;
    assert_eq!(a.status, StatusCode::OK);
    f.sim.settle().await;
    let after = f.call(methods::DOCUMENTS_INFO, json!({ "id": doc })).await;
    assert_eq!(after.body["data"]["title"], "Renamed");
    assert!(after.body["data"]["updatedAt"].as_str() > before.body["data"]["updatedAt"].as_str());
    let events: Vec<String> = r
        .bodies()
        .iter()
        .map(|b| b["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        events,
        vec!["documents.delete", "collections.create", "documents.update"]
    );

    // Move, restore and permanent delete.
    let a = f
        .admin(
            "documents.move",
            json!({ "id": doc, "collectionId": f.docs }),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK);
    f.admin("documents.restore", json!({ "id": f.ids[0] }))
        .await;
    let a = f
        .call(methods::DOCUMENTS_INFO, json!({ "id": f.ids[0] }))
        .await;
    assert_eq!(a.body["data"]["deletedAt"], Json::Null);
    f.admin("documents.permanent_delete", json!({ "id": f.ids[1] }))
        .await;
    let a = f
        .call(methods::DOCUMENTS_INFO, json!({ "id": f.ids[1] }))
        .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let a = f.admin("documents.update", json!({ "id": f.ids[1] })).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(a.body["error"], "not_found");
    f.sim.settle().await;
    let events: Vec<String> = r.bodies()[3..]
        .iter()
        .map(|b| b["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        events,
        vec![
            "documents.move",
            "documents.restore",
            "documents.permanent_delete"
        ]
    );

    // Subscriptions with their secrets, the call log, the deliveries.
    let a = f.admin("webhookSubscriptions.list", json!({})).await;
    assert_eq!(a.body["data"][0]["id"], sub.as_str());
    assert_eq!(a.body["data"][0]["secret"], SECRET);
    let a = f.admin("calls", json!({})).await;
    let methods_called: Vec<&str> = a.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods_called[0], methods::WEBHOOK_SUBSCRIPTIONS_CREATE);
    assert_eq!(a.body["data"][0]["body"]["secret"], SECRET);
    let a = f.admin("deliveries", json!({})).await;
    assert_eq!(a.body["data"].as_array().unwrap().len(), 6);
    assert!(
        a.body["data"][0]["signature"]
            .as_str()
            .unwrap()
            .starts_with("t=")
    );
}

#[tokio::test]
async fn admin_routes_script_faults_and_the_delivery_plan() {
    let f = fixture(5).await;
    let a = f
        .admin(
            "faults.inject",
            json!({ "method": "documents.list", "nth": 1, "kind": "short_page", "keep": 2 }),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    f.admin(
        "faults.inject",
        json!({ "method": "documents.list", "nth": 2, "kind": "change",
                "changes": [{ "change": "create_document", "collectionId": f.docs, "title": "Mid" },
                            { "change": "delete_document", "id": f.ids[4] }] }),
    )
    .await;
    f.admin(
        "faults.inject",
        json!({ "method": "auth.info", "kind": "rate_limited", "retry_after": 3, "first": 1 }),
    )
    .await;
    f.admin(
        "faults.inject",
        json!({ "method": "webhookSubscriptions.create", "nth": 1, "kind": "lost",
                "lost": "status", "status": 504 }),
    )
    .await;

    // Page 1 is cut to 2; before page 2 one document is created and one deleted.
    let (ids, sizes) = f.list_all(3).await;
    assert_eq!(sizes, vec![2, 2, 0]);
    assert_eq!(ids.len(), 4);
    assert_eq!(f.sim.model(|m| m.document_ids_in(&f.docs).len()), 5);
    let a = f.call(methods::AUTH_INFO, json!({})).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.headers["retry-after"], "3");
    assert_eq!(
        f.call(methods::AUTH_INFO, json!({})).await.status,
        StatusCode::OK
    );
    let a = f
        .call(
            methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
            json!({ "name": "lost", "url": "http://127.0.0.1:9/", "events": ["documents"] }),
        )
        .await;
    assert_eq!(a.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(f.sim.model(|m| m.subscriptions().count()), 1);

    f.admin("faults.clear", json!({})).await;
    let (_, sizes) = f.list_all(3).await;
    assert_eq!(sizes, vec![3, 2, 0]);

    // Held deliveries released shuffled over HTTP.
    let r = receiver().await;
    subscribe(&f, &r.url, json!(["documents.update"]), Some(SECRET)).await;
    f.admin("deliveries.plan", json!({ "hold": true })).await;
    for id in &f.ids[..4] {
        f.admin("documents.update", json!({ "id": id, "title": id }))
            .await;
    }
    f.sim.settle().await;
    let a = f
        .admin(
            "deliveries.release",
            json!({ "order": "shuffled", "seed": 7 }),
        )
        .await;
    // Four for the receiver, four for the subscription whose create answer was lost.
    assert_eq!(a.body["released"], 8);
    let mut titles: Vec<String> = r
        .bodies()
        .iter()
        .map(|b| b["payload"]["model"]["title"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(titles.len(), 4);
    titles.sort();
    let mut want = f.ids[..4].to_vec();
    want.sort();
    assert_eq!(titles, want);
}
