//! Supervised tasks: a service's background tasks (server, relay, consumers, schedules, ...) run
//! as one set. The first to end while the service is not shutting down (returning, failing or
//! panicking) marks the service not ready, stops the others and fails the service, so the process
//! exits non-zero and its orchestrator restarts it. On shutdown every task gets the grace period
//! to finish; what is still running then is aborted.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

/// Whether the supervised tasks all still run; `/readyz` reports it.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<Mutex<Option<String>>>);

impl Readiness {
    /// Why the service is not ready, if it is not.
    pub fn failure(&self) -> Option<String> {
        self.0
            .lock()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    fn fail(&self, reason: String) {
        let mut guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        guard.get_or_insert(reason);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tier {
    /// Stopped at shutdown.
    Work,
    /// Stopped once every `Work` task has ended (it drains what they leave it).
    Drain,
}

/// A set of named tasks supervised together; see the module docs.
pub struct Supervisor {
    shutdown: CancellationToken,
    stop: CancellationToken,
    drain_stop: CancellationToken,
    tasks: JoinSet<anyhow::Result<()>>,
    names: HashMap<Id, (String, Tier)>,
    ready: Readiness,
}

impl Supervisor {
    /// A supervisor whose tasks stop when `shutdown` is cancelled.
    pub fn new(shutdown: &CancellationToken) -> Self {
        Supervisor {
            shutdown: shutdown.clone(),
            stop: shutdown.child_token(),
            drain_stop: CancellationToken::new(),
            tasks: JoinSet::new(),
            names: HashMap::new(),
            ready: Readiness::default(),
        }
    }

    /// The readiness these tasks drive, for the health routes.
    pub fn readiness(&self) -> Readiness {
        self.ready.clone()
    }

    /// Runs `task(stop)`; `stop` is cancelled at shutdown or when another task ends early.
    pub fn spawn<F, Fut>(&mut self, name: impl Into<String>, task: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let fut = task(self.stop.clone());
        self.insert(name.into(), Tier::Work, fut);
    }

    /// Like [`spawn`](Self::spawn), but `stop` is cancelled only once every other task has
    /// ended: for a writer the others feed until their last moment.
    pub fn spawn_draining<F, Fut>(&mut self, name: impl Into<String>, task: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let fut = task(self.drain_stop.clone());
        self.insert(name.into(), Tier::Drain, fut);
    }

    fn insert(
        &mut self,
        name: String,
        tier: Tier,
        fut: impl Future<Output = anyhow::Result<()>> + Send + 'static,
    ) {
        let handle = self.tasks.spawn(fut);
        self.names.insert(handle.id(), (name, tier));
    }

    fn work_left(&self) -> bool {
        self.names.values().any(|(_, t)| *t == Tier::Work)
    }

    /// Takes a finished task out of the books: its name and, if it failed, why.
    fn settle(
        &mut self,
        done: Result<(Id, anyhow::Result<()>), JoinError>,
    ) -> (String, Option<String>) {
        let (id, outcome) = match done {
            Ok((id, Ok(()))) => (id, None),
            Ok((id, Err(e))) => (id, Some(format!("failed: {e:#}"))),
            Err(e) if e.is_panic() => (e.id(), Some("panicked".to_owned())),
            Err(e) => (e.id(), Some("was aborted".to_owned())),
        };
        let name = self
            .names
            .remove(&id)
            .map_or_else(|| "unnamed".to_owned(), |(n, _)| n);
        (name, outcome)
    }

    /// Waits for shutdown or the first task to end, then stops every task within `grace`.
    /// Fails naming the task when one ended early or failed, or the tasks still running when
    /// the grace period ran out.
    pub async fn run(mut self, grace: Duration) -> anyhow::Result<()> {
        let mut failure: Option<anyhow::Error> = None;
        if !self.tasks.is_empty() {
            tokio::select! {
                _ = self.shutdown.cancelled() => {}
                Some(done) = self.tasks.join_next_with_id() => {
                    let (name, outcome) = self.settle(done);
                    // Supervision: a task ending before shutdown fails the service.
                    let reason = if self.shutdown.is_cancelled() {
                        outcome.map(|o| format!("task {name} {o}"))
                    } else {
                        Some(format!(
                            "task {name} ended while the service was running ({})",
                            outcome.as_deref().unwrap_or("returned")
                        ))
                    };
                    if let Some(reason) = reason {
                        tracing::error!(task = %name, %reason, "supervised task ended; stopping the service");
                        self.ready.fail(reason.clone());
                        failure = Some(anyhow::anyhow!(reason));
                    }
                }
            }
        }
        self.ready.fail("shutting down".to_owned());
        self.stop.cancel();
        if !self.work_left() {
            self.drain_stop.cancel();
        }
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            match tokio::time::timeout_at(deadline, self.tasks.join_next_with_id()).await {
                Ok(Some(done)) => {
                    let (name, outcome) = self.settle(done);
                    if let Some(o) = outcome {
                        tracing::error!(task = %name, outcome = %o, "supervised task failed while stopping");
                        failure.get_or_insert_with(|| anyhow::anyhow!("task {name} {o}"));
                    }
                    if !self.work_left() {
                        self.drain_stop.cancel();
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    // FORGESYNC_SHUTDOWN_GRACE: what has not finished by now is abandoned.
                    let mut left: Vec<_> = self.names.values().map(|(n, _)| n.clone()).collect();
                    left.sort();
                    tracing::error!(
                        ?left,
                        ?grace,
                        "tasks did not finish within the shutdown grace; aborting them"
                    );
                    self.tasks.abort_all();
                    failure.get_or_insert_with(|| {
                        anyhow::anyhow!(
                            "tasks {} did not finish within the shutdown grace of {grace:?}",
                            left.join(", ")
                        )
                    });
                    break;
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn until_stopped(
        seen: Arc<AtomicBool>,
    ) -> impl FnOnce(
        CancellationToken,
    ) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>> {
        move |stop| {
            Box::pin(async move {
                stop.cancelled().await;
                seen.store(true, Ordering::SeqCst);
                Ok(())
            })
        }
    }

    #[tokio::test]
    async fn a_task_ending_early_fails_the_service_at_once_and_stops_the_others() {
        let shutdown = CancellationToken::new();
        let mut sup = Supervisor::new(&shutdown);
        let ready = sup.readiness();
        let other_stopped = Arc::new(AtomicBool::new(false));
        sup.spawn("server", until_stopped(other_stopped.clone()));
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        sup.spawn("outbox relay", |_stop| async move {
            // Runs until the test kills it.
            let _ = killed.await;
            panic!("relay killed");
        });
        let run = tokio::spawn(sup.run(Duration::from_secs(5)));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(ready.failure().is_none(), "ready while every task runs");
        // The relay's task is killed (aborted from inside: a panic).
        drop(kill);
        let err = tokio::time::timeout(Duration::from_secs(1), run)
            .await
            .expect("the supervisor returns within a second")
            .unwrap()
            .expect_err("an early end fails the service");
        assert!(err.to_string().contains("outbox relay"), "{err}");
        assert!(
            other_stopped.load(Ordering::SeqCst),
            "the others were stopped"
        );
        assert!(
            !shutdown.is_cancelled(),
            "the caller's token is not touched"
        );
        let why = ready.failure().expect("not ready");
        assert!(why.contains("outbox relay"), "{why}");
    }

    #[tokio::test]
    async fn a_panicking_or_returning_task_is_named() {
        for (name, panics) in [("consumer", true), ("schedules", false)] {
            let shutdown = CancellationToken::new();
            let mut sup = Supervisor::new(&shutdown);
            sup.spawn("server", until_stopped(Arc::new(AtomicBool::new(false))));
            sup.spawn(name, move |_| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                assert!(!panics, "boom");
                Ok(())
            });
            let err = tokio::time::timeout(Duration::from_secs(1), sup.run(Duration::from_secs(5)))
                .await
                .expect("returns within a second")
                .expect_err("fails");
            let text = err.to_string();
            assert!(text.contains(name), "{text}");
            assert!(
                text.contains(if panics { "panicked" } else { "returned" }),
                "{text}"
            );
        }
    }

    #[tokio::test]
    async fn shutdown_stops_work_then_the_drain_and_succeeds() {
        let shutdown = CancellationToken::new();
        let mut sup = Supervisor::new(&shutdown);
        let ready = sup.readiness();
        let work_done = Arc::new(AtomicBool::new(false));
        let drained_after_work = Arc::new(AtomicBool::new(false));
        sup.spawn("server", {
            let work_done = work_done.clone();
            move |stop| async move {
                stop.cancelled().await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                work_done.store(true, Ordering::SeqCst);
                Ok(())
            }
        });
        sup.spawn_draining("writer", {
            let (work_done, drained) = (work_done.clone(), drained_after_work.clone());
            move |stop| async move {
                stop.cancelled().await;
                drained.store(work_done.load(Ordering::SeqCst), Ordering::SeqCst);
                Ok(())
            }
        });
        let run = tokio::spawn(sup.run(Duration::from_secs(5)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        shutdown.cancel();
        run.await.unwrap().expect("a clean shutdown succeeds");
        assert!(
            drained_after_work.load(Ordering::SeqCst),
            "drain stopped last"
        );
        assert!(ready.failure().is_some(), "not ready while shutting down");
    }

    #[tokio::test]
    async fn shutdown_grace_aborts_what_does_not_finish() {
        let shutdown = CancellationToken::new();
        let mut sup = Supervisor::new(&shutdown);
        sup.spawn("stuck consumer", |_stop| async move {
            std::future::pending::<()>().await;
            Ok(())
        });
        shutdown.cancel();
        let started = std::time::Instant::now();
        let err = sup
            .run(Duration::from_millis(200))
            .await
            .expect_err("overrunning the grace fails");
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(err.to_string().contains("stuck consumer"), "{err}");
    }
}
