//! What GitLab keeps beside the shared SCM tables, in a place gitlab-sync (which writes it) and
//! the operators' API (which reads it) can both depend on: where a connection's activation
//! stands, and the kind of resource it creates at GitLab.

pub mod activation;
pub mod approvals;
pub mod pushes;
pub mod requested_changes;

use store::registration::ResourceKind;

/// A GitLab group hook we register; a registration's target is the group id.
pub const GROUP_HOOK: ResourceKind = ResourceKind::new("gitlab_group_hook");
