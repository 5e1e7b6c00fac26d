//! provider-repair's metrics: what the fences hold, read from their table (every replica
//! reports the same rows, so dashboards take the max), and what each dispatched call ended in.
//!
//! - `provider_repair_unresolved{provider, status}`: fences neither resolved nor released;
//! - `provider_repair_oldest_unresolved_seconds{provider}`: age of the oldest such fence since
//!   its capture (0 when none);
//! - `provider_repair_attempts_total{provider, outcome}`: removal calls made, by outcome.
//!
//! Every label comes from a closed list (`ProviderKind::ALL`, `FenceStatus::ALL`, the dispatch
//! outcomes), and every series starts at zero, so "none" reads as 0 rather than "no data".

use std::time::Duration;

use lifecycle_core::repair::{DispatchOutcome, FenceStatus, ProviderKind};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// How often each replica reads the fences' table for the gauges.
pub const OBSERVE_EVERY: Duration = Duration::from_secs(15);

const OUTCOMES: [DispatchOutcome; 4] = [
    DispatchOutcome::TerminalReceipt,
    DispatchOutcome::Uncertain,
    DispatchOutcome::Unauthorized,
    DispatchOutcome::Refused,
];

/// The `outcome` label of a dispatched call.
pub const fn outcome_label(outcome: DispatchOutcome) -> &'static str {
    match outcome {
        DispatchOutcome::TerminalReceipt => "terminal_receipt",
        DispatchOutcome::Uncertain => "uncertain",
        DispatchOutcome::Unauthorized => "unauthorized",
        DispatchOutcome::Refused => "refused",
    }
}

fn unresolved_statuses() -> impl Iterator<Item = FenceStatus> {
    FenceStatus::ALL.into_iter().filter(|s| !s.is_settled())
}

/// Declares the metrics with their help and starts every series at zero.
pub fn register() {
    // The recorder first, so the zeros below reach `/metrics` (a test or the local stack
    // starts the service without `telemetry::init`).
    runtime::telemetry::metrics_handle();
    metrics::describe_gauge!(
        "provider_repair_unresolved",
        "Provider repair fences neither resolved nor released, by provider and status \
         (pending, needs_authorization, awaiting_admin)"
    );
    metrics::describe_gauge!(
        "provider_repair_oldest_unresolved_seconds",
        "Seconds since the oldest unresolved provider repair fence of a provider was captured"
    );
    metrics::describe_counter!(
        "provider_repair_attempts_total",
        "Removal calls provider-repair made at a vendor, by provider and outcome \
         (terminal_receipt, uncertain, unauthorized, refused)"
    );
    for provider in ProviderKind::ALL {
        for outcome in OUTCOMES {
            metrics::counter!("provider_repair_attempts_total", "provider" => provider.as_str(), "outcome" => outcome_label(outcome))
                .absolute(0);
        }
    }
}

/// Counts one dispatched call of `provider` that ended in `outcome`.
pub fn attempted(provider: ProviderKind, outcome: DispatchOutcome) {
    metrics::counter!("provider_repair_attempts_total", "provider" => provider.as_str(), "outcome" => outcome_label(outcome))
        .increment(1);
}

/// Sets the gauges from the fences' table.
pub async fn observe(pool: &PgPool) -> Result<(), sqlx::Error> {
    let rows: Vec<(String, String, i64, f64)> = sqlx::query_as(
        "SELECT provider, status, count(*),
                COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8
           FROM provider_resource_repair
          WHERE status NOT IN ('resolved', 'released')
          GROUP BY provider, status",
    )
    .fetch_all(pool)
    .await?;
    for provider in ProviderKind::ALL {
        let of_provider = || rows.iter().filter(|r| r.0 == provider.as_str());
        for status in unresolved_statuses() {
            let n = of_provider()
                .find(|r| r.1 == status.as_str())
                .map_or(0, |r| r.2);
            metrics::gauge!("provider_repair_unresolved", "provider" => provider.as_str(), "status" => status.as_str())
                .set(n as f64);
        }
        let oldest = of_provider().map(|r| r.3).fold(0.0, f64::max);
        metrics::gauge!("provider_repair_oldest_unresolved_seconds", "provider" => provider.as_str())
            .set(oldest);
    }
    Ok(())
}

/// Sets the gauges every [`OBSERVE_EVERY`] until `stop`.
pub async fn run(pool: PgPool, stop: CancellationToken) -> anyhow::Result<()> {
    loop {
        // The last values stay while the database is away; readiness reports that.
        if let Err(e) = observe(&pool).await {
            tracing::debug!(error = %e, "reading the provider repair fences for metrics failed");
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(OBSERVE_EVERY) => {}
        }
    }
}
