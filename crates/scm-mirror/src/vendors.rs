//! GitHub's and GitLab's declarations: the two forges share the SCM mirror's tables, and each
//! adds its own rows, the resources it creates at the vendor and the item events it publishes.
//! `crates/vendors` lists them; nothing else needs editing for what they hold.

use store::declaration::VendorDeclaration;
use store::entity::ConnectionKind;

use crate::erasure;

/// The item events a forge publishes (`scm.<item>.<change>`), as [`crate::events`] names them.
pub const SCM_EVENT_TYPES: &[&str] = &[
    "scm.issue.opened",
    "scm.issue.reopened",
    "scm.issue.closed",
    "scm.issue.comment_edited",
    "scm.issue.changed",
    "scm.pull_request.opened",
    "scm.pull_request.synchronized",
    "scm.pull_request.ready_for_review",
    "scm.pull_request.converted_to_draft",
    "scm.pull_request.reopened",
    "scm.pull_request.closed",
    "scm.pull_request.merged",
    "scm.pull_request.comment_edited",
    "scm.pull_request.review_dismissed",
    "scm.pull_request.thread_resolved",
    "scm.pull_request.checks_completed",
];

/// GitHub: the SCM mirror and its own bookkeeping; it creates nothing at GitHub (the App is the
/// operator's).
pub static GITHUB: VendorDeclaration = VendorDeclaration {
    kind: ConnectionKind::Github,
    holders: &[&erasure::ERASABLE, &erasure::GITHUB],
    resource_kinds: &[crate::github::APP_INSTALLATION],
    event_types: SCM_EVENT_TYPES,
};

/// GitLab: the SCM mirror, its activation and listing state, the organization tier (root group
/// and subgroups as teams, with their members), and the group hook it creates.
pub static GITLAB: VendorDeclaration = VendorDeclaration {
    kind: ConnectionKind::Gitlab,
    holders: &[
        &erasure::ERASABLE,
        &erasure::GITLAB,
        &crate::organization::ERASABLE,
    ],
    resource_kinds: &[crate::gitlab::GROUP_HOOK],
    event_types: SCM_EVENT_TYPES,
};
