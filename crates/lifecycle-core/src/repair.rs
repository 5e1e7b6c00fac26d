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

impl ProviderKind {
    /// Every kind.
    pub const ALL: [ProviderKind; 4] = [Self::Github, Self::Gitlab, Self::Slack, Self::Outline];

    /// The stored name, the connection kind's (`gitlab`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Github => "github",
            Self::Gitlab => "gitlab",
            Self::Slack => "slack",
            Self::Outline => "outline",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
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
    /// Active, or paused (a pause gives nothing up).
    Active,
    /// Suspended.
    Suspended,
    /// Any other state (pending, uninstalled, disconnected).
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
    /// The fence is resolved or released.
    #[error("the fence is already settled")]
    Settled,
    /// Automatic polling stopped; an instance admin must confirm.
    #[error("the fence awaits an admin's confirmation")]
    AwaitingAdmin,
}

/// Why an admin's confirmation or release was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// The fence is resolved or released already.
    #[error("the fence is already settled; nothing to confirm or release")]
    Settled,
    /// The named attempt is not one whose outcome is unknown.
    #[error("attempt {0} is not uncertain; only an uncertain attempt can be confirmed")]
    NotUncertain(u64),
}

/// The outcome of one dispatched attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchOutcome {
    /// The provider confirmed the removal of this exact attempt (a 2xx other than `202`).
    TerminalReceipt,
    /// Unknown: a timeout, a crash, a 5xx, GitHub's `202`.
    Uncertain,
    /// The credential was refused (401, 403); the request did nothing.
    Unauthorized,
    /// Any other refusal (a 404, hidden or not; a 4xx): the request did nothing, and proves
    /// nothing about the resource either.
    Refused,
}

impl DispatchOutcome {
    /// Classifies a removal's HTTP answer; `None` when no answer came (a timeout, a broken
    /// connection).
    pub fn of_response(status: Option<u16>) -> Self {
        match status {
            // Accepted is not done: a 202 is as unknown as a timeout.
            Some(202) => Self::Uncertain,
            Some(200..=299) => Self::TerminalReceipt,
            Some(401 | 403) => Self::Unauthorized,
            // A hidden 404 never proves the removal; it only says this request did nothing.
            Some(400..=499) => Self::Refused,
            Some(_) | None => Self::Uncertain,
        }
    }
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
    /// The credential was refused (401, 403): it proves nothing and needs a new credential.
    CredentialRefused,
    /// Unreadable, a hidden `404`, an incomplete listing: proves nothing.
    Unproven,
}

/// Where a fence stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FenceStatus {
    /// Retries continue when due.
    Pending,
    /// The credential was refused; retries back off until a new credential wakes them.
    NeedsAuthorization,
    /// Automatic polling stopped: an instance admin must confirm (or that attempt's receipt).
    AwaitingAdmin,
    /// Removed, with proof.
    Resolved,
    /// An admin released it without proof of removal.
    Released,
}

impl FenceStatus {
    /// Every status, for listing and metrics.
    pub const ALL: [FenceStatus; 5] = [
        Self::Pending,
        Self::NeedsAuthorization,
        Self::AwaitingAdmin,
        Self::Resolved,
        Self::Released,
    ];

    /// The stored and API name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::NeedsAuthorization => "needs_authorization",
            Self::AwaitingAdmin => "awaiting_admin",
            Self::Resolved => "resolved",
            Self::Released => "released",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Resolved or released: nothing more happens to the fence.
    pub const fn is_settled(self) -> bool {
        matches!(self, Self::Resolved | Self::Released)
    }
}

/// A fence as stored (one row's columns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFence {
    pub epoch: u64,
    /// Permits taken so far (the next attempt's number).
    pub attempts: u64,
    /// Attempts whose outcome is unknown.
    pub uncertain: BTreeSet<u64>,
    /// Failed tries in a row (uncertain, refused, unreadable), for the backoff.
    pub failures: u32,
    pub status: FenceStatus,
}

/// The removal fence of one captured resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovalFence {
    epoch: u64,
    attempts: u64,
    uncertain: BTreeSet<u64>,
    failures: u32,
    status: FenceStatus,
}

impl From<StoredFence> for RemovalFence {
    fn from(s: StoredFence) -> Self {
        Self {
            epoch: s.epoch,
            attempts: s.attempts,
            uncertain: s.uncertain,
            failures: s.failures,
            status: s.status,
        }
    }
}

impl RemovalFence {
    /// A fence captured with its receipt. Without one (a pre-cutover removal or suspended-hook
    /// cleanup), an earlier uncertain call is assumed.
    pub fn capture(with_receipt: bool) -> Self {
        let mut fence = Self {
            epoch: 0,
            attempts: 0,
            uncertain: BTreeSet::new(),
            failures: 0,
            status: FenceStatus::Pending,
        };
        if !with_receipt {
            fence.attempts = 1;
            fence.uncertain.insert(0);
        }
        fence
    }

    /// The fence as stored.
    pub fn stored(&self) -> StoredFence {
        StoredFence {
            epoch: self.epoch,
            attempts: self.attempts,
            uncertain: self.uncertain.clone(),
            failures: self.failures,
            status: self.status,
        }
    }

    /// Where the fence stands.
    pub fn status(&self) -> FenceStatus {
        self.status
    }

    /// The attempts whose outcome is unknown.
    pub fn uncertain(&self) -> impl Iterator<Item = u64> + '_ {
        self.uncertain.iter().copied()
    }

    /// Whether an attempt may still reach the provider late: some permit's outcome is unknown.
    /// A refused request (401, 403, 404) can never land late, and a receipted one is spent.
    pub fn ever_dispatched(&self) -> bool {
        !self.uncertain.is_empty()
    }

    /// When automatic polling tries next, from the last change; `None` once it stopped
    /// (awaiting an admin, or settled).
    pub fn retry_after(&self) -> Option<Duration> {
        match self.status {
            FenceStatus::Pending | FenceStatus::NeedsAuthorization => Some(if self.failures == 0 {
                Duration::ZERO
            } else {
                backoff(self.failures)
            }),
            FenceStatus::AwaitingAdmin | FenceStatus::Resolved | FenceStatus::Released => None,
        }
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
            FenceStatus::Resolved | FenceStatus::Released => return Err(PermitError::Settled),
            FenceStatus::AwaitingAdmin => return Err(PermitError::AwaitingAdmin),
            FenceStatus::Pending | FenceStatus::NeedsAuthorization => {}
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
        if self.status.is_settled() {
            return self.status;
        }
        match outcome {
            // Only a receipt for this exact attempt settles it; it settles no other attempt.
            DispatchOutcome::TerminalReceipt => {
                self.uncertain.remove(&permit.attempt);
                self.failures = 0;
                self.status = if self.uncertain.is_empty() {
                    FenceStatus::Resolved
                } else {
                    // The resource is gone, but an older request's fate is unknown: only an admin
                    // or that request's own receipt settles it; nothing is left to retry.
                    FenceStatus::AwaitingAdmin
                };
            }
            DispatchOutcome::Uncertain => {
                self.failures = self.failures.saturating_add(1);
                if self.status == FenceStatus::NeedsAuthorization {
                    self.status = FenceStatus::Pending;
                }
            }
            // A refused request did nothing at the provider, and proves nothing either.
            DispatchOutcome::Unauthorized | DispatchOutcome::Refused => {
                self.uncertain.remove(&permit.attempt);
                self.failures = self.failures.saturating_add(1);
                if outcome == DispatchOutcome::Unauthorized
                    && self.status != FenceStatus::AwaitingAdmin
                {
                    self.status = FenceStatus::NeedsAuthorization;
                }
            }
        }
        self.status
    }

    /// Applies the ownership check that precedes every retry.
    pub fn check_ownership(&mut self, ownership: Ownership) -> FenceStatus {
        if self.status.is_settled() {
            return self.status;
        }
        match ownership {
            Ownership::ForeignOwner | Ownership::VerifiedAbsent | Ownership::GithubAppNotFound => {
                self.status = if self.ever_dispatched() {
                    // After a possible dispatch, absence cannot prove a late DELETE is spent:
                    // polling stops and an admin (or that attempt's receipt) must settle it.
                    FenceStatus::AwaitingAdmin
                } else {
                    // Nothing was ever dispatched: absence or a foreign owner resolves it.
                    FenceStatus::Resolved
                };
            }
            // Expiry and refusal never prove completion; they wait for a credential.
            Ownership::CredentialRefused => {
                self.failures = self.failures.saturating_add(1);
                if self.status != FenceStatus::AwaitingAdmin {
                    self.status = FenceStatus::NeedsAuthorization;
                }
            }
            Ownership::Unproven => self.failures = self.failures.saturating_add(1),
            Ownership::Ours => {
                if self.status == FenceStatus::NeedsAuthorization {
                    self.status = FenceStatus::Pending;
                }
            }
        }
        self.status
    }

    /// A new credential arrived: a fence waiting for one is due at once.
    pub fn credential_replaced(&mut self) -> FenceStatus {
        if self.status == FenceStatus::NeedsAuthorization {
            self.status = FenceStatus::Pending;
            self.failures = 0;
        }
        self.status
    }

    /// An instance admin confirms that uncertain `attempt` removed the resource; the fence is
    /// resolved once no attempt stays uncertain.
    pub fn admin_confirm(&mut self, attempt: u64) -> Result<FenceStatus, AdminError> {
        if self.status.is_settled() {
            return Err(AdminError::Settled);
        }
        if !self.uncertain.remove(&attempt) {
            return Err(AdminError::NotUncertain(attempt));
        }
        self.bump_epoch();
        if self.uncertain.is_empty() {
            self.status = FenceStatus::Resolved;
        }
        Ok(self.status)
    }

    /// An instance admin releases the fence without proof of removal.
    pub fn admin_release(&mut self) -> Result<FenceStatus, AdminError> {
        if self.status.is_settled() {
            return Err(AdminError::Settled);
        }
        // A release is a competing claim: no inspection before it may take a permit after it.
        self.bump_epoch();
        self.status = FenceStatus::Released;
        Ok(self.status)
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
                Err(PermitError::Settled)
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
        assert_eq!(fence.admin_confirm(1), Err(AdminError::NotUncertain(1)));
        assert_eq!(fence.admin_confirm(0), Ok(FenceStatus::Resolved));
        assert_eq!(fence.admin_confirm(0), Err(AdminError::Settled));
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
        // The resource is gone by the second, but the first may still land: an admin's call.
        assert_eq!(
            fence.record(second, DispatchOutcome::TerminalReceipt),
            FenceStatus::AwaitingAdmin
        );
        assert_eq!(fence.retry_after(), None);
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
            FenceStatus::NeedsAuthorization
        );
        assert!(!fence.ever_dispatched());
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
            FenceStatus::AwaitingAdmin
        );
        assert_eq!(
            fence.check_ownership(Ownership::VerifiedAbsent),
            FenceStatus::AwaitingAdmin
        );
        // The assumed earlier call is attempt 0: an admin confirms it.
        assert_eq!(fence.admin_confirm(0), Ok(FenceStatus::Resolved));
    }

    #[test]
    fn responses_are_classified_by_what_they_prove() {
        use DispatchOutcome::*;
        assert_eq!(DispatchOutcome::of_response(Some(204)), TerminalReceipt);
        assert_eq!(DispatchOutcome::of_response(Some(200)), TerminalReceipt);
        // GitHub's 202, a 5xx and no answer at all are unknown.
        for unknown in [Some(202), Some(500), Some(503), None] {
            assert_eq!(
                DispatchOutcome::of_response(unknown),
                Uncertain,
                "{unknown:?}"
            );
        }
        assert_eq!(DispatchOutcome::of_response(Some(401)), Unauthorized);
        assert_eq!(DispatchOutcome::of_response(Some(403)), Unauthorized);
        // A hidden 404 is no receipt.
        assert_eq!(DispatchOutcome::of_response(Some(404)), Refused);
        assert_eq!(DispatchOutcome::of_response(Some(422)), Refused);
    }

    #[test]
    fn unauthorized_needs_a_credential_and_backs_off_a_minute_to_an_hour() {
        let mut fence = RemovalFence::capture(true);
        assert_eq!(fence.retry_after(), Some(Duration::ZERO));
        let mut waits = Vec::new();
        for _ in 0..9 {
            let permit = fence.acquire_permit(fence.inspect()).unwrap();
            assert_eq!(
                fence.record(permit, DispatchOutcome::Unauthorized),
                FenceStatus::NeedsAuthorization
            );
            waits.push(fence.retry_after().unwrap());
        }
        assert_eq!(waits[0], Duration::minutes(1));
        assert!(waits.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*waits.last().unwrap(), Duration::hours(1));
        // A new credential makes it due at once.
        assert_eq!(fence.credential_replaced(), FenceStatus::Pending);
        assert_eq!(fence.retry_after(), Some(Duration::ZERO));
    }

    #[test]
    fn a_refused_listing_needs_authorization_and_proves_nothing() {
        let mut fence = RemovalFence::capture(true);
        assert_eq!(
            fence.check_ownership(Ownership::CredentialRefused),
            FenceStatus::NeedsAuthorization
        );
        assert_eq!(fence.retry_after(), Some(Duration::minutes(1)));
        // A readable listing that still shows the resource puts it back to work.
        assert_eq!(fence.check_ownership(Ownership::Ours), FenceStatus::Pending);
    }

    #[test]
    fn uncertain_outcomes_back_off_and_end_with_an_admin_unless_their_receipt() {
        for answer in [None, Some(500), Some(202)] {
            let mut fence = RemovalFence::capture(true);
            let permit = fence.acquire_permit(fence.inspect()).unwrap();
            let outcome = DispatchOutcome::of_response(answer);
            assert_eq!(fence.record(permit, outcome), FenceStatus::Pending);
            assert_eq!(fence.retry_after(), Some(Duration::minutes(1)));
            // Applied then timed out: the retry's listing finds it gone, which proves nothing.
            assert_eq!(
                fence.check_ownership(Ownership::VerifiedAbsent),
                FenceStatus::AwaitingAdmin
            );
            assert_eq!(fence.retry_after(), None);
            // That attempt's own receipt still settles it.
            assert_eq!(
                fence.record(permit, DispatchOutcome::TerminalReceipt),
                FenceStatus::Resolved
            );
        }
    }

    #[test]
    fn a_hidden_404_is_no_receipt() {
        let mut fence = RemovalFence::capture(true);
        let permit = fence.acquire_permit(fence.inspect()).unwrap();
        assert_eq!(
            fence.record(permit, DispatchOutcome::of_response(Some(404))),
            FenceStatus::Pending
        );
        assert_ne!(fence.status(), FenceStatus::Resolved);
        assert_eq!(fence.retry_after(), Some(Duration::minutes(1)));
    }

    #[test]
    fn release_settles_and_fences_out_older_inspections() {
        let mut fence = RemovalFence::capture(true);
        let before = fence.inspect();
        assert_eq!(fence.admin_release(), Ok(FenceStatus::Released));
        assert_eq!(fence.acquire_permit(before), Err(PermitError::Settled));
        assert_eq!(fence.admin_release(), Err(AdminError::Settled));
        assert_eq!(fence.admin_confirm(0), Err(AdminError::Settled));
        // Nothing moves a released fence: not a late receipt, not an ownership check.
        assert_eq!(
            fence.check_ownership(Ownership::VerifiedAbsent),
            FenceStatus::Released
        );
        assert_eq!(fence.credential_replaced(), FenceStatus::Released);
    }

    #[test]
    fn confirming_a_settled_fence_or_a_certain_attempt_is_refused() {
        let mut fence = RemovalFence::capture(true);
        let permit = fence.acquire_permit(fence.inspect()).unwrap();
        fence.record(permit, DispatchOutcome::TerminalReceipt);
        assert_eq!(
            fence.admin_confirm(permit.attempt),
            Err(AdminError::Settled)
        );
        let mut fence = RemovalFence::capture(true);
        assert_eq!(fence.admin_confirm(0), Err(AdminError::NotUncertain(0)));
    }

    #[test]
    fn a_fence_survives_being_stored() {
        let mut fence = RemovalFence::capture(false);
        let permit = fence.acquire_permit(fence.inspect()).unwrap();
        fence.record(permit, DispatchOutcome::Uncertain);
        let restored = RemovalFence::from(fence.stored());
        assert_eq!(restored, fence);
        for status in FenceStatus::ALL {
            assert_eq!(FenceStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(FenceStatus::parse("unknown"), None);
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
            (0usize..4, 0u8..4).prop_map(|(i, o)| Step::Outcome(i, o)),
            (0u8..6).prop_map(Step::Ownership),
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
                            let outcome = [DispatchOutcome::TerminalReceipt, DispatchOutcome::Uncertain, DispatchOutcome::Unauthorized, DispatchOutcome::Refused][o as usize];
                            if outcome != DispatchOutcome::Uncertain { uncertain.remove(&p.attempt); }
                            fence.record(p, outcome);
                        }
                    }
                    Step::Ownership(o) => {
                        let ownership = [Ownership::Ours, Ownership::ForeignOwner, Ownership::VerifiedAbsent, Ownership::GithubAppNotFound, Ownership::CredentialRefused, Ownership::Unproven][o as usize];
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
