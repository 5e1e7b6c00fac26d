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
/// Call it inside a Tokio runtime, early in `main`: the signal handlers are registered before
/// it returns (from then on those signals no longer kill the process), and a spawned task
/// cancels the token when one arrives. Each call returns an independent token; create one in
/// `main` and pass clones (or child tokens) down.
pub fn shutdown_token() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    let signals = Signals::register();
    tokio::spawn(async move {
        let signal = signals.recv().await;
        tracing::info!(signal, "shutdown requested; finishing in-flight work");
        trigger.cancel();
    });
    token
}

#[cfg(unix)]
enum Signals {
    Unix {
        term: tokio::signal::unix::Signal,
        int: tokio::signal::unix::Signal,
    },
    CtrlC,
}

#[cfg(unix)]
impl Signals {
    fn register() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Self::Unix { term, int },
            (Err(err), _) | (_, Err(err)) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM; only Ctrl-C stops gracefully");
                Self::CtrlC
            }
        }
    }

    async fn recv(self) -> &'static str {
        match self {
            Self::Unix { mut term, mut int } => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            },
            Self::CtrlC => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn register() -> Self {
        Self
    }

    async fn recv(self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn sigterm_cancels_the_token() {
        let token = shutdown_token();
        assert!(!token.is_cancelled());
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        tokio::time::timeout(Duration::from_secs(5), token.cancelled())
            .await
            .expect("SIGTERM cancels the shutdown token");
    }
}
