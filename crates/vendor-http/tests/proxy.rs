//! A proxy named in the environment would resolve a tenant's host where the egress policy
//! cannot see it: a restricted client never uses one. The environment can only be set for a
//! process of its own, so the test runs itself again in a child with `HTTP_PROXY` pointing at a
//! listener that records every connection.

use std::process::Command;
use std::time::Duration;

use vendor_http::egress::Egress;

const CHILD: &str = "VENDOR_HTTP_PROXY_TEST_CHILD";

#[tokio::test]
async fn a_restricted_client_never_hands_a_host_to_an_environment_proxy() {
    if std::env::var(CHILD).is_ok() {
        return child().await;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    listener.set_nonblocking(true).expect("non-blocking");
    let proxy = format!("http://{}", listener.local_addr().expect("its address"));
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "a_restricted_client_never_hands_a_host_to_an_environment_proxy",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("HTTP_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .env("ALL_PROXY", &proxy)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        listener.accept().is_err(),
        "the request went to the environment's proxy"
    );
}

/// In the child: a request for a name the guarded resolver must see first.
async fn child() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = Egress::public_only()
        .apply(reqwest::Client::builder().timeout(Duration::from_secs(5)))
        .build()
        .expect("a client");
    let sent = client
        .get("http://metadata.forgesync-egress-test.invalid/latest")
        .send()
        .await;
    assert!(sent.is_err(), "the name resolves nowhere: {sent:?}");
}
