//! Raw-body retention: bodies past their per-vendor retention and expired digest keys are
//! deleted in batches. A body its message carries by reference stays until the message is
//! consumed or its stream can no longer deliver it (`store::inbound::prune_expired`), so
//! retention never turns an unconsumed delivery into a dead message. Past days of workspace
//! usage go too. Every replica may run it.

use std::time::Duration;

use sea_orm::DatabaseConnection;
use tokio_util::sync::CancellationToken;

const BATCH: u64 = 1000;

/// Prunes every minute until `shutdown`; `stream_max_age` is the streams' max age.
pub async fn run(db: DatabaseConnection, stream_max_age: Duration, shutdown: CancellationToken) {
    loop {
        loop {
            match store::inbound::prune_expired(&db, BATCH, stream_max_age).await {
                Ok(n) if n >= BATCH && !shutdown.is_cancelled() => continue,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "pruning expired webhook bodies failed");
                    break;
                }
            }
        }
        if let Err(e) = store::usage::prune(&db).await {
            tracing::warn!(error = %e, "pruning past days of workspace usage failed");
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
    }
}
