//! Simulated GitLab: groups, subgroups, projects, issues, merge requests and notes served from an
//! in-memory [`Model`] over GitLab's GraphQL (`/api/graphql`, the operations of our contract)
//! and REST (`/api/v4`: flat notes with GitLab's paging headers, a note, a project, group
//! hooks), each answer carrying `RateLimit-*`, with per-call [`GitlabFault`] injection. Group
//! hooks are executed as GitLab does ([`webhook`]): real-shaped Issue, Merge Request and Note
//! Hooks with GitLab's headers, and failing hooks disabled.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use vendor_sim::gitlab::{Fault, GitlabFault, GitlabSim, Model, ops};
//! let mut model = Model::default();
//! model.add_token("glpat-test");
//! let top = model.add_group(None, "top");
//! let sim = GitlabSim::start(model).await?;
//! sim.inject(Fault::nth(ops::GROUP_PROJECTS, 2, GitlabFault::Status(502)));
//! # Ok(()) }
//! ```

mod fault;
mod generate;
mod graphql;
pub mod groups;
mod model;
mod server;
pub mod webhook;

pub use super::github::{Calls, Fault};
pub use fault::{GitlabFault, Mutation, ops};
pub use generate::{Generated, Scenario, generate};
pub use graphql::sdl;
pub use model::{
    DiffPosition, Group, Hook, HookAlert, Issue, MergeRequest, Model, NewIssue, NewMergeRequest,
    Note, NoteOn, Pipeline, Project, RateLimit,
};
pub use server::{GitlabSim, HeldDelivery};
