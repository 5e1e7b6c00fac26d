//! Rate-limit accounting from GitLab's `RateLimit-*` headers, in the shape of github-client's:
//! the latest window GitLab reported, and the caller's floor under it.
//!
//! GitLab has one request pool per user (GraphQL and REST alike), and each request costs one.
//! Before a call, if what is left minus one would fall below the caller's [`Budget`], the call
//! is not sent: the client answers [`crate::Error::BudgetExhausted`] and the caller treats its
//! listing as incomplete.

use std::fmt;

use time::OffsetDateTime;

/// The caller's floor: calls stop while they would leave fewer requests than this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Budget {
    /// Requests to keep in reserve, e.g. for webhooks' follow-up reads.
    pub min_remaining: u32,
}

impl Budget {
    /// Keeps `min_remaining` in reserve.
    pub fn keep(min_remaining: u32) -> Self {
        Self { min_remaining }
    }

    /// Spends down to zero (GitLab's own limit still applies).
    pub fn unlimited() -> Self {
        Self { min_remaining: 0 }
    }
}

/// GitLab's account of its rate-limit window after a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// `RateLimit-Limit`.
    pub limit: u32,
    /// `RateLimit-Remaining`.
    pub remaining: u32,
    /// `RateLimit-Reset` (unix seconds).
    pub reset_at: OffsetDateTime,
}

/// Why a call was not sent: the numbers the caller records on its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetStop {
    /// The operation that was not sent (`ProjectIssues`, `GET notes`, ...).
    pub operation: &'static str,
    /// What GitLab last said was left.
    pub remaining: u32,
    /// The caller's floor.
    pub min_remaining: u32,
    /// When the window resets and calls can resume.
    pub reset_at: OffsetDateTime,
}

impl fmt::Display for BudgetStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GitLab budget: {} left, {} would cost 1, keeping {} in reserve; resets at {}",
            self.remaining, self.operation, self.min_remaining, self.reset_at
        )
    }
}

/// The latest known window, shared by clones of a client.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    window: Option<RateLimit>,
    /// Where what GitLab says is left is reported, if anywhere (resource `api`: one pool).
    pub(crate) quota: Option<vendor_http::quota::QuotaGauge>,
}

impl Ledger {
    /// Admits a call, reserving its one request, or says why not.
    pub(crate) fn admit(
        &mut self,
        operation: &'static str,
        budget: Budget,
        now: OffsetDateTime,
    ) -> Result<(), BudgetStop> {
        // Before the first answer, or after the window reset, we know nothing: learn from it.
        let Some(window) = self.window.as_mut().filter(|w| w.reset_at > now) else {
            self.window = None;
            return Ok(());
        };
        if window.remaining < 1 + budget.min_remaining {
            return Err(BudgetStop {
                operation,
                remaining: window.remaining,
                min_remaining: budget.min_remaining,
                reset_at: window.reset_at,
            });
        }
        // Reserved so concurrent callers cannot all pass on the same last request.
        window.remaining -= 1;
        Ok(())
    }

    /// Records GitLab's account after a call.
    pub(crate) fn record(&mut self, seen: RateLimit) {
        match &mut self.window {
            // Answers of concurrent calls arrive out of order; within one window the smallest
            // remaining is the latest truth.
            Some(window) if window.reset_at == seen.reset_at => {
                window.remaining = window.remaining.min(seen.remaining);
                window.limit = seen.limit;
            }
            _ => self.window = Some(seen),
        }
        if let (Some(quota), Some(window)) = (&self.quota, &self.window) {
            quota.report("api", window.remaining, window.limit);
        }
    }

    /// The latest window.
    pub(crate) fn window(&self) -> Option<RateLimit> {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use time::Duration;

    use super::*;

    #[test]
    fn stops_when_the_next_call_would_go_below_the_floor() {
        let mut ledger = Ledger::default();
        let now = OffsetDateTime::now_utc();
        assert!(
            ledger.admit("Q", Budget::keep(10), now).is_ok(),
            "nothing known yet"
        );
        let reset_at = now + Duration::minutes(1);
        ledger.record(RateLimit {
            limit: 600,
            remaining: 12,
            reset_at,
        });
        ledger.admit("Q", Budget::keep(10), now).unwrap();
        ledger.admit("Q", Budget::keep(10), now).unwrap();
        let stop = ledger.admit("Q", Budget::keep(10), now).unwrap_err();
        assert_eq!((stop.remaining, stop.min_remaining), (10, 10));
        // A reset window readmits.
        assert!(ledger.admit("Q", Budget::keep(10), reset_at).is_ok());
    }
}
