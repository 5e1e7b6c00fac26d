//! Graceful shutdown on SIGTERM or SIGINT.
//!
//! The contract every worker follows once the token is canceled:
//! 1. stop taking work (no new fetches from consumers, no new schedule claims, stop accepting
//!    connections);
//! 2. finish what is in flight within the grace period (`FORGESYNC_SHUTDOWN_GRACE`);
//! 3. never ack a message whose transaction did not commit: a message dropped unacked is
//!    redelivered, which is safe; an ack for lost work is not.

use tokio_util::sync::CancellationToken;

/// A token canceled when the process receives SIGTERM or SIGINT (Ctrl-C).
///
/// Spawns the signal listener on the current Tokio runtime, so call it inside one. Each call
/// returns an independent token; create one in `main` and pass clones (or child tokens) down.
pub fn shutdown_token() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        let signal = wait_for_signal().await;
        tracing::info!(signal, "shutdown requested; finishing in-flight work");
        trigger.cancel();
    });
    token
}

#[cfg(unix)]
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        },
        _ => {
            // Cannot listen for SIGTERM: fall back to Ctrl-C only.
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "Ctrl-C"
}
