//! Sync job types and what each one implies: who may trigger it and whether it may infer deletion.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The type of a sync job, as recorded in `sync_job` and carried on `jobs.*` subjects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SyncJobType {
    /// The first population of a mirror after connect.
    Initial,
    /// A periodic or manual full pass; the only type that may infer deletion from absence.
    Reconciliation,
    /// A walk towards older history.
    Backfill,
}

/// Every job type, in declaration order.
pub const ALL_JOB_TYPES: [SyncJobType; 3] = [
    SyncJobType::Initial,
    SyncJobType::Reconciliation,
    SyncJobType::Backfill,
];

impl SyncJobType {
    /// The wire name (`INITIAL`, `RECONCILIATION`, `BACKFILL`).
    pub fn as_str(self) -> &'static str {
        match self {
            SyncJobType::Initial => "INITIAL",
            SyncJobType::Reconciliation => "RECONCILIATION",
            SyncJobType::Backfill => "BACKFILL",
        }
    }

    /// Whether an API client may request this type.
    pub fn client_triggerable(self) -> bool {
        // Reconciliation-only: a manual INITIAL is rejected, it would sweep a mirror under population.
        matches!(self, SyncJobType::Reconciliation | SyncJobType::Backfill)
    }

    /// Whether a job of this type may infer an upstream deletion from absence.
    pub fn may_infer_deletion(self) -> bool {
        // Reconciliation-only: INITIAL and BACKFILL never infer deletion.
        self == SyncJobType::Reconciliation
    }

    /// Parses a client's request, rejecting unknown names and types clients may not trigger.
    pub fn parse_client_request(name: &str) -> Result<SyncJobType, JobTypeError> {
        let job: SyncJobType = name.parse()?;
        if job.client_triggerable() {
            Ok(job)
        } else {
            Err(JobTypeError::NotClientTriggerable(job))
        }
    }
}

impl fmt::Display for SyncJobType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SyncJobType {
    type Err = JobTypeError;

    /// Accepts the wire name in any ASCII case (subjects carry it lowercased).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL_JOB_TYPES
            .into_iter()
            .find(|job| job.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| JobTypeError::Unknown(s.to_owned()))
    }
}

/// The job types a vendor's sync runs: declared once in the vendor's module
/// ([`crate::github::JOBS`], [`crate::gitlab::JOBS`], [`crate::slack::JOBS`],
/// [`crate::outline::JOBS`]), read by the API that queues jobs and by the engine that runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobSupport {
    /// The vendor as people name it (`Slack`).
    pub vendor: &'static str,
    /// Job types the vendor refuses, each with why.
    pub refused: &'static [(SyncJobType, &'static str)],
}

impl JobSupport {
    /// Why the vendor does not run `job`, or `None` when it does.
    pub fn refusal(&self, job: SyncJobType) -> Option<JobRefusal> {
        self.refused
            .iter()
            .find(|(refused, _)| *refused == job)
            .map(|&(job, why)| JobRefusal {
                vendor: self.vendor,
                job,
                why,
            })
    }
}

/// A job type a vendor does not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{vendor} connections do not {}: {why}", verb(*job))]
pub struct JobRefusal {
    pub vendor: &'static str,
    pub job: SyncJobType,
    pub why: &'static str,
}

fn verb(job: SyncJobType) -> &'static str {
    match job {
        SyncJobType::Initial => "run an initial sync",
        SyncJobType::Reconciliation => "reconcile",
        SyncJobType::Backfill => "backfill",
    }
}

/// Why a job type was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobTypeError {
    /// The name is not a sync job type.
    #[error("unknown sync job type {0:?}; expected RECONCILIATION or BACKFILL")]
    Unknown(String),
    /// The type exists but only the system starts it.
    #[error("{0} jobs are started by the system only; request RECONCILIATION or BACKFILL")]
    NotClientTriggerable(SyncJobType),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reconciliation_infers_deletion() {
        assert!(SyncJobType::Reconciliation.may_infer_deletion());
        assert!(!SyncJobType::Initial.may_infer_deletion());
        assert!(!SyncJobType::Backfill.may_infer_deletion());
    }

    #[test]
    fn initial_is_not_client_triggerable() {
        assert!(!SyncJobType::Initial.client_triggerable());
        assert!(SyncJobType::Reconciliation.client_triggerable());
        assert!(SyncJobType::Backfill.client_triggerable());
    }

    #[test]
    fn client_request_rejects_manual_initial() {
        assert_eq!(
            SyncJobType::parse_client_request("INITIAL"),
            Err(JobTypeError::NotClientTriggerable(SyncJobType::Initial))
        );
        assert_eq!(
            SyncJobType::parse_client_request("reconciliation"),
            Ok(SyncJobType::Reconciliation)
        );
        assert_eq!(
            SyncJobType::parse_client_request("BACKFILL"),
            Ok(SyncJobType::Backfill)
        );
        assert!(matches!(
            SyncJobType::parse_client_request("FULL"),
            Err(JobTypeError::Unknown(_))
        ));
    }

    #[test]
    fn a_vendor_refuses_only_what_it_declares() {
        for support in [crate::github::JOBS, crate::gitlab::JOBS] {
            for job in ALL_JOB_TYPES {
                assert_eq!(support.refusal(job), None, "{} runs {job}", support.vendor);
            }
        }
        // Slack reads nothing at connect: only what arrives after a channel's consent.
        let refusal = crate::slack::JOBS
            .refusal(SyncJobType::Initial)
            .expect("Slack refuses INITIAL");
        assert!(
            refusal
                .to_string()
                .starts_with("Slack connections do not run an initial sync: "),
            "{refusal}"
        );
        assert_eq!(crate::outline::JOBS.refusal(SyncJobType::Initial), None);
        for support in [crate::slack::JOBS, crate::outline::JOBS] {
            assert_eq!(support.refusal(SyncJobType::Reconciliation), None);
            let refusal = support.refusal(SyncJobType::Backfill).expect("refused");
            assert!(
                refusal
                    .to_string()
                    .starts_with(&format!("{} connections do not backfill: ", support.vendor)),
                "{refusal}"
            );
        }
    }

    #[test]
    fn wire_names_round_trip() {
        for job in ALL_JOB_TYPES {
            assert_eq!(job.to_string().parse::<SyncJobType>(), Ok(job));
            assert_eq!(job.as_str().to_lowercase().parse::<SyncJobType>(), Ok(job));
        }
    }
}
