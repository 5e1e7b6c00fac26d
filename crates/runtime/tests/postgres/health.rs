//! `/healthz`, `/readyz` and `/metrics`.

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use tower::ServiceExt as _;

use testkit::TestDb;

async fn nats() -> async_nats::Client {
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    async_nats::connect(url)
        .await
        .expect("NATS must be running for these tests")
}

async fn get(router: &axum::Router, path: &str) -> (StatusCode, String) {
    let response = router
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_when_postgres_nats_and_migrations_are() {
    let test = TestDb::new().await.unwrap();
    let router = runtime::health::router(runtime::HealthState {
        db: test.db.clone(),
        nats: Some(nats().await),
        tasks: Default::default(),
    });
    assert_eq!(
        get(&router, "/healthz").await,
        (StatusCode::OK, "ok".into())
    );
    let (status, body) = get(&router, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    metrics::counter!("runtime_health_test_total").increment(1);
    let (status, body) = get(&router, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("runtime_health_test_total"), "{body}");
    test.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_names_pending_migrations() {
    let test = TestDb::empty().await.unwrap();
    let router = runtime::health::router(runtime::HealthState {
        db: test.db.clone(),
        nats: Some(nats().await),
        tasks: Default::default(),
    });
    assert_eq!(get(&router, "/healthz").await.0, StatusCode::OK);
    let (status, body) = get(&router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(body["failed"]["migrations"].is_string(), "{body}");
    assert!(body["failed"].get("postgres").is_none(), "{body}");
    assert!(body["failed"].get("nats").is_none(), "{body}");
    test.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_names_an_unreachable_database() {
    let test = TestDb::new().await.unwrap();
    let router = runtime::health::router(runtime::HealthState {
        db: test.db.clone(),
        nats: Some(nats().await),
        tasks: Default::default(),
    });
    test.db.clone().close().await.unwrap();
    let (status, body) = get(&router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(body["failed"]["postgres"].is_string(), "{body}");
    test.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_ahead_of_this_binary_is_still_ready() {
    use sea_orm::ConnectionTrait as _;
    let test = TestDb::new().await.unwrap();
    // A newer release migrated first (rolling upgrade): this older replica stays ready.
    test.db
        .execute_unprepared(
            "INSERT INTO seaql_migrations (version, applied_at) VALUES ('m9999_from_the_future', 0)",
        )
        .await
        .unwrap();
    let router = runtime::health::router(runtime::HealthState {
        db: test.db.clone(),
        nats: Some(nats().await),
        tasks: Default::default(),
    });
    let (status, body) = get(&router, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    test.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_once_a_supervised_task_ended() {
    let test = TestDb::new().await.unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut sup = runtime::Supervisor::new(&shutdown);
    let router = runtime::health::router(runtime::HealthState {
        db: test.db.clone(),
        nats: None,
        tasks: sup.readiness(),
    });
    sup.spawn("outbox relay", |_| async { anyhow::bail!("lost") });
    let err = sup
        .run(std::time::Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("outbox relay"), "{err}");
    let (status, body) = get(&router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        body["failed"]["tasks"]
            .as_str()
            .unwrap()
            .contains("outbox relay"),
        "{body}"
    );
    test.drop().await;
}

/// The status code of `GET path` on `addr`, over a plain HTTP/1.0 connection.
async fn status_at(addr: std::net::SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    // "HTTP/1.0 200 OK"
    response[9..12].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_listener_keeps_health_and_metrics_off_the_api_port() {
    let test = TestDb::new().await.unwrap();
    let nats_url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let mut common = testkit::common_args(&test.url, &nats_url, None);
    let health_addr = {
        // A port that was free a moment ago; nothing else in this test binds one.
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    common.health_listen = Some(health_addr);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut service = runtime::Service::new("health-test", &common, &shutdown);
    service.routes(axum::Router::new().route("/api", axum::routing::get(|| async { "api" })));
    let (tx, rx) = tokio::sync::oneshot::channel();
    let db = test.db.clone();
    let server = tokio::spawn(async move {
        service
            .serve(&db, Some(nats().await), move |addr| {
                let _ = tx.send(addr);
            })
            .await
    });
    let api_addr = rx.await.unwrap();

    assert_eq!(status_at(api_addr, "/api").await, 200);
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            status_at(api_addr, path).await,
            404,
            "{path} on the API port"
        );
        assert_eq!(
            status_at(health_addr, path).await,
            200,
            "{path} on the health port"
        );
    }
    assert_eq!(status_at(health_addr, "/api").await, 404);

    shutdown.cancel();
    server.await.unwrap().unwrap();
    test.drop().await;
}
