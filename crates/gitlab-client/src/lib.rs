//! GitLab's API as forgesync uses it: the contract's GraphQL operations (cynic, over
//! `schemas/gitlab.graphql`), the REST calls GraphQL lacks (flat notes, group hooks, a
//! project, a merge request's close time), and the transport policy around them, shaped like
//! `github-client`'s.
//!
//! - [`GitlabClient`] answers one page per call; the caller paginates and decides completeness.
//!   GraphQL pages keep their errors with paths ([`Page::field_unknown`]); REST pages (notes,
//!   group hooks) keep GitLab's raw `X-Page`, `X-Next-Page` and `X-Total` ([`PageHeaders`]).
//! - Every call is checked against the caller's [`Budget`] first, using what GitLab's
//!   `RateLimit-*` headers last said; a refused call is [`Error::BudgetExhausted`], sent nowhere.
//! - 5xx, 429 and transport failures are retried by one [`RetryPolicy`] (backon).
//!
//! The crate installs no rustls crypto provider: binaries call
//! `runtime::install_crypto_provider()` first thing, tests install ring's themselves.

#![forbid(unsafe_code)]

pub mod budget;
mod client;
mod error;
pub mod queries;
mod rest;
mod retry;

pub use budget::{Budget, BudgetStop, RateLimit};
pub use client::{
    ClientConfig, DEFAULT_MAX_RESPONSE_BYTES, GitlabClient, MAX_PAGE_SIZE, Page, PageProject,
};
pub use client::{GroupMember, GroupMembersPage, PartialListing};
pub use error::{Error, GraphqlError, PathSegment};
pub use queries::{
    DetailedMergeStatus, DiffPosition, DiffRefs, Discussion, DiscussionGid, DiscussionNote,
    GroupNode, HeadPipeline, IssueNode, IssueState, MergeRequestNode, MergeRequestState, NoteGid,
    PageInfo, PipelineStatus, ProjectNode, ReviewState, ReviewerConnection, Time,
};
pub use rest::{
    GroupHook, GroupHooksPage, MergeRequestApprovals, NewGroupHook, Note, NoteParent, NotesPage,
    PageHeaders, RestApproval, RestMergeRequest, RestProject, RestUser,
};
pub use retry::RetryPolicy;
