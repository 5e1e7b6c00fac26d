//! A GitLab merge request's review decision, derived from what reviewers and approvers did, and
//! the gates on approval acts, approval resets, pushes and readiness reads.
//!
//! `None` always means unknown: a decision is never guessed from a list that was not read whole.

use std::collections::BTreeSet;

use crate::Timestamp;
use crate::partial::Field;
use crate::snapshot::ListRead;

/// The review decision of a merge request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReviewDecision {
    /// A request for changes stands.
    ChangesRequested,
    /// Someone approved and the approval rules are met.
    Approved,
    /// Anything else, including approvals that leave required approvals missing.
    ReviewRequired,
}

/// A reviewer's review state as GitLab reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReviewerState {
    /// Asked, not yet reviewed.
    Unreviewed,
    /// Reviewing.
    Reviewing,
    /// Reviewed (commented).
    Reviewed,
    /// Requested changes.
    RequestedChanges,
    /// Approved.
    Approved,
    /// Unapproved.
    Unapproved,
}

/// A reviewer's state as a webhook or page states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatedReview<S> {
    /// The reviewer is named without a state (GitLab before 18.6).
    NotStated,
    /// A state we know.
    Known(S),
    /// A state we do not know (a newer GitLab).
    Unrecognized,
}

/// The stored state of one reviewer after a webhook or page names them.
pub fn merge_reviewer_state<S>(stored: Option<S>, incoming: StatedReview<S>) -> Option<S> {
    match incoming {
        // Named without a state: keep the stored state.
        StatedReview::NotStated => stored,
        StatedReview::Known(state) => Some(state),
        // An unknown state clears the stored one, so no old verdict is left standing.
        StatedReview::Unrecognized => None,
    }
}

/// Whether a system note is GitLab's "requested changes" note: the only thing that attributes a
/// request for changes to a person (the note's author).
pub fn requests_changes(system_note_body: &str) -> bool {
    system_note_body.trim() == "requested changes"
}

/// Derives the decision; `None` when it cannot be known.
///
/// `approved` is GitLab's `approved` (approval rules met); `requested_changes_status` is whether the
/// detailed merge status is REQUESTED_CHANGES (absent on tiers without it).
pub fn review_decision<U>(
    reviewers: &ListRead<ReviewerState>,
    approvers: &ListRead<U>,
    approved: Field<bool>,
    requested_changes_status: Field<bool>,
) -> Option<ReviewDecision> {
    // A list not read whole could hide a decision.
    let (ListRead::Whole(reviewers), ListRead::Whole(approvers)) = (reviewers, approvers) else {
        return None;
    };
    if reviewers.contains(&ReviewerState::RequestedChanges)
        || requested_changes_status == Field::Known(true)
    {
        return Some(ReviewDecision::ChangesRequested);
    }
    if requested_changes_status == Field::Unknown {
        // A failed field is unknown, never a value: it could hide a request for changes.
        return None;
    }
    if approvers.is_empty() {
        return Some(ReviewDecision::ReviewRequired);
    }
    match approved {
        Field::Known(true) => Some(ReviewDecision::Approved),
        Field::Known(false) => Some(ReviewDecision::ReviewRequired),
        // A failed `approved` is not a refusal.
        Field::Absent | Field::Unknown => None,
    }
}

/// Readiness facts that an accepted act or a push leaves unknown (`None`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Readiness {
    /// The review decision.
    pub decision: Option<ReviewDecision>,
    /// Approval-derived mergeability.
    pub mergeable: Option<bool>,
    /// Approval-derived detailed merge status.
    pub merge_status: Option<String>,
}

/// The stored review facts of one merge request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewFacts<U> {
    /// The stored version (updated_at).
    pub version: Timestamp,
    /// The stored head commit.
    pub head: String,
    /// The people whose approval stands.
    pub approvals: BTreeSet<U>,
    /// When the stored approver list was requested.
    pub approval_read_at: Option<Timestamp>,
    /// Decision, mergeability and merge status.
    pub readiness: Readiness,
}

/// What an approval webhook says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActKind {
    /// approved / approval.
    Approve,
    /// unapproved / unapproval.
    Unapprove,
    /// A system reset after a push (all approvals, or Code Owners' only).
    ResetOnPush,
}

/// One approval act from a webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalAct<U> {
    /// Who acted (for a reset: who pushed).
    pub user: U,
    /// What the act was.
    pub kind: ActKind,
    /// The merge request's updated_at in the hook.
    pub version: Timestamp,
    /// The head commit in the hook.
    pub head: String,
    /// When JetStream stored the hook.
    pub received_at: Timestamp,
}

/// Why an act or read changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Its version is older than stored.
    OlderVersion,
    /// It is about another head.
    OtherHead,
    /// It was received before the stored approval read, which already reflects it.
    BeforeStoredRead,
}

/// What an act or read did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewOutcome {
    /// Changed nothing.
    Rejected(Rejection),
    /// Accepted; `changed` says whether anyone's review changed.
    Accepted {
        /// Whether a stored fact changed.
        changed: bool,
    },
}

impl<U: Ord + Clone> ReviewFacts<U> {
    fn fence(&self, version: Timestamp, head: &str, at: Timestamp) -> Result<(), Rejection> {
        // Version and head gate: an older version or another head changes no review facts.
        if version < self.version {
            return Err(Rejection::OlderVersion);
        }
        if head != self.head {
            return Err(Rejection::OtherHead);
        }
        // Dated snapshot: an act or read from before the stored approval read belongs to it.
        if self.approval_read_at.is_some_and(|read_at| at < read_at) {
            return Err(Rejection::BeforeStoredRead);
        }
        Ok(())
    }

    /// Applies one approval act from a webhook.
    pub fn apply_act(&mut self, act: &ApprovalAct<U>) -> ReviewOutcome {
        if let Err(rejection) = self.fence(act.version, &act.head, act.received_at) {
            return ReviewOutcome::Rejected(rejection);
        }
        let changed = match act.kind {
            ActKind::Approve => self.approvals.insert(act.user.clone()),
            ActKind::Unapprove => self.approvals.remove(&act.user),
            // A reset does not say whose approvals went: dismiss no one, know nothing.
            ActKind::ResetOnPush => true,
        };
        if changed {
            // An accepted act leaves the decision and approval-derived readiness unknown; a
            // redelivery changes no one's review and leaves a decision read since in place.
            self.readiness = Readiness::default();
        }
        ReviewOutcome::Accepted { changed }
    }

    /// Records a push to `new_head`: readiness is unknown for the new head; approvals stay.
    pub fn push(&mut self, new_head: &str) {
        self.head = new_head.to_owned();
        self.readiness = Readiness::default();
    }

    /// Applies a readiness read or sync page requested at `read.requested_at`.
    pub fn apply_read(&mut self, read: ReadinessRead<U>) -> ReviewOutcome {
        if let Err(rejection) = self.fence(read.version, &read.head, read.requested_at) {
            return ReviewOutcome::Rejected(rejection);
        }
        let before = (self.approvals.clone(), self.readiness.clone());
        self.approval_read_at = Some(read.requested_at);
        if !read.settled {
            // GitLab still checking or syncing approvals: mergeability and approvals unknown.
            self.readiness = Readiness::default();
            return ReviewOutcome::Accepted {
                changed: before != (self.approvals.clone(), self.readiness.clone()),
            };
        }
        let decision = review_decision(
            &read.reviewers,
            &read.approvers,
            read.approved,
            read.requested_changes_status,
        );
        if let ListRead::Whole(approvers) = read.approvers {
            self.approvals = approvers.into_iter().collect();
        }
        self.readiness = Readiness {
            decision,
            mergeable: read.mergeable.known(),
            merge_status: read.merge_status.known(),
        };
        ReviewOutcome::Accepted {
            changed: before != (self.approvals.clone(), self.readiness.clone()),
        }
    }
}

/// A readiness read (after a hook) or a sync page of one merge request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadinessRead<U> {
    /// When the read was requested.
    pub requested_at: Timestamp,
    /// The merge request's updated_at as read.
    pub version: Timestamp,
    /// The head as read.
    pub head: String,
    /// Whether GitLab's status is settled (not `checking` or `approvals_syncing`).
    pub settled: bool,
    /// The reviewers' states.
    pub reviewers: ListRead<ReviewerState>,
    /// The current approvers.
    pub approvers: ListRead<U>,
    /// GitLab's `approved`.
    pub approved: Field<bool>,
    /// Whether the detailed merge status is REQUESTED_CHANGES.
    pub requested_changes_status: Field<bool>,
    /// Whether the merge request can be merged.
    pub mergeable: Field<bool>,
    /// The detailed merge status.
    pub merge_status: Field<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReviewerState::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_timestamp(secs).unwrap()
    }

    fn whole<T>(items: Vec<T>) -> ListRead<T> {
        ListRead::Whole(items)
    }

    #[test]
    fn decision_is_none_when_a_list_was_not_read_whole() {
        let approvers = whole(vec!["a"]);
        let partial = ListRead::<&str>::Partial;
        let k = Field::Known(true);
        assert_eq!(
            review_decision(&ListRead::Partial, &approvers, k, Field::Absent),
            None
        );
        assert_eq!(
            review_decision(&whole(vec![Approved]), &partial, k, Field::Absent),
            None
        );
    }

    #[test]
    fn any_requested_changes_wins() {
        let approvers = whole(vec!["a"]);
        assert_eq!(
            review_decision(
                &whole(vec![Approved, RequestedChanges]),
                &approvers,
                Field::Known(true),
                Field::Absent
            ),
            Some(ReviewDecision::ChangesRequested)
        );
        assert_eq!(
            review_decision(
                &whole(vec![]),
                &approvers,
                Field::Known(true),
                Field::Known(true)
            ),
            Some(ReviewDecision::ChangesRequested)
        );
    }

    #[test]
    fn approved_needs_an_approver_and_rules_met() {
        let none: ListRead<&str> = whole(vec![]);
        let one = whole(vec!["a"]);
        let r = whole(vec![Reviewed]);
        // A project requiring no approval meets the rules with nobody approving.
        assert_eq!(
            review_decision(&r, &none, Field::Known(true), Field::Absent),
            Some(ReviewDecision::ReviewRequired)
        );
        assert_eq!(
            review_decision(&r, &one, Field::Known(true), Field::Known(false)),
            Some(ReviewDecision::Approved)
        );
        assert_eq!(
            review_decision(&r, &one, Field::Known(false), Field::Absent),
            Some(ReviewDecision::ReviewRequired)
        );
    }

    #[test]
    fn fails_closed_on_a_failed_approved_or_merge_status() {
        let one = whole(vec!["a"]);
        let r = whole(vec![Reviewed]);
        assert_eq!(
            review_decision(&r, &one, Field::Unknown, Field::Absent),
            None
        );
        assert_eq!(
            review_decision(&r, &one, Field::Absent, Field::Absent),
            None
        );
        assert_eq!(
            review_decision(&r, &one, Field::Known(true), Field::Unknown),
            None
        );
    }

    #[test]
    fn only_the_requested_changes_note_names_a_request() {
        assert!(requests_changes("requested changes"));
        assert!(!requests_changes("approved this merge request"));
        assert!(!requests_changes("requested review from @bob"));
        assert!(!requests_changes("I requested changes earlier"));
    }

    #[test]
    fn reviewer_named_without_state_keeps_the_stored_state() {
        assert_eq!(
            merge_reviewer_state(Some(Approved), StatedReview::NotStated),
            Some(Approved)
        );
        assert_eq!(
            merge_reviewer_state(Some(Approved), StatedReview::Known(Reviewing)),
            Some(Reviewing)
        );
        assert_eq!(
            merge_reviewer_state(Some(Approved), StatedReview::Unrecognized),
            None
        );
    }

    fn facts() -> ReviewFacts<&'static str> {
        ReviewFacts {
            version: at(100),
            head: "h1".into(),
            approvals: BTreeSet::from(["bob"]),
            approval_read_at: Some(at(50)),
            readiness: Readiness {
                decision: Some(ReviewDecision::Approved),
                mergeable: Some(true),
                merge_status: Some("mergeable".into()),
            },
        }
    }

    fn act(
        user: &'static str,
        kind: ActKind,
        version: i64,
        head: &str,
        received: i64,
    ) -> ApprovalAct<&'static str> {
        ApprovalAct {
            user,
            kind,
            version: at(version),
            head: head.into(),
            received_at: at(received),
        }
    }

    #[test]
    fn accepted_act_leaves_the_decision_unknown() {
        let mut f = facts();
        assert_eq!(
            f.apply_act(&act("amy", ActKind::Approve, 100, "h1", 60)),
            ReviewOutcome::Accepted { changed: true }
        );
        assert!(f.approvals.contains("amy"));
        assert_eq!(f.readiness, Readiness::default());
        let mut f = facts();
        assert_eq!(
            f.apply_act(&act("bob", ActKind::Unapprove, 101, "h1", 60)),
            ReviewOutcome::Accepted { changed: true }
        );
        assert!(!f.approvals.contains("bob"));
        assert_eq!(f.readiness.decision, None);
    }

    #[test]
    fn redelivery_changes_nothing_in_review_facts() {
        let mut f = facts();
        assert_eq!(
            f.apply_act(&act("bob", ActKind::Approve, 100, "h1", 60)),
            ReviewOutcome::Accepted { changed: false }
        );
        assert_eq!(f, facts());
    }

    #[test]
    fn act_for_an_older_version_or_another_head_changes_nothing() {
        let mut f = facts();
        assert_eq!(
            f.apply_act(&act("amy", ActKind::Approve, 99, "h1", 60)),
            ReviewOutcome::Rejected(Rejection::OlderVersion)
        );
        assert_eq!(
            f.apply_act(&act("amy", ActKind::Approve, 100, "h0", 60)),
            ReviewOutcome::Rejected(Rejection::OtherHead)
        );
        assert_eq!(
            f.apply_act(&act("amy", ActKind::Approve, 100, "h1", 49)),
            ReviewOutcome::Rejected(Rejection::BeforeStoredRead)
        );
        assert_eq!(f, facts());
    }

    #[test]
    fn acts_from_two_people_at_the_same_instant_both_apply() {
        let mut f = facts();
        f.apply_act(&act("amy", ActKind::Approve, 100, "h1", 50));
        f.apply_act(&act("cat", ActKind::Approve, 100, "h1", 50));
        assert_eq!(f.approvals, BTreeSet::from(["amy", "bob", "cat"]));
    }

    #[test]
    fn reset_on_push_dismisses_no_one_and_leaves_the_decision_unknown() {
        let mut f = facts();
        assert_eq!(
            f.apply_act(&act("pusher", ActKind::ResetOnPush, 100, "h1", 60)),
            ReviewOutcome::Accepted { changed: true }
        );
        assert_eq!(f.approvals, BTreeSet::from(["bob"]));
        assert_eq!(f.readiness, Readiness::default());
    }

    #[test]
    fn push_leaves_readiness_unknown_and_keeps_approvals() {
        let mut f = facts();
        f.push("h2");
        assert_eq!(f.head, "h2");
        assert_eq!(f.readiness, Readiness::default());
        assert_eq!(f.approvals, BTreeSet::from(["bob"]));
    }

    fn read(requested: i64, settled: bool) -> ReadinessRead<&'static str> {
        ReadinessRead {
            requested_at: at(requested),
            version: at(100),
            head: "h1".into(),
            settled,
            reviewers: whole(vec![Approved]),
            approvers: whole(vec!["amy"]),
            approved: Field::Known(true),
            requested_changes_status: Field::Known(false),
            mergeable: Field::Known(true),
            merge_status: Field::Known("mergeable".into()),
        }
    }

    #[test]
    fn readiness_read_records_approvers_and_decision() {
        let mut f = facts();
        f.readiness = Readiness::default();
        assert_eq!(
            f.apply_read(read(70, true)),
            ReviewOutcome::Accepted { changed: true }
        );
        assert_eq!(f.approvals, BTreeSet::from(["amy"]));
        assert_eq!(f.approval_read_at, Some(at(70)));
        assert_eq!(f.readiness.decision, Some(ReviewDecision::Approved));
        assert_eq!(f.readiness.mergeable, Some(true));
        assert_eq!(f.readiness.merge_status.as_deref(), Some("mergeable"));
        // The same read again changes nothing.
        assert_eq!(
            f.apply_read(read(70, true)),
            ReviewOutcome::Accepted { changed: false }
        );
    }

    #[test]
    fn read_begun_before_the_stored_read_changes_nothing() {
        let mut f = facts();
        assert_eq!(
            f.apply_read(read(40, true)),
            ReviewOutcome::Rejected(Rejection::BeforeStoredRead)
        );
        let mut other_head = read(70, true);
        other_head.head = "h9".into();
        assert_eq!(
            f.apply_read(other_head),
            ReviewOutcome::Rejected(Rejection::OtherHead)
        );
        assert_eq!(f, facts());
    }

    #[test]
    fn unsettled_status_leaves_mergeability_unknown() {
        let mut f = facts();
        assert_eq!(
            f.apply_read(read(70, false)),
            ReviewOutcome::Accepted { changed: true }
        );
        assert_eq!(f.readiness, Readiness::default());
        assert_eq!(f.approvals, BTreeSet::from(["bob"]));
        let mut unknown = facts();
        unknown.readiness = Readiness::default();
        assert_eq!(
            unknown.apply_read(read(70, false)),
            ReviewOutcome::Accepted { changed: false }
        );
    }

    #[test]
    fn partial_approver_list_keeps_stored_approvals() {
        let mut f = facts();
        let mut r = read(70, true);
        r.approvers = ListRead::Partial;
        f.apply_read(r);
        assert_eq!(f.approvals, BTreeSet::from(["bob"]));
        assert_eq!(f.readiness.decision, None);
    }
}
