//! GitHub's API as forgesync uses it: the contract's GraphQL operations (cynic, over
//! `schemas/github.graphql`), the few REST calls, and the transport policy around them.
//!
//! - [`GithubApp`] signs App JWTs and caches installation tokens; [`Auth`] picks App or PAT.
//!   As the App itself it lists webhook deliveries and asks for redeliveries.
//! - [`GithubClient`] answers one page per call; the caller paginates and decides completeness.
//! - Every call is checked against the caller's [`Budget`] first and recorded after
//!   ([`budget`]); a refused call is [`Error::BudgetExhausted`] and sends nothing. The App's own
//!   JWT calls, the installation token exchange included, keep their own ledger and floor.
//! - [`ClientConfig::for_server`] turns a connection's server URL into its API bases
//!   (api.github.com, or a GitHub Enterprise Server's `/api/v3` and `/api/graphql`).
//! - 5xx, secondary limits and transport failures are retried by one [`RetryPolicy`].
//!
//! The crate installs no rustls crypto provider: binaries call
//! `runtime::install_crypto_provider()` first thing, tests install ring's themselves.

#![forbid(unsafe_code)]

mod auth;
pub mod budget;
mod client;
mod error;
pub mod queries;
mod rest;
mod retry;

pub use auth::{AppClaims, AppCredentials, InstallationToken, Secret, TOKEN_REFRESH_MARGIN};
pub use budget::{Budget, BudgetStop, RateLimit, Resource};
pub use client::{
    Auth, ClientConfig, CommitCheckRuns, DEFAULT_MAX_RESPONSE_BYTES, GITHUB_API, GithubApp,
    GithubClient, Item, MAX_PAGE_SIZE, Page,
};
pub use error::{Error, GraphqlError, PathSegment, RateLimitKind};
pub use queries::{
    Actor, IssueNode, IssueState, IssueStateReason, LockReason, Owner, PageInfo, PullRequestNode,
    PullRequestState, RepositoryHeader, RepositoryRef, Timestamp,
};
pub use rest::{
    AppInstallation, HookDeliveriesPage, HookDelivery, InstallationDeleted,
    InstallationRepositoriesPage, RestOwner, RestRepository,
};
pub use retry::RetryPolicy;
