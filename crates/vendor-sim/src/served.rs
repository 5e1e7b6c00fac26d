//! What every simulator runs: its HTTP server on a free loopback port, and optionally a
//! background sender (the vendor's webhook deliveries). `shutdown` stops the server gracefully;
//! dropping it stops both at once.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A listener on a free port of 127.0.0.1 and its `http://` base URL.
pub(crate) async fn bind() -> std::io::Result<(TcpListener, String)> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let base_url = format!("http://{}", listener.local_addr()?);
    // reqwest needs the process's rustls provider even for plain http.
    runtime::install_crypto_provider();
    Ok((listener, base_url))
}

/// A running simulator's server and sender.
pub(crate) struct Served {
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    sender: Option<JoinHandle<()>>,
}

impl Served {
    /// Serves `app` on `listener` (`name` names it in the log if it stops on an error), and
    /// runs `sender` beside it.
    pub fn start<S>(
        listener: TcpListener,
        app: Router,
        name: &'static str,
        sender: Option<S>,
    ) -> Served
    where
        S: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, simulator = name, "simulator stopped");
            }
        });
        Served {
            shutdown: Some(tx),
            task: Some(task),
            sender: sender.map(tokio::spawn),
        }
    }

    /// Stops the server and waits (up to 5 s) for open calls to finish.
    pub async fn shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Some(sender) = self.sender.take() {
            sender.abort();
        }
    }
}
