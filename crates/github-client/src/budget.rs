//! Rate-limit accounting: what GitHub says is left, and the caller's floor under it.
//!
//! Every GraphQL operation selects `rateLimit`, every REST answer carries `x-ratelimit-*`; the
//! ledger keeps the latest of each and the last cost of each operation. Before a call, if the
//! remaining points minus that cost would fall below the caller's [`Budget`], the call is not
//! sent: the client answers [`crate::Error::BudgetExhausted`] with a [`BudgetStop`] saying why,
//! and the caller treats its listing as incomplete (nothing is inferred from it).

use std::collections::HashMap;
use std::fmt;

use time::OffsetDateTime;

/// Which of GitHub's separate rate-limit pools a call draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// GraphQL points.
    Graphql,
    /// REST requests (the `core` resource).
    Rest,
}

/// The caller's floor: calls stop while they would leave fewer points than this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Budget {
    /// Points (GraphQL) or requests (REST) to keep in reserve, e.g. for webhooks' follow-ups.
    pub min_remaining: u32,
}

impl Budget {
    /// Keeps `min_remaining` in reserve.
    pub fn keep(min_remaining: u32) -> Self {
        Self { min_remaining }
    }

    /// Spends down to zero (GitHub's own limit still applies).
    pub fn unlimited() -> Self {
        Self { min_remaining: 0 }
    }
}

/// GitHub's account of a rate-limit window after a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// What the call cost (1 for REST).
    pub cost: u32,
    /// The window's size.
    pub limit: u32,
    /// What is left in the window.
    pub remaining: u32,
    /// When the window resets.
    pub reset_at: OffsetDateTime,
}

/// Why a call was not sent: the numbers the caller records on its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetStop {
    /// The pool.
    pub resource: Resource,
    /// The operation that was not sent (`RepositoryIssues`, `GET /repositories/{id}`, ...).
    pub operation: &'static str,
    /// What GitHub last said was left.
    pub remaining: u32,
    /// What the call was expected to cost (its last observed cost).
    pub expected_cost: u32,
    /// The caller's floor.
    pub min_remaining: u32,
    /// When the window resets and calls can resume.
    pub reset_at: OffsetDateTime,
}

impl fmt::Display for BudgetStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} budget: {} left, {} would cost {}, keeping {} in reserve; resets at {}",
            self.resource,
            self.remaining,
            self.operation,
            self.expected_cost,
            self.min_remaining,
            self.reset_at
        )
    }
}

/// The latest known windows and per-operation costs, shared by clones of a client.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    windows: HashMap<Resource, RateLimit>,
    costs: HashMap<&'static str, u32>,
    /// Where what GitHub says is left is reported, if anywhere.
    pub(crate) quota: Option<vendor_http::quota::QuotaGauge>,
}

impl Resource {
    /// The pool as the `resource` label of `vendor_quota_remaining`.
    pub fn label(self) -> &'static str {
        match self {
            Resource::Graphql => "graphql",
            Resource::Rest => "rest",
        }
    }
}

impl Ledger {
    /// Admits a call, reserving its expected cost, or says why not.
    pub(crate) fn admit(
        &mut self,
        resource: Resource,
        operation: &'static str,
        budget: Budget,
        now: OffsetDateTime,
    ) -> Result<(), BudgetStop> {
        // Before the first answer we know nothing: let the call go and learn from it.
        let Some(window) = self.windows.get_mut(&resource) else {
            return Ok(());
        };
        if window.reset_at <= now {
            // A new window has begun; GitHub's next answer tells the new numbers.
            self.windows.remove(&resource);
            return Ok(());
        }
        let expected_cost = self.costs.get(operation).copied().unwrap_or(1).max(1);
        if window.remaining < expected_cost.saturating_add(budget.min_remaining) {
            return Err(BudgetStop {
                resource,
                operation,
                remaining: window.remaining,
                expected_cost,
                min_remaining: budget.min_remaining,
                reset_at: window.reset_at,
            });
        }
        // Reserved so concurrent callers cannot all pass on the same last points.
        window.remaining -= expected_cost;
        Ok(())
    }

    /// Records GitHub's account after a call.
    pub(crate) fn record(&mut self, resource: Resource, operation: &'static str, seen: RateLimit) {
        self.costs.insert(operation, seen.cost);
        let window = self.windows.entry(resource).or_insert(seen);
        if window.reset_at != seen.reset_at {
            *window = seen;
        } else {
            // Answers of concurrent calls arrive out of order; within one window the smallest
            // remaining is the latest truth.
            window.remaining = window.remaining.min(seen.remaining);
            window.limit = seen.limit;
        }
        self.report(resource);
    }

    /// Reports the latest window of `resource` (what GitHub said, not our reservations).
    fn report(&self, resource: Resource) {
        if let (Some(quota), Some(window)) = (&self.quota, self.windows.get(&resource)) {
            quota.report(resource.label(), window.remaining, window.limit);
        }
    }

    /// Marks a pool spent until `reset_at` (GitHub answered RATE_LIMITED).
    pub(crate) fn exhaust(&mut self, resource: Resource, reset_at: OffsetDateTime) {
        let window = self.windows.entry(resource).or_insert(RateLimit {
            cost: 0,
            limit: 0,
            remaining: 0,
            reset_at,
        });
        window.remaining = 0;
        window.reset_at = window.reset_at.max(reset_at);
        self.report(resource);
    }

    /// The latest window of a pool.
    pub(crate) fn window(&self, resource: Resource) -> Option<RateLimit> {
        self.windows.get(&resource).copied()
    }
}

#[cfg(test)]
mod tests {
    use time::Duration;

    use super::*;

    fn seen(cost: u32, remaining: u32, reset_at: OffsetDateTime) -> RateLimit {
        RateLimit {
            cost,
            limit: 5000,
            remaining,
            reset_at,
        }
    }

    #[test]
    fn first_call_is_admitted_without_knowledge() {
        let mut ledger = Ledger::default();
        let now = OffsetDateTime::now_utc();
        assert!(
            ledger
                .admit(Resource::Graphql, "Q", Budget::keep(100), now)
                .is_ok()
        );
    }

    #[test]
    fn stops_when_the_next_call_would_go_below_the_floor() {
        let mut ledger = Ledger::default();
        let now = OffsetDateTime::now_utc();
        let reset = now + Duration::minutes(30);
        ledger.record(Resource::Graphql, "Q", seen(3, 105, reset));
        // 105 - 3 = 102 >= 100: admitted, reserving 3.
        ledger
            .admit(Resource::Graphql, "Q", Budget::keep(100), now)
            .unwrap();
        // 102 - 3 = 99 < 100: stopped, with the numbers.
        let stop = ledger
            .admit(Resource::Graphql, "Q", Budget::keep(100), now)
            .unwrap_err();
        assert_eq!(
            (stop.remaining, stop.expected_cost, stop.min_remaining),
            (102, 3, 100)
        );
        assert_eq!(stop.reset_at, reset);
        // Other pools are unaffected.
        assert!(
            ledger
                .admit(Resource::Rest, "GET", Budget::keep(100), now)
                .is_ok()
        );
    }

    #[test]
    fn a_new_window_readmits() {
        let mut ledger = Ledger::default();
        let now = OffsetDateTime::now_utc();
        ledger.record(
            Resource::Graphql,
            "Q",
            seen(1, 0, now - Duration::seconds(1)),
        );
        assert!(
            ledger
                .admit(Resource::Graphql, "Q", Budget::keep(10), now)
                .is_ok()
        );
    }

    #[test]
    fn out_of_order_answers_keep_the_smallest_remaining() {
        let mut ledger = Ledger::default();
        let reset = OffsetDateTime::now_utc() + Duration::minutes(5);
        ledger.record(Resource::Graphql, "Q", seen(1, 50, reset));
        ledger.record(Resource::Graphql, "Q", seen(1, 60, reset));
        assert_eq!(ledger.window(Resource::Graphql).unwrap().remaining, 50);
    }
}
