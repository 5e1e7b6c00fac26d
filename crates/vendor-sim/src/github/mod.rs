//! Simulated GitHub: the GraphQL operations and REST calls of our contract, served from an
//! in-memory [`Model`], with per-call [`Fault`] injection and signed webhooks, whose attempts are
//! logged for the App's delivery listing and redelivery.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use vendor_sim::github::{Fault, FaultKind, GithubSim, generate, Scenario, ops};
//! let generated = generate(&Scenario::default());
//! let sim = GithubSim::start(generated.model).await?;
//! sim.model(|m| m.add_personal_access_token("ghp_test"));
//! sim.inject(Fault::nth(ops::REPOSITORY_ISSUES, 3, FaultKind::Status(502)));
//! // point the client at sim.base_url() / sim.graphql_url()
//! # Ok(()) }
//! ```

mod checks;
mod conversation;
mod deliveries;
mod fault;
mod generate;
mod graphql;
mod model;
mod server;
pub mod webhook;

pub use checks::{
    CheckConclusion, CheckRun, CheckStatus, CheckSuite, CommitChecks, CommitStatus, StatusState,
};
pub use conversation::{
    Conversation, IssueComment, RequestedReviewer, Review, ReviewComment, ReviewState, ReviewThread,
};
pub use deliveries::DeliveryAttempt;
pub(crate) use fault::Faults;
pub use fault::{Calls, Fault, FaultKind, Mutation, ops};
pub use generate::{Generated, Scenario, generate};
pub use graphql::sdl;
pub use model::{
    EPOCH, Installation, InstallationId, Issue, IssueState, IssueStateReason, LockReason, Model,
    NewIssue, NewPullRequest, OwnerKind, PullRequest, PullRequestState, RateLimitBudget,
    RateLimitResource, RepoId, Repository,
};
pub use server::{GithubSim, graphql_cost};
pub use webhook::send_webhook;
