//! Raw-body retention: bodies past their per-vendor retention and expired digest keys are
//! deleted in batches. Every replica may run it.

use std::time::Duration;

use sea_orm::DatabaseConnection;
use tokio_util::sync::CancellationToken;

const BATCH: u64 = 1000;

/// Prunes every minute until `shutdown`.
pub async fn run(db: DatabaseConnection, shutdown: CancellationToken) {
    loop {
        loop {
            match store::inbound::prune_expired(&db, BATCH).await {
                Ok(n) if n >= BATCH && !shutdown.is_cancelled() => continue,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "pruning expired webhook bodies failed");
                    break;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
    }
}
