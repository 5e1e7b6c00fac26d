//! Helpers shared by the end-to-end suites: the fixture every GitHub App stack signs in with, one
//! way to call a service's JSON API, and one way to wait for what a service does in the
//! background.
#![forbid(unsafe_code)]

use std::future::Future;
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

/// The GitHub App's private key the simulator trusts (github-client's test fixture).
pub const APP_KEY: &[u8] =
    include_bytes!("../crates/github-client/tests/fixtures/test-app-key.pem");

/// Sends `request`; returns the status and the JSON answer (`Null` when it is not JSON).
pub async fn send_json(request: reqwest::RequestBuilder) -> Result<(u16, Value)> {
    let res = request.send().await?;
    Ok((
        res.status().as_u16(),
        res.json().await.unwrap_or(Value::Null),
    ))
}

/// Polls `probe` every 100 ms until it yields a value; fails the test, saying `what` did not
/// happen, after two minutes.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(found) = probe().await? {
            return Ok(found);
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
