//! Deliveries a second per workspace, for deliveries a tenant signed itself (on an endpoint whose
//! secret it chose or was shown). Such a tenant can sign as many as it likes; the vendor's own
//! deliveries are bounded by the vendor. A token bucket per workspace, in this replica: `rate`
//! a second sustained, `burst` at once. Past it the delivery is answered 429 with `Retry-After`
//! and nothing is stored. Counted only once a delivery verified, so no one without the secret
//! can spend a workspace's quota.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid;

/// Workspaces tracked at most before full buckets are forgotten (a full bucket is the same as
/// none).
const TRACKED: usize = 10_000;

/// The per-workspace buckets of this replica.
#[derive(Debug)]
pub struct DeliveryQuota {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<Uuid, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl DeliveryQuota {
    /// `rate` deliveries a second sustained (0: no quota), `burst` at once (at least 1).
    pub fn new(rate: u32, burst: u32) -> Self {
        DeliveryQuota {
            rate: f64::from(rate),
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one delivery of `workspace` at `now`; past the quota, how long until one fits.
    pub fn take(&self, workspace: Uuid, now: Instant) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= TRACKED && !buckets.contains_key(&workspace) {
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, b| b.refilled(now, rate, burst) < burst);
        }
        let bucket = buckets.entry(workspace).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        bucket.tokens = bucket.refilled(now, self.rate, self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / self.rate))
        }
    }
}

impl Bucket {
    fn refilled(&self, now: Instant, rate: f64, burst: f64) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + elapsed * rate).min(burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_gets_its_burst_then_its_rate_and_others_their_own() {
        let q = DeliveryQuota::new(10, 3);
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(q.take(a, t0).is_ok());
        }
        let wait = q.take(a, t0).expect_err("past the burst");
        assert!(
            wait <= Duration::from_millis(100) && !wait.is_zero(),
            "{wait:?}"
        );
        assert!(
            q.take(b, t0).is_ok(),
            "another workspace has its own bucket"
        );
        assert!(
            q.take(a, t0 + Duration::from_millis(100)).is_ok(),
            "refilled"
        );
        assert!(q.take(a, t0 + Duration::from_millis(100)).is_err());
    }

    #[test]
    fn no_rate_is_no_quota() {
        let q = DeliveryQuota::new(0, 1);
        let a = Uuid::now_v7();
        for _ in 0..100 {
            assert!(q.take(a, Instant::now()).is_ok());
        }
    }
}
