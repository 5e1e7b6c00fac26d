//! The App's webhook delivery log against the simulated GitHub: listing newest first across
//! cursor pages, redelivery of an attempt, and the App JWT both calls need.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use github_client::{AppCredentials, ClientConfig, Error, GithubApp, RetryPolicy};
use serde_json::json;
use vendor_http::egress::Egress;
use vendor_sim::github::webhook::Delivery;
use vendor_sim::github::{Fault, FaultKind, GithubSim, Model, ops};

const PRIVATE: &[u8] = include_bytes!("fixtures/test-app-key.pem");
const SECRET: &[u8] = b"hook-secret";

/// A receiver that answers every delivery with `status` and keeps the guids it saw.
async fn receiver(status: StatusCode) -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = seen.clone();
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let seen = state.clone();
        async move {
            if let Some(guid) = headers.get("x-github-delivery") {
                seen.lock()
                    .unwrap()
                    .push(guid.to_str().unwrap_or_default().to_owned());
            }
            status
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

async fn sim() -> GithubSim {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut model = Model::new();
    model.set_app_id("4242");
    GithubSim::start(model).await.unwrap()
}

fn app(sim: &GithubSim, app_id: u64) -> GithubApp {
    let config = ClientConfig {
        retry: RetryPolicy {
            max_retries: 2,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
            max_retry_after: Duration::from_secs(1),
            deadline: vendor_http::DEFAULT_CALL_DEADLINE,
        },
        ..ClientConfig::new(sim.base_url()).with_egress(Egress::unrestricted())
    };
    GithubApp::new(&config, AppCredentials::from_pem(app_id, PRIVATE).unwrap()).unwrap()
}

fn issue_event(n: u64) -> Delivery {
    Delivery::new(
        "issues",
        &json!({"action": "opened", "issue": {"number": n}, "installation": {"id": 7}, "repository": {"id": 9}}),
    )
}

#[tokio::test]
async fn deliveries_are_listed_newest_first_across_cursor_pages() {
    let sim = sim().await;
    let (url, _) = receiver(StatusCode::OK).await;
    sim.set_webhook_target(&url, SECRET);
    let mut sent = Vec::new();
    let now = time::OffsetDateTime::now_utc();
    // 150 attempts, one a second apart, the newest last: two pages of 100.
    for i in 0..150u64 {
        let delivery = issue_event(i);
        let at = now - time::Duration::seconds(150 - i as i64);
        assert_eq!(sim.deliver_at(&delivery, at).await, 200);
        sent.push(delivery.delivery_id);
    }
    let app = app(&sim, 4242);

    let first = app.hook_deliveries(None).await.unwrap();
    assert_eq!(first.deliveries.len(), 100);
    let cursor = first.next_cursor.clone().expect("a second page");
    let second = app.hook_deliveries(Some(&cursor)).await.unwrap();
    assert_eq!(second.deliveries.len(), 50);
    assert_eq!(second.next_cursor, None);

    let listed: Vec<_> = first
        .deliveries
        .iter()
        .chain(&second.deliveries)
        .map(|d| d.guid.clone())
        .collect();
    let newest_first: Vec<_> = sent.iter().rev().cloned().collect();
    assert_eq!(listed, newest_first);
    let newest = &first.deliveries[0];
    assert_eq!(newest.event, "issues");
    assert_eq!(newest.action.as_deref(), Some("opened"));
    assert_eq!(newest.installation_id, Some(7));
    assert_eq!(newest.repository_id, Some(9));
    assert!(newest.succeeded() && !newest.redelivery);
}

#[tokio::test]
async fn a_redelivery_resends_the_same_guid_and_is_listed_as_its_own_attempt() {
    let sim = sim().await;
    // Nothing listens on the target yet: the first attempt fails with status 0.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/webhooks", l.local_addr().unwrap())
    };
    sim.set_webhook_target(&closed, SECRET);
    let delivery = issue_event(1);
    assert_eq!(sim.deliver(&delivery).await, 0);
    let app = app(&sim, 4242);
    let page = app.hook_deliveries(None).await.unwrap();
    let failed = &page.deliveries[0];
    assert_eq!((failed.status_code, failed.succeeded()), (0, false));

    let (url, seen) = receiver(StatusCode::OK).await;
    sim.set_webhook_target(&url, SECRET);
    app.redeliver(failed.id).await.unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sim.delivery_attempts(&delivery.delivery_id).len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no redelivery");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        *seen.lock().unwrap(),
        std::slice::from_ref(&delivery.delivery_id)
    );
    let page = app.hook_deliveries(None).await.unwrap();
    assert_eq!(page.deliveries.len(), 2);
    let retry = &page.deliveries[0];
    assert_eq!(retry.guid, delivery.delivery_id);
    assert!(retry.redelivery && retry.succeeded());
    assert_ne!(retry.id, failed.id);
}

#[tokio::test]
async fn the_delivery_log_needs_the_apps_jwt_and_a_known_attempt() {
    let sim = sim().await;
    let stranger = app(&sim, 1);
    assert!(matches!(
        stranger.hook_deliveries(None).await,
        Err(Error::Auth {
            status: Some(401),
            ..
        })
    ));
    assert!(matches!(
        stranger.redeliver(1).await,
        Err(Error::Auth {
            status: Some(401),
            ..
        })
    ));
    assert!(matches!(
        app(&sim, 4242).redeliver(123).await,
        Err(Error::Http { status: 404, .. })
    ));
}

#[tokio::test]
async fn listing_and_redelivery_are_retried_by_the_policy() {
    let sim = sim().await;
    sim.inject(Fault::nth(
        ops::LIST_APP_HOOK_DELIVERIES,
        1,
        FaultKind::Status(502),
    ));
    let app = app(&sim, 4242);
    assert!(
        app.hook_deliveries(None)
            .await
            .unwrap()
            .deliveries
            .is_empty()
    );
    assert_eq!(sim.calls(ops::LIST_APP_HOOK_DELIVERIES), 2);

    sim.set_webhook_target("http://127.0.0.1:9/closed", SECRET);
    sim.deliver(&issue_event(1)).await;
    let id = app.hook_deliveries(None).await.unwrap().deliveries[0].id;
    sim.inject(Fault::nth(
        ops::REDELIVER_APP_HOOK_DELIVERY,
        1,
        FaultKind::Status(503),
    ));
    app.redeliver(id).await.unwrap();
    assert_eq!(sim.calls(ops::REDELIVER_APP_HOOK_DELIVERY), 2);
}
