//! Cron schedules whose runs are claimed in Postgres, so any number of replicas can run the
//! same schedules with no leader.
//!
//! The rule: each (schedule, due instant) runs exactly once across replicas. A run is a row in
//! `schedule_run` keyed by (schedule, due_at); the replica whose insert wins runs it and keeps
//! extending its lease while the handler works. A replica that dies leaves an unfinished row
//! whose lease expires, and another replica takes it over (`attempts` counts the takeovers). A
//! failed run releases its lease at once so another attempt can happen, up to the runner's
//! maximum attempts. Leases are measured with the database clock, never a replica's.
//!
//! Only the latest due instant at or before now is run: instants missed while every replica
//! was down are skipped (and logged), not replayed. Expressions are evaluated in UTC and may
//! have a leading seconds field.
//!
//! Handlers must be idempotent: a replica that stalls past its lease without dying may still
//! be running when another takes over. Runs of *different* instants of one schedule can
//! overlap across replicas when a handler outlasts the interval; keep handlers short (enqueue
//! work) or guard them yourself.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::CronParser;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use sea_orm::{ConnectionTrait as _, DatabaseConnection, DbBackend, DbErr, Statement, Value};
use time::OffsetDateTime;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

/// How long a replica waits before retrying after its own run failed.
const RETRY_DELAY: Duration = Duration::from_secs(1);
/// How long a replica waits after a database error before trying again.
const ERROR_BACKOFF: Duration = Duration::from_secs(2);
/// Slack added to sleeps so a replica wakes just after an instant is due, not just before.
const WAKE_SLACK: Duration = Duration::from_millis(5);
/// Recorded error text is cut to this many characters.
const MAX_ERROR_CHARS: usize = 2000;
/// Default bound on attempts per (schedule, due instant).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// One run of a schedule, handed to its handler.
#[derive(Debug, Clone)]
pub struct ScheduledRun {
    /// The schedule's name.
    pub schedule: String,
    /// The due instant this run is for (UTC, whole seconds).
    pub due_at: OffsetDateTime,
    /// 1 for the first attempt, higher after a failure or a takeover.
    pub attempt: u32,
    /// Canceled when the process shuts down or this replica lost the lease; the handler should
    /// stop at a safe point and return.
    pub cancel: CancellationToken,
}

/// A schedule that cannot be added.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression does not parse or never matches.
    #[error("schedule {schedule:?}: invalid cron expression {expr:?}: {source}")]
    InvalidCron {
        /// The schedule's name.
        schedule: String,
        /// The expression as given.
        expr: String,
        /// What croner reported.
        #[source]
        source: croner::errors::CronError,
    },
    /// Two schedules with one name would share their claims.
    #[error("schedule {0:?} is added twice")]
    Duplicate(String),
    /// The lease is too short to be extended in time by the heartbeat.
    #[error("schedule {schedule:?}: lease must be at least 1 s, got {lease:?}")]
    LeaseTooShort {
        /// The schedule's name.
        schedule: String,
        /// The lease as given.
        lease: Duration,
    },
}

type Handler = Arc<dyn Fn(ScheduledRun) -> BoxFuture<'static, anyhow::Result<()>> + Send + Sync>;

struct Schedule {
    name: String,
    cron: Cron,
    lease: Duration,
    handler: Handler,
}

/// Runs cron schedules on one replica, claiming each run in Postgres (`schedule_run`).
pub struct ScheduleRunner {
    db: DatabaseConnection,
    replica_id: String,
    max_attempts: u32,
    schedules: Vec<Arc<Schedule>>,
}

impl ScheduleRunner {
    /// A runner with no schedules. `replica_id` names this replica in `claimed_by`; see
    /// [`default_replica_id`].
    pub fn new(db: DatabaseConnection, replica_id: impl Into<String>) -> Self {
        Self {
            db,
            replica_id: replica_id.into(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            schedules: Vec::new(),
        }
    }

    /// Bounds attempts (first run, retries after errors, takeovers) per due instant; at least 1.
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }

    /// Adds a schedule. `cron_expr` is a croner expression (5 fields, or 6 with leading
    /// seconds), evaluated in UTC; `lease` is how long a claim holds without a heartbeat.
    pub fn add<F, Fut>(
        &mut self,
        name: &str,
        cron_expr: &str,
        lease: Duration,
        handler: F,
    ) -> Result<&mut Self, ScheduleError>
    where
        F: Fn(ScheduledRun) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let invalid = |source| ScheduleError::InvalidCron {
            schedule: name.to_owned(),
            expr: cron_expr.to_owned(),
            source,
        };
        let cron = CronParser::new().parse(cron_expr).map_err(invalid)?;
        // An expression that parses but never matches (30 February) fails here, not later.
        cron.find_next_occurrence(&Utc::now(), false)
            .map_err(invalid)?;
        if lease < Duration::from_secs(1) {
            return Err(ScheduleError::LeaseTooShort {
                schedule: name.to_owned(),
                lease,
            });
        }
        if self.schedules.iter().any(|s| s.name == name) {
            return Err(ScheduleError::Duplicate(name.to_owned()));
        }
        self.schedules.push(Arc::new(Schedule {
            name: name.to_owned(),
            cron,
            lease,
            handler: Arc::new(move |run| handler(run).boxed()),
        }));
        Ok(self)
    }

    /// Whether no schedule was added.
    pub fn is_empty(&self) -> bool {
        self.schedules.is_empty()
    }

    /// Runs every schedule until `shutdown` is canceled, then waits for in-flight runs (whose
    /// [`ScheduledRun::cancel`] fires) to return. Claims nothing after shutdown.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let claims = Arc::new(Claims {
            db: self.db,
            replica_id: self.replica_id,
            max_attempts: i32::try_from(self.max_attempts).unwrap_or(i32::MAX),
        });
        let mut tasks = JoinSet::new();
        for schedule in self.schedules {
            tasks.spawn(claims.clone().drive(schedule, shutdown.clone()));
        }
        while let Some(joined) = tasks.join_next().await {
            joined.context("a schedule task panicked")?;
        }
        Ok(())
    }
}

/// A replica id for `claimed_by`: the host name (the pod name on Kubernetes) and a random
/// suffix, so two processes on one host differ.
pub fn default_replica_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "replica".to_owned());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &suffix[..8])
}

/// What a claim attempt found.
enum Claim {
    /// This replica owns the run, as attempt `attempt`.
    Won { attempt: i32 },
    /// Another replica holds a live lease; look again after `retry_in`.
    Busy { retry_in: Duration },
    /// Finished, or out of attempts: nothing more to do for this instant.
    Settled,
}

struct Claims {
    db: DatabaseConnection,
    replica_id: String,
    max_attempts: i32,
}

impl Claims {
    async fn drive(self: Arc<Self>, schedule: Arc<Schedule>, shutdown: CancellationToken) {
        // The latest instant this replica knows needs no more work.
        let mut settled = None;
        while !shutdown.is_cancelled() {
            let wait = match self.step(&schedule, &mut settled, &shutdown).await {
                Ok(wait) => wait,
                Err(err) => {
                    tracing::warn!(schedule = %schedule.name, error = %format!("{err:#}"), "schedule step failed; retrying");
                    ERROR_BACKOFF
                }
            };
            if wait.is_zero() {
                continue;
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Claims and runs the latest due instant if it needs work; returns how long to sleep.
    async fn step(
        &self,
        schedule: &Schedule,
        settled: &mut Option<OffsetDateTime>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Duration> {
        let now = self.db_now().await?;
        let due = schedule.latest_due(now)?;
        let until_next = schedule.until_next(now)?;
        if *settled == Some(due) {
            return Ok(until_next);
        }
        match self.claim(schedule, due).await? {
            Claim::Won { attempt } => {
                if attempt == 1 {
                    self.log_skipped(schedule, due).await;
                }
                let succeeded = self.execute(schedule, due, attempt, shutdown).await;
                // Look again at once: a new instant may be due, or a failed run retried.
                Ok(if succeeded {
                    Duration::ZERO
                } else {
                    RETRY_DELAY
                })
            }
            Claim::Busy { retry_in } => Ok(until_next.min(retry_in + WAKE_SLACK)),
            Claim::Settled => {
                *settled = Some(due);
                Ok(until_next)
            }
        }
    }

    async fn db_now(&self) -> Result<OffsetDateTime, DbErr> {
        let row = self
            .db
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT now() AS now",
            ))
            .await?
            .ok_or_else(|| DbErr::RecordNotFound("SELECT now() returned no row".into()))?;
        row.try_get("", "now")
    }

    fn stmt(sql: &str, values: impl IntoIterator<Item = Value>) -> Statement {
        Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
    }

    async fn claim(&self, schedule: &Schedule, due: OffsetDateTime) -> Result<Claim, DbErr> {
        let name = schedule.name.clone();
        let lease = schedule.lease.as_secs_f64();

        // Exactly once: the first insert for (schedule, due_at) wins; every other replica
        // conflicts and does nothing.
        let inserted = self
            .db
            .query_one_raw(Self::stmt(
                "INSERT INTO schedule_run (schedule, due_at, claimed_by, lease_until, attempts, started_at) \
                 VALUES ($1, $2, $3, now() + make_interval(secs => $4), 1, now()) \
                 ON CONFLICT (schedule, due_at) DO NOTHING \
                 RETURNING attempts",
                [
                    name.clone().into(),
                    due.into(),
                    self.replica_id.clone().into(),
                    lease.into(),
                ],
            ))
            .await?;
        if let Some(row) = inserted {
            return Ok(Claim::Won {
                attempt: row.try_get("", "attempts")?,
            });
        }

        // Takeover: only an unfinished run whose lease expired on the database clock, and
        // only while attempts remain. Row locking makes concurrent takeovers race safely.
        let taken = self
            .db
            .query_one_raw(Self::stmt(
                "UPDATE schedule_run \
                 SET claimed_by = $3, lease_until = now() + make_interval(secs => $4), \
                     attempts = attempts + 1, started_at = now() \
                 WHERE schedule = $1 AND due_at = $2 AND finished_at IS NULL \
                   AND lease_until < now() AND attempts < $5 \
                 RETURNING attempts",
                [
                    name.clone().into(),
                    due.into(),
                    self.replica_id.clone().into(),
                    lease.into(),
                    self.max_attempts.into(),
                ],
            ))
            .await?;
        if let Some(row) = taken {
            return Ok(Claim::Won {
                attempt: row.try_get("", "attempts")?,
            });
        }

        let status = self
            .db
            .query_one_raw(Self::stmt(
                "SELECT finished_at IS NOT NULL AS finished, attempts, \
                        lease_until < now() AS expired, \
                        GREATEST(EXTRACT(EPOCH FROM lease_until - now()), 0)::float8 AS lease_left \
                 FROM schedule_run WHERE schedule = $1 AND due_at = $2",
                [name.into(), due.into()],
            ))
            .await?;
        let Some(row) = status else {
            // Deleted between our statements; try again soon.
            return Ok(Claim::Busy {
                retry_in: Duration::ZERO,
            });
        };
        let finished: bool = row.try_get("", "finished")?;
        let attempts: i32 = row.try_get("", "attempts")?;
        let expired: bool = row.try_get("", "expired")?;
        let lease_left: f64 = row.try_get("", "lease_left")?;
        if finished {
            return Ok(Claim::Settled);
        }
        if expired && attempts >= self.max_attempts {
            tracing::error!(schedule = %schedule.name, due_at = %due, attempts, "run gave up: out of attempts");
            return Ok(Claim::Settled);
        }
        Ok(Claim::Busy {
            retry_in: Duration::try_from_secs_f64(lease_left).unwrap_or(ERROR_BACKOFF),
        })
    }

    /// Runs the handler while heartbeating the lease; records the outcome. True on success.
    async fn execute(
        &self,
        schedule: &Schedule,
        due: OffsetDateTime,
        attempt: i32,
        shutdown: &CancellationToken,
    ) -> bool {
        let cancel = shutdown.child_token();
        let run = ScheduledRun {
            schedule: schedule.name.clone(),
            due_at: due,
            attempt: u32::try_from(attempt).unwrap_or(0),
            cancel: cancel.clone(),
        };
        let span =
            tracing::info_span!("schedule_run", schedule = %schedule.name, due_at = %due, attempt);
        async {
            tracing::info!("schedule run started");
            let handler = AssertUnwindSafe((schedule.handler)(run)).catch_unwind();
            tokio::pin!(handler);
            let mut heartbeat = tokio::time::interval(schedule.lease / 3);
            heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            heartbeat.tick().await;
            let outcome = loop {
                tokio::select! {
                    outcome = &mut handler => break outcome,
                    _ = heartbeat.tick() => match self.heartbeat(schedule, due, attempt).await {
                        Ok(true) => {}
                        Ok(false) => if !cancel.is_cancelled() {
                            tracing::warn!("lease lost to another replica; asking the handler to stop");
                            cancel.cancel();
                        },
                        Err(err) => tracing::warn!(error = %err, "lease heartbeat failed; retrying"),
                    },
                }
            };
            let result = outcome.unwrap_or_else(|panic| {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic".to_owned());
                Err(anyhow!("handler panicked: {msg}"))
            });
            let succeeded = result.is_ok();
            let outcome = match result {
                Ok(()) => self.record(schedule, due, attempt, None).await,
                Err(err) => {
                    let text: String = format!("{err:#}").chars().take(MAX_ERROR_CHARS).collect();
                    tracing::warn!(error = %text, "schedule run failed; lease released for another attempt");
                    self.record(schedule, due, attempt, Some(text)).await
                }
            };
            let label = match (succeeded, outcome) {
                (true, Ok(true)) => {
                    tracing::info!("schedule run finished");
                    "succeeded"
                }
                (false, Ok(true)) => "failed",
                (_, Ok(false)) => {
                    tracing::warn!("run ended after its lease was taken over; outcome not recorded");
                    "lease_lost"
                }
                (_, Err(err)) => {
                    tracing::warn!(error = %err, "could not record the run's outcome; it will be retried after the lease");
                    "unrecorded"
                }
            };
            metrics::counter!(
                "forgesync_schedule_runs_total",
                "schedule" => schedule.name.clone(),
                "outcome" => label
            )
            .increment(1);
            succeeded
        }
        .instrument(span)
        .await
    }

    /// Extends the lease; false when this replica no longer holds it.
    async fn heartbeat(
        &self,
        schedule: &Schedule,
        due: OffsetDateTime,
        attempt: i32,
    ) -> Result<bool, DbErr> {
        let res = self
            .db
            .execute_raw(Self::stmt(
                "UPDATE schedule_run SET lease_until = now() + make_interval(secs => $5) \
                 WHERE schedule = $1 AND due_at = $2 AND claimed_by = $3 AND attempts = $4 \
                   AND finished_at IS NULL",
                [
                    schedule.name.clone().into(),
                    due.into(),
                    self.replica_id.clone().into(),
                    attempt.into(),
                    schedule.lease.as_secs_f64().into(),
                ],
            ))
            .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Marks the run finished (`error` None) or failed and released (`error` Some), fenced by
    /// (claimed_by, attempts) so a replica that lost its lease changes nothing. Retries a few
    /// times on database errors; false when the fence no longer matches.
    async fn record(
        &self,
        schedule: &Schedule,
        due: OffsetDateTime,
        attempt: i32,
        error: Option<String>,
    ) -> Result<bool, DbErr> {
        let sql = match error {
            None => {
                "UPDATE schedule_run SET finished_at = now(), error = NULL \
                 WHERE schedule = $1 AND due_at = $2 AND claimed_by = $3 AND attempts = $4 \
                   AND finished_at IS NULL"
            }
            // Release: lease_until = now() lets the next claim take it over immediately.
            Some(_) => {
                "UPDATE schedule_run SET error = $5, lease_until = now() \
                 WHERE schedule = $1 AND due_at = $2 AND claimed_by = $3 AND attempts = $4 \
                   AND finished_at IS NULL"
            }
        };
        let mut values: Vec<Value> = vec![
            schedule.name.clone().into(),
            due.into(),
            self.replica_id.clone().into(),
            attempt.into(),
        ];
        if let Some(error) = error {
            values.push(error.into());
        }
        let mut tries = 0;
        loop {
            match self.db.execute_raw(Self::stmt(sql, values.clone())).await {
                Ok(res) => return Ok(res.rows_affected() == 1),
                Err(err) if tries < 3 => {
                    tries += 1;
                    tracing::debug!(error = %err, "recording the run failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Logs the due instants skipped since this schedule's previous recorded run.
    async fn log_skipped(&self, schedule: &Schedule, due: OffsetDateTime) {
        let previous = self
            .db
            .query_one_raw(Self::stmt(
                "SELECT max(due_at) AS previous FROM schedule_run WHERE schedule = $1 AND due_at < $2",
                [schedule.name.clone().into(), due.into()],
            ))
            .await
            .and_then(|row| match row {
                Some(row) => row.try_get::<Option<OffsetDateTime>>("", "previous"),
                None => Ok(None),
            });
        let previous = match previous {
            Ok(Some(previous)) => previous,
            Ok(None) => return,
            Err(err) => {
                tracing::debug!(error = %err, "could not look up the previous run");
                return;
            }
        };
        let skipped = schedule.count_between(previous, due);
        if skipped > 0 {
            tracing::info!(
                schedule = %schedule.name,
                due_at = %due,
                previous_due_at = %previous,
                skipped,
                "missed due instants skipped; only the latest one runs"
            );
        }
    }
}

impl Schedule {
    /// The latest due instant at or before `now`.
    fn latest_due(&self, now: OffsetDateTime) -> anyhow::Result<OffsetDateTime> {
        let at = self
            .cron
            .find_previous_occurrence(&to_chrono(now)?, true)
            .with_context(|| format!("schedule {:?}: no due instant before {now}", self.name))?;
        to_time(at)
    }

    /// How long from `now` until the next due instant (plus a little slack).
    fn until_next(&self, now: OffsetDateTime) -> anyhow::Result<Duration> {
        let next = self
            .cron
            .find_next_occurrence(&to_chrono(now)?, false)
            .with_context(|| format!("schedule {:?}: no due instant after {now}", self.name))?;
        let left = to_time(next)? - now;
        Ok(Duration::try_from(left).unwrap_or(Duration::ZERO) + WAKE_SLACK)
    }

    /// Due instants strictly between `from` and `to` (counted up to a bound).
    fn count_between(&self, from: OffsetDateTime, to: OffsetDateTime) -> usize {
        const BOUND: usize = 10_000;
        let (Ok(from), Ok(to)) = (to_chrono(from), to_chrono(to)) else {
            return 0;
        };
        self.cron
            .iter_after(from)
            .take_while(|at| *at < to)
            .take(BOUND)
            .count()
    }
}

/// Whole-second UTC instant for croner (cron has no sub-second fields).
fn to_chrono(at: OffsetDateTime) -> anyhow::Result<DateTime<Utc>> {
    DateTime::from_timestamp(at.unix_timestamp(), 0).with_context(|| format!("{at} out of range"))
}

fn to_time(at: DateTime<Utc>) -> anyhow::Result<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp(at.timestamp())
        .with_context(|| format!("{at} out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn schedule(expr: &str) -> Schedule {
        Schedule {
            name: "t".into(),
            cron: CronParser::new().parse(expr).unwrap(),
            lease: Duration::from_secs(1),
            handler: Arc::new(|_| async { Ok(()) }.boxed()),
        }
    }

    #[test]
    fn latest_due_is_at_or_before_now() {
        let every_minute = schedule("0 * * * * *");
        let now = datetime!(2025-03-04 10:20:30.250 UTC);
        assert_eq!(
            every_minute.latest_due(now).unwrap(),
            datetime!(2025-03-04 10:20:00 UTC)
        );
        let on_the_minute = datetime!(2025-03-04 10:20:00.700 UTC);
        assert_eq!(
            every_minute.latest_due(on_the_minute).unwrap(),
            datetime!(2025-03-04 10:20:00 UTC)
        );
        let wait = every_minute.until_next(on_the_minute).unwrap();
        assert_eq!(wait, Duration::from_millis(59_300) + WAKE_SLACK);
    }

    #[test]
    fn five_field_expressions_work_too() {
        let hourly = schedule("15 * * * *");
        let now = datetime!(2025-03-04 10:20:30 UTC);
        assert_eq!(
            hourly.latest_due(now).unwrap(),
            datetime!(2025-03-04 10:15:00 UTC)
        );
    }

    #[test]
    fn counts_missed_instants() {
        let every_minute = schedule("0 * * * * *");
        let skipped = every_minute.count_between(
            datetime!(2025-03-04 10:00:00 UTC),
            datetime!(2025-03-04 10:05:00 UTC),
        );
        assert_eq!(skipped, 4);
    }

    #[test]
    fn invalid_cron_names_the_schedule() {
        let db = DatabaseConnection::default();
        let mut runner = ScheduleRunner::new(db, "r");
        let err = runner
            .add(
                "nightly-reconcile",
                "61 * * * *",
                Duration::from_secs(5),
                |_| async { Ok(()) },
            )
            .err()
            .unwrap();
        assert!(err.to_string().contains("nightly-reconcile"), "{err}");
        let err = runner
            .add("feb-30", "0 0 30 2 *", Duration::from_secs(5), |_| async {
                Ok(())
            })
            .err()
            .unwrap();
        assert!(err.to_string().contains("feb-30"), "{err}");
    }

    #[test]
    fn duplicate_names_and_short_leases_are_refused() {
        let mut runner = ScheduleRunner::new(DatabaseConnection::default(), "r");
        runner
            .add("a", "* * * * * *", Duration::from_secs(5), |_| async {
                Ok(())
            })
            .unwrap();
        assert!(matches!(
            runner.add("a", "* * * * * *", Duration::from_secs(5), |_| async {
                Ok(())
            }),
            Err(ScheduleError::Duplicate(_))
        ));
        assert!(matches!(
            runner.add("b", "* * * * * *", Duration::from_millis(10), |_| async {
                Ok(())
            }),
            Err(ScheduleError::LeaseTooShort { .. })
        ));
    }
}
