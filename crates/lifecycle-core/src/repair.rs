//! Provider repair fences: removing what we created at a vendor without ever claiming a removal
//! we cannot prove.
//!
//! Identity advisory locks are taken in identity-hash order before the connection row lock; a
//! dispatch needs a permit bound to the inspected epoch; after an uncertain dispatch only an
//! admin confirmation or a terminal receipt for that exact attempt resolves the fence.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};
use time::Duration;

/// The vendor kind of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProviderKind {
    /// GitHub (App installations).
    Github,
    /// GitLab (hooks).
    Gitlab,
    /// Slack (bot identity and token).
    Slack,
    /// Outline (webhook subscriptions).
    Outline,
}

/// The pseudonymous identity of one upstream resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceIdentity {
    /// The vendor kind.
    pub provider: ProviderKind,
    /// The provider instance (server URL).
    pub instance: String,
    /// The resource's id at the vendor (installation, hook, team+bot user, subscription).
    pub resource: String,
}

/// The advisory-lock key of an identity (the first 8 bytes of its SHA-256, big-endian).
pub fn identity_hash(identity: &ResourceIdentity) -> i64 {
    let mut hasher = Sha256::new();
    for part in [
        format!("{:?}", identity.provider).as_bytes(),
        identity.instance.as_bytes(),
        identity.resource.as_bytes(),
    ] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// The identity locks to take, sorted by hash and deduplicated, before the connection row lock.
pub fn lock_order<'a>(identities: impl IntoIterator<Item = &'a ResourceIdentity>) -> Vec<i64> {
    // Identity-hash order: every adoption and removal locks in the same order, so none deadlock.
    let set: BTreeSet<i64> = identities.into_iter().map(identity_hash).collect();
    set.into_iter().collect()
}

/// The lifecycle state of a connection holding a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderState {
    /// Active.
    Active,
    /// Suspended.
    Suspended,
    /// Any other state (pending, paused, uninstalled, disconnected).
    Inactive,
}

/// Whether a removal may start while these other connections hold the resource.
pub fn removal_may_start(provider: ProviderKind, other_holders: &[HolderState]) -> bool {
    other_holders.iter().all(|holder| match holder {
        HolderState::Active => false,
        // A suspended GitHub or Slack connection keeps its installation or bot identity; suspended
        // GitLab and Outline hooks must go.
        HolderState::Suspended => matches!(provider, ProviderKind::Gitlab | ProviderKind::Outline),
        HolderState::Inactive => true,
    })
}

/// The connection version and lifecycle generation that asked for a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Generation {
    /// The connection row version.
    pub connection_version: u64,
    /// The lifecycle generation.
    pub lifecycle_generation: u64,
}

/// What to do with a resource a creation request returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adoption {
    /// Adopt it: the requesting generation is still current.
    Adopt,
    /// A late result: it becomes a removal target.
    RemovalTarget,
}

/// Decides adoption of a returned resource.
pub fn adopt(requested_by: Generation, current: Generation) -> Adoption {
    if requested_by == current {
        Adoption::Adopt
    } else {
        Adoption::RemovalTarget
    }
}

/// The backoff after `failures` uncertain or unauthorized attempts: 1 minute doubling to 1 hour.
pub fn backoff(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(6);
    Duration::minutes((1i64 << exponent).min(60))
}

/// An inspection's view of the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inspection {
    epoch: u64,
}

/// The permit to call the provider once. Recording it means the attempt may reach the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchPermit {
    /// The attempt this permit is for.
    pub attempt: u64,
}

/// Why a permit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PermitError {
    /// A competing claim or release happened since the inspection.
    #[error("the fence changed since it was inspected; inspect again")]
    StaleInspection,
    /// The fence is resolved.
    #[error("the fence is already resolved")]
    Resolved,
    /// Automatic polling stopped; an instance admin must confirm.
    #[error("the fence awaits an admin's confirmation")]
    AwaitingAdmin,
}

/// The outcome of one dispatched attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchOutcome {
    /// The provider confirmed the removal of this exact attempt.
    TerminalReceipt,
    /// Unknown: a timeout, a crash, GitHub's `202`.
    Uncertain,
    /// The credential was refused; the request did nothing.
    Unauthorized,
}

/// What an ownership check before a retry found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Still ours.
    Ours,
    /// Another owner holds it now.
    ForeignOwner,
    /// Verified absent (a complete listing, an exact marker).
    VerifiedAbsent,
    /// GitHub App-scoped not-found.
    GithubAppNotFound,
    /// Unreadable, a hidden `404`, an expired credential: proves nothing.
    Unproven,
}

/// Where a fence stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceStatus {
    /// Nothing left to do; the fence row may go.
    Resolved,
    /// Retries continue.
    Pending,
    /// Stopped: an instance admin must confirm.
    AwaitingAdmin,
}

/// The removal fence of one captured resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovalFence {
    epoch: u64,
    attempts: u64,
    uncertain: BTreeSet<u64>,
    status: FenceStatus,
}

impl RemovalFence {
    /// A fence captured with its receipt. Without one (a pre-cutover removal or suspended-hook
    /// cleanup), an earlier uncertain call is assumed.
    pub fn capture(with_receipt: bool) -> Self {
        let mut fence = Self {
            epoch: 0,
            attempts: 0,
            uncertain: BTreeSet::new(),
            status: FenceStatus::Pending,
        };
        if !with_receipt {
            fence.attempts = 1;
            fence.uncertain.insert(0);
        }
        fence
    }

    /// Where the fence stands.
    pub fn status(&self) -> FenceStatus {
        self.status
    }

    /// Whether any attempt may have reached the provider.
    pub fn ever_dispatched(&self) -> bool {
        self.attempts > 0
    }

    /// Reads the fence for an inspection.
    pub fn inspect(&self) -> Inspection {
        Inspection { epoch: self.epoch }
    }

    /// A competing claim or a release: older inspections can no longer take a permit.
    pub fn bump_epoch(&mut self) {
        self.epoch += 1;
    }

    /// Takes the dispatch permit; from now on the attempt counts as possibly dispatched.
    pub fn acquire_permit(
        &mut self,
        inspection: Inspection,
    ) -> Result<DispatchPermit, PermitError> {
        match self.status {
            FenceStatus::Resolved => return Err(PermitError::Resolved),
            FenceStatus::AwaitingAdmin => return Err(PermitError::AwaitingAdmin),
            FenceStatus::Pending => {}
        }
        // Epoch fence: an old inspection cannot take a new permit.
        if inspection.epoch != self.epoch {
            return Err(PermitError::StaleInspection);
        }
        let attempt = self.attempts;
        self.attempts += 1;
        self.epoch += 1;
        // A crash after this point leaves the attempt uncertain even if nothing left the process.
        self.uncertain.insert(attempt);
        Ok(DispatchPermit { attempt })
    }

    /// Records the outcome of a dispatched attempt.
    pub fn record(&mut self, permit: DispatchPermit, outcome: DispatchOutcome) -> FenceStatus {
        match outcome {
            // Only a receipt for this exact attempt settles it; it settles no other attempt.
            DispatchOutcome::TerminalReceipt => {
                self.uncertain.remove(&permit.attempt);
                if self.uncertain.is_empty() {
                    self.status = FenceStatus::Resolved;
                }
            }
            DispatchOutcome::Uncertain => {}
            // A refused credential did nothing at the provider.
            DispatchOutcome::Unauthorized => {
                self.uncertain.remove(&permit.attempt);
            }
        }
        self.status
    }

    /// Applies the ownership check that precedes every retry.
    pub fn check_ownership(&mut self, ownership: Ownership) -> FenceStatus {
        if self.status == FenceStatus::Resolved {
            return self.status;
        }
        let proven_gone = matches!(
            ownership,
            Ownership::ForeignOwner | Ownership::VerifiedAbsent | Ownership::GithubAppNotFound
        );
        if proven_gone && !self.ever_dispatched() {
            // Nothing was ever dispatched: absence or a foreign owner resolves the fence.
            self.status = FenceStatus::Resolved;
        } else if proven_gone {
            // After a possible dispatch, absence cannot prove a late DELETE is spent: polling
            // stops and an admin (or that attempt's terminal receipt) must settle it.
            self.status = FenceStatus::AwaitingAdmin;
        }
        self.status
    }

    /// An instance admin confirms the removal.
    pub fn admin_confirm(&mut self) -> FenceStatus {
        self.uncertain.clear();
        self.status = FenceStatus::Resolved;
        self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn identity(resource: &str) -> ResourceIdentity {
        ResourceIdentity {
            provider: ProviderKind::Gitlab,
            instance: "https://gitlab.example".into(),
            resource: resource.into(),
        }
    }

    #[test]
    fn identity_hash_is_stable_and_distinguishes_fields() {
        assert_eq!(
            identity_hash(&identity("h1")),
            identity_hash(&identity("h1"))
        );
        assert_ne!(
            identity_hash(&identity("h1")),
            identity_hash(&identity("h2"))
        );
        let mut other = identity("h1");
        other.provider = ProviderKind::Outline;
        assert_ne!(identity_hash(&identity("h1")), identity_hash(&other));
        let mut moved = identity("h1");
        moved.instance = "https://other.example".into();
        assert_ne!(identity_hash(&identity("h1")), identity_hash(&moved));
    }

    #[test]
    fn locks_are_taken_in_hash_order_without_repeats() {
        let ids = [identity("b"), identity("a"), identity("b")];
        let order = lock_order(&ids);
        assert_eq!(order.len(), 2);
        assert!(order.windows(2).all(|w| w[0] < w[1]));
        let reversed: Vec<_> = ids.iter().rev().cloned().collect();
        assert_eq!(lock_order(&reversed), order);
    }

    #[test]
    fn active_holder_blocks_removal_and_suspended_depends_on_provider() {
        use HolderState::*;
        for provider in [
            ProviderKind::Github,
            ProviderKind::Gitlab,
            ProviderKind::Slack,
            ProviderKind::Outline,
        ] {
            assert!(!removal_may_start(provider, &[Active]));
            assert!(removal_may_start(provider, &[Inactive]));
            assert!(removal_may_start(provider, &[]));
        }
        assert!(!removal_may_start(ProviderKind::Github, &[Suspended]));
        assert!(!removal_may_start(ProviderKind::Slack, &[Suspended]));
        assert!(removal_may_start(ProviderKind::Gitlab, &[Suspended]));
        assert!(removal_may_start(
            ProviderKind::Outline,
            &[Suspended, Inactive]
        ));
    }

    #[test]
    fn only_the_requesting_generation_adopts() {
        let g = Generation {
            connection_version: 3,
            lifecycle_generation: 1,
        };
        assert_eq!(adopt(g, g), Adoption::Adopt);
        let newer = Generation {
            lifecycle_generation: 2,
            ..g
        };
        assert_eq!(adopt(g, newer), Adoption::RemovalTarget);
        let bumped = Generation {
            connection_version: 4,
            ..g
        };
        assert_eq!(adopt(g, bumped), Adoption::RemovalTarget);
    }

    #[test]
    fn backoff_runs_from_a_minute_to_an_hour() {
        assert_eq!(backoff(0), Duration::minutes(1));
        assert_eq!(backoff(1), Duration::minutes(1));
        assert_eq!(backoff(2), Duration::minutes(2));
        assert_eq!(backoff(6), Duration::minutes(32));
        assert_eq!(backoff(7), Duration::hours(1));
        assert_eq!(backoff(u32::MAX), Duration::hours(1));
    }

    #[test]
    fn old_inspection_cannot_take_a_new_permit() {
        let mut fence = RemovalFence::capture(true);
        let stale = fence.inspect();
        fence.bump_epoch();
        assert_eq!(
            fence.acquire_permit(stale),
            Err(PermitError::StaleInspection)
        );
        let fresh = fence.inspect();
        let permit = fence.acquire_permit(fresh).unwrap();
        assert_eq!(permit.attempt, 0);
        // The same inspection cannot take a second permit.
        assert_eq!(
            fence.acquire_permit(fresh),
            Err(PermitError::StaleInspection)
        );
    }

    #[test]
    fn verified_absence_resolves_only_an_undispatched_removal() {
        for ownership in [
            Ownership::VerifiedAbsent,
            Ownership::ForeignOwner,
            Ownership::GithubAppNotFound,
        ] {
            let mut fence = RemovalFence::capture(true);
            assert!(!fence.ever_dispatched());
            assert_eq!(fence.check_ownership(ownership), FenceStatus::Resolved);
            assert_eq!(
                fence.acquire_permit(fence.inspect()),
                Err(PermitError::Resolved)
            );
        }
    }

    #[test]
    fn after_an_uncertain_dispatch_absence_proves_nothing() {
        let mut fence = RemovalFence::capture(true);
        let permit = fence.acquire_permit(fence.inspect()).unwrap();
        assert!(fence.ever_dispatched());
        assert_eq!(
            fence.record(permit, DispatchOutcome::Uncertain),
            FenceStatus::Pending
        );
        assert_eq!(
            fence.check_ownership(Ownership::VerifiedAbsent),
            FenceStatus::AwaitingAdmin
        );
        assert_eq!(
            fence.acquire_permit(fence.inspect()),
            Err(PermitError::AwaitingAdmin)
        );
        assert_eq!(fence.admin_confirm(), FenceStatus::Resolved);
        assert_eq!(
            fence.check_ownership(Ownership::Ours),
            FenceStatus::Resolved
        );
    }

    #[test]
    fn unproven_ownership_changes_nothing() {
        let mut fence = RemovalFence::capture(true);
        assert_eq!(
            fence.check_ownership(Ownership::Unproven),
            FenceStatus::Pending
        );
        assert_eq!(fence.check_ownership(Ownership::Ours), FenceStatus::Pending);
    }

    #[test]
    fn a_later_success_cannot_settle_an_older_uncertain_attempt() {
        let mut fence = RemovalFence::capture(true);
        let first = fence.acquire_permit(fence.inspect()).unwrap();
        fence.record(first, DispatchOutcome::Uncertain);
        let second = fence.acquire_permit(fence.inspect()).unwrap();
        assert_eq!(second.attempt, 1);
        assert_eq!(
            fence.record(second, DispatchOutcome::TerminalReceipt),
            FenceStatus::Pending
        );
        // The receipt for the exact uncertain attempt settles it.
        assert_eq!(
            fence.record(first, DispatchOutcome::TerminalReceipt),
            FenceStatus::Resolved
        );
    }

    #[test]
    fn a_crash_after_the_permit_is_uncertain() {
        let mut fence = RemovalFence::capture(true);
        let _lost = fence.acquire_permit(fence.inspect()).unwrap();
        // No outcome was recorded; absence cannot settle it.
        assert_eq!(
            fence.check_ownership(Ownership::VerifiedAbsent),
            FenceStatus::AwaitingAdmin
        );
    }

    #[test]
    fn unauthorized_attempt_is_not_uncertain_and_receipt_resolves() {
        let mut fence = RemovalFence::capture(true);
        let refused = fence.acquire_permit(fence.inspect()).unwrap();
        assert_eq!(
            fence.record(refused, DispatchOutcome::Unauthorized),
            FenceStatus::Pending
        );
        let retry = fence.acquire_permit(fence.inspect()).unwrap();
        assert_eq!(
            fence.record(retry, DispatchOutcome::TerminalReceipt),
            FenceStatus::Resolved
        );
    }

    #[test]
    fn capture_without_receipt_counts_as_an_earlier_uncertain_call() {
        let mut fence = RemovalFence::capture(false);
        assert!(fence.ever_dispatched());
        let permit = fence.acquire_permit(fence.inspect()).unwrap();
        assert_eq!(
            fence.record(permit, DispatchOutcome::TerminalReceipt),
            FenceStatus::Pending
        );
        assert_eq!(
            fence.check_ownership(Ownership::VerifiedAbsent),
            FenceStatus::AwaitingAdmin
        );
    }

    #[derive(Debug, Clone)]
    enum Step {
        Permit,
        Outcome(usize, u8),
        Ownership(u8),
        Bump,
    }

    fn arb_step() -> impl Strategy<Value = Step> {
        prop_oneof![
            Just(Step::Permit),
            (0usize..4, 0u8..3).prop_map(|(i, o)| Step::Outcome(i, o)),
            (0u8..5).prop_map(Step::Ownership),
            Just(Step::Bump),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn uncertain_attempts_resolve_only_by_their_receipt_or_an_admin(
            steps in proptest::collection::vec(arb_step(), 0..20),
        ) {
            let mut fence = RemovalFence::capture(true);
            let mut permits = Vec::new();
            let mut uncertain = BTreeSet::new();
            for step in steps {
                match step {
                    Step::Permit => {
                        if let Ok(p) = fence.acquire_permit(fence.inspect()) {
                            permits.push(p);
                            uncertain.insert(p.attempt);
                        }
                    }
                    Step::Outcome(i, o) => {
                        if let Some(p) = permits.get(i).copied() {
                            let outcome = [DispatchOutcome::TerminalReceipt, DispatchOutcome::Uncertain, DispatchOutcome::Unauthorized][o as usize];
                            if outcome != DispatchOutcome::Uncertain { uncertain.remove(&p.attempt); }
                            fence.record(p, outcome);
                        }
                    }
                    Step::Ownership(o) => {
                        let ownership = [Ownership::Ours, Ownership::ForeignOwner, Ownership::VerifiedAbsent, Ownership::GithubAppNotFound, Ownership::Unproven][o as usize];
                        fence.check_ownership(ownership);
                    }
                    Step::Bump => fence.bump_epoch(),
                }
                if fence.status() == FenceStatus::Resolved {
                    // Resolved without an admin: no attempt may still be uncertain.
                    prop_assert!(uncertain.is_empty());
                }
            }
        }
    }
}
