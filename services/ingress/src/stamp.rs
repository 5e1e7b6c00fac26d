//! Stamping the outbox rows ingress published inline, many rows per statement.
//!
//! A stamp only spares the relay a republish: a row left unstamped (a full queue, a failed
//! UPDATE, a crash) is published again by the relay under the same `Nats-Msg-Id`, and the
//! stream's duplicate window absorbs the copy. So a lost stamp costs a publish, never a message.

use sea_orm::DatabaseConnection;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Ids waiting for a stamp; past this the relay stamps the overflow.
const QUEUE: usize = 8192;
/// Rows stamped by one statement at most.
const BATCH: usize = 512;

/// Queues published outbox rows for the background stamper.
#[derive(Clone, Debug)]
pub struct Stamper {
    queue: mpsc::Sender<Uuid>,
}

impl Stamper {
    /// Starts the stamper; it stamps what is queued, then ends once `stop` is cancelled.
    pub fn spawn(db: DatabaseConnection, stop: CancellationToken) -> (Stamper, JoinHandle<()>) {
        let (queue, rx) = mpsc::channel(QUEUE);
        (Stamper { queue }, tokio::spawn(run(db, rx, stop)))
    }

    /// Stamps `outbox_id` published soon; never waits.
    pub fn stamp(&self, outbox_id: Uuid) {
        if self.queue.try_send(outbox_id).is_err() {
            metrics::counter!("ingress_stamps_left_to_relay_total").increment(1);
        }
    }
}

async fn run(db: DatabaseConnection, mut rx: mpsc::Receiver<Uuid>, stop: CancellationToken) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        // Whatever arrived while the previous statement ran goes into the next one: one row
        // per statement when idle, hundreds under load, and no timer adding latency.
        tokio::select! {
            n = rx.recv_many(&mut batch, BATCH) => if n == 0 { break },
            () = stop.cancelled() => {
                rx.close();
                while rx.recv_many(&mut batch, BATCH).await > 0 {
                    flush(&db, &mut batch).await;
                }
                break;
            }
        }
        flush(&db, &mut batch).await;
    }
}

async fn flush(db: &DatabaseConnection, batch: &mut Vec<Uuid>) {
    if let Err(e) = store::outbox::mark_published(db, batch).await {
        tracing::warn!(error = %e, rows = batch.len(), "stamping published outbox rows failed; the relay will republish them");
    }
    batch.clear();
}
