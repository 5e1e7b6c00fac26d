//! Deleting the dispatch records of messages ingress published inline, many rows per statement,
//! and writing where each landed into the stream ledger (the eraser's way to the message).
//!
//! The delete only spares the relay a republish: a record left behind (a full queue, a failed
//! DELETE, a crash) is published again by the relay under the same `Nats-Msg-Id` once its hold
//! ends, and the stream's duplicate window absorbs the copy. So a lost delete costs a publish,
//! never a message.

use sea_orm::DatabaseConnection;
use store::outbox::Landed;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Ids waiting for their delete; past this the relay publishes and deletes the overflow.
const QUEUE: usize = 8192;
/// Rows deleted by one statement at most.
const BATCH: usize = 512;

/// Queues the dispatch records of published messages for the background delete.
#[derive(Clone, Debug)]
pub struct Published {
    queue: mpsc::Sender<Landed>,
}

impl Published {
    /// The queue and its background delete, to be run (supervised) until `stop`: it deletes
    /// what is queued, then ends once `stop` is cancelled.
    pub fn new(
        db: DatabaseConnection,
    ) -> (
        Published,
        impl FnOnce(CancellationToken) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    ) {
        let (queue, rx) = mpsc::channel(QUEUE);
        (Published { queue }, move |stop| Box::pin(run(db, rx, stop)))
    }

    /// Deletes the dispatch record of `landed` soon, recording its place; never waits.
    pub fn record(&self, landed: Landed) {
        if self.queue.try_send(landed).is_err() {
            metrics::counter!("ingress_dispatch_records_left_to_relay_total").increment(1);
        }
    }
}

async fn run(db: DatabaseConnection, mut rx: mpsc::Receiver<Landed>, stop: CancellationToken) {
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

async fn flush(db: &DatabaseConnection, batch: &mut Vec<Landed>) {
    if let Err(e) = store::outbox::delete_published(db, batch).await {
        tracing::warn!(error = %e, rows = batch.len(), "deleting published dispatch records failed; the relay will republish them");
    }
    batch.clear();
}
