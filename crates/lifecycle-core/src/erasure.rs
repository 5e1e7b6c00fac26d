//! Mirror erasure: the irreversible hard-delete plan for disconnect and purge, used by the eraser.
//!
//! Erasure shares no code with drift tombstones ([`crate::tombstone`]): it deletes tombstoned rows
//! too, and a tombstone can never stand in for it. SCM erasure is orphan-guarded, because a
//! repository is shared by every workspace that monitors it.

use std::collections::BTreeSet;

/// What started the erasure. Both triggers reach the same end state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErasureTrigger {
    /// An administrator disconnected the integration.
    AdminDisconnect,
    /// The workspace is purged.
    WorkspacePurge,
}

impl ErasureTrigger {
    /// The name an erasure record stores.
    pub fn as_str(self) -> &'static str {
        match self {
            ErasureTrigger::AdminDisconnect => "disconnect",
            ErasureTrigger::WorkspacePurge => "purge",
        }
    }
}

/// Tables that survive every erasure: operational audit without third-party content.
pub const RETAINED_TABLES: [&str; 3] = ["sync_job", "connection_activity", "connection_audit"];

/// Global identity tables shared across tenants; erasure never touches them.
pub const GLOBAL_IDENTITY_TABLES: [&str; 3] = ["user", "organization", "identity_provider"];

/// One step of an erasure, in the order the eraser must run them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErasureStep<R, O> {
    /// Derived rows (item results, feedback, activity) go first, while their items still exist.
    EraseDerivedRows,
    /// Remove this workspace's monitors, then flush.
    RemoveWorkspaceMonitors,
    /// Hard-delete a repository no other workspace monitors: clone, announcement, row and cascade
    /// (tombstoned rows included).
    DeleteOrphanedRepository(R),
    /// Erase the organization tier (teams, memberships) of an organization no other workspace binds.
    /// The organization row itself is only unlinked.
    EraseOrganizationTier(O),
    /// Hard-delete Slack messages, threads, monitored channels and consent, and the content of
    /// entries written in Slack.
    EraseSlackContent,
    /// Hard-delete Outline documents and collections.
    EraseOutlineContent,
    /// Deregister the Outline webhook subscription.
    DeregisterOutlineWebhook,
}

/// The whole erasure of one workspace's integration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErasurePlan<R, O> {
    /// What started it (audit only: the steps do not depend on it).
    pub trigger: ErasureTrigger,
    /// The steps, in order.
    pub steps: Vec<ErasureStep<R, O>>,
    /// Repositories this workspace monitored that another workspace still monitors.
    pub kept_repositories: BTreeSet<R>,
}

/// What the eraser knows about an organization this workspace binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrganizationBinding<O> {
    /// The organization.
    pub organization: O,
    /// How many other workspaces, not purged, bind the same organization.
    pub other_live_workspaces: usize,
}

/// What becomes of one repository a workspace stops monitoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepositoryFate {
    /// No monitor anywhere covers it any more: the repository and its cascade are deleted.
    Delete,
    /// Another monitor still covers it: it stays, shared.
    Keep,
}

/// The orphan guard for one repository, decided once the erasing connection's monitors are gone.
pub fn repository_fate(monitored_elsewhere: bool) -> RepositoryFate {
    if monitored_elsewhere {
        RepositoryFate::Keep
    } else {
        RepositoryFate::Delete
    }
}

/// Plans the erasure of an SCM (GitHub or GitLab) integration.
///
/// `covered` are the repositories this workspace's monitors cover; `monitored_elsewhere` are those
/// another workspace's monitors cover.
pub fn plan_scm_erasure<R: Ord + Clone, O: Clone>(
    trigger: ErasureTrigger,
    covered: &BTreeSet<R>,
    monitored_elsewhere: &BTreeSet<R>,
    organizations: &[OrganizationBinding<O>],
) -> ErasurePlan<R, O> {
    let mut steps = vec![
        ErasureStep::EraseDerivedRows,
        ErasureStep::RemoveWorkspaceMonitors,
    ];
    let mut kept_repositories = BTreeSet::new();
    for repository in covered {
        // Orphan guard: a repository another workspace monitors stays.
        match repository_fate(monitored_elsewhere.contains(repository)) {
            RepositoryFate::Keep => {
                kept_repositories.insert(repository.clone());
            }
            RepositoryFate::Delete => {
                steps.push(ErasureStep::DeleteOrphanedRepository(repository.clone()));
            }
        }
    }
    for binding in organizations {
        // Org-tier guard: only when no other live workspace binds the organization.
        if binding.other_live_workspaces == 0 {
            steps.push(ErasureStep::EraseOrganizationTier(
                binding.organization.clone(),
            ));
        }
    }
    ErasurePlan {
        trigger,
        steps,
        kept_repositories,
    }
}

/// Plans the erasure of a Slack integration.
pub fn plan_slack_erasure(trigger: ErasureTrigger) -> ErasurePlan<(), ()> {
    ErasurePlan {
        trigger,
        steps: vec![ErasureStep::EraseSlackContent],
        kept_repositories: BTreeSet::new(),
    }
}

/// Plans the erasure of an Outline integration.
pub fn plan_outline_erasure(trigger: ErasureTrigger) -> ErasurePlan<(), ()> {
    ErasurePlan {
        trigger,
        steps: vec![
            ErasureStep::EraseOutlineContent,
            ErasureStep::DeregisterOutlineWebhook,
        ],
        kept_repositories: BTreeSet::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u32]) -> BTreeSet<u32> {
        ids.iter().copied().collect()
    }

    #[test]
    fn orphan_guard_keeps_repositories_monitored_elsewhere() {
        let plan = plan_scm_erasure::<u32, &str>(
            ErasureTrigger::AdminDisconnect,
            &set(&[1, 2, 3]),
            &set(&[2, 9]),
            &[],
        );
        assert_eq!(
            plan.steps,
            vec![
                ErasureStep::EraseDerivedRows,
                ErasureStep::RemoveWorkspaceMonitors,
                ErasureStep::DeleteOrphanedRepository(1),
                ErasureStep::DeleteOrphanedRepository(3),
            ]
        );
        assert_eq!(plan.kept_repositories, set(&[2]));
    }

    #[test]
    fn derived_rows_go_first() {
        let plan = plan_scm_erasure::<u32, &str>(
            ErasureTrigger::WorkspacePurge,
            &set(&[1]),
            &set(&[]),
            &[],
        );
        assert_eq!(plan.steps[0], ErasureStep::EraseDerivedRows);
    }

    #[test]
    fn organization_tier_is_erased_only_without_other_live_bindings() {
        let orgs = [
            OrganizationBinding {
                organization: "alone",
                other_live_workspaces: 0,
            },
            OrganizationBinding {
                organization: "shared",
                other_live_workspaces: 1,
            },
        ];
        let plan = plan_scm_erasure(ErasureTrigger::AdminDisconnect, &set(&[]), &set(&[]), &orgs);
        assert!(
            plan.steps
                .contains(&ErasureStep::EraseOrganizationTier("alone"))
        );
        assert!(
            !plan
                .steps
                .contains(&ErasureStep::EraseOrganizationTier("shared"))
        );
    }

    #[test]
    fn disconnect_and_purge_reach_the_same_end_state() {
        let covered = set(&[1, 2]);
        let elsewhere = set(&[2]);
        let disconnect =
            plan_scm_erasure::<u32, u8>(ErasureTrigger::AdminDisconnect, &covered, &elsewhere, &[]);
        let purge =
            plan_scm_erasure::<u32, u8>(ErasureTrigger::WorkspacePurge, &covered, &elsewhere, &[]);
        assert_eq!(disconnect.steps, purge.steps);
        assert_eq!(disconnect.kept_repositories, purge.kept_repositories);
        assert_eq!(
            plan_slack_erasure(ErasureTrigger::AdminDisconnect).steps,
            plan_slack_erasure(ErasureTrigger::WorkspacePurge).steps
        );
    }

    #[test]
    fn outline_erasure_deletes_content_and_deregisters_the_webhook() {
        let plan = plan_outline_erasure(ErasureTrigger::WorkspacePurge);
        assert_eq!(
            plan.steps,
            vec![
                ErasureStep::EraseOutlineContent,
                ErasureStep::DeregisterOutlineWebhook
            ]
        );
        assert_eq!(plan.trigger, ErasureTrigger::WorkspacePurge);
        assert_eq!(
            plan_slack_erasure(ErasureTrigger::AdminDisconnect).steps,
            vec![ErasureStep::EraseSlackContent]
        );
    }

    #[test]
    fn audit_tables_are_retained_and_disjoint_from_identity_tables() {
        assert!(RETAINED_TABLES.contains(&"sync_job"));
        for table in RETAINED_TABLES {
            assert!(!GLOBAL_IDENTITY_TABLES.contains(&table));
        }
    }
}
