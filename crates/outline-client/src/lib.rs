//! Outline's API as forgesync uses it: `auth.info`, `collections.list`, `.info`,
//! `documents.list`, `.info` and `webhookSubscriptions.create`, `.list`, `.delete`, one page per
//! call (the caller paginates with `offset`/`limit`).
//!
//! Transport: the client progenitor generates from `schemas/outline.json` ([`generated`],
//! refreshed by `cargo xtask schema outline`), over a reqwest client that sends the token as
//! `Authorization: Bearer`, never follows a redirect and connects only where the
//! [`Egress`](vendor_http::egress::Egress) policy allows; an answer is read up to
//! [`Settings::max_response_bytes`]. Answers are the generated types
//! ([`types`]); a success without `data` fails to decode, so a failure never reads as an empty
//! page.
//!
//! Policy:
//! - **Retries are vendor-http's** ([`vendor_http::RetryPolicy`]): 429 (waiting out
//!   `Retry-After`), 5xx, timeouts and transport failures, within one deadline per call.
//!   `webhookSubscriptions.create` is retried only when Outline throttled it, since a 5xx may
//!   still have created the subscription.
//! - **Errors are typed** ([`OutlineError`]) and sorted into the shared
//!   [`VendorErrorClass`](lifecycle_core::vendor_error::VendorErrorClass): 401 is
//!   `BadCredentials`, 403 `Forbidden`, 404 `NotFound`.
//! - **Calls spend the pass budget**: a [`CallBudget`] given with
//!   [`OutlineClient::with_budget`] loses one per attempt, and a call with none left is not sent
//!   ([`OutlineError::BudgetExhausted`]); [`OutlineClient::calls`] counts every attempt sent,
//!   and [`OutlineClient::report_quota_as`] reports what Outline's `RateLimit-*` headers say is
//!   left.

#![forbid(unsafe_code)]

mod client;
mod error;
mod hooks;

/// The API as progenitor generates it from `schemas/outline.json`.
#[allow(missing_docs, unused_qualifications, clippy::all, clippy::pedantic)]
pub mod generated {
    progenitor::generate_api!(
        spec = "../../schemas/outline.json",
        hooks = Expected,
        inner_type = crate::hooks::Limits,
    );
}

pub use client::{
    CallBudget, DEFAULT_MAX_RESPONSE_BYTES, Direction, DocumentSort, OUTLINE_CLOUD, OutlineClient,
    Page, Settings,
};
pub use error::OutlineError;
pub use generated::types;
pub use vendor_http::RetryPolicy;

/// The API methods this client calls, as Outline names them (and as errors and retry logs
/// name the call).
pub mod methods {
    /// Who the token is: user and team.
    pub const AUTH_INFO: &str = "auth.info";
    /// The collections the token reads.
    pub const COLLECTIONS_LIST: &str = "collections.list";
    /// One collection.
    pub const COLLECTIONS_INFO: &str = "collections.info";
    /// Documents, paged by `offset`/`limit`.
    pub const DOCUMENTS_LIST: &str = "documents.list";
    /// One document.
    pub const DOCUMENTS_INFO: &str = "documents.info";
    /// Subscribes a URL to the team's events.
    pub const WEBHOOK_SUBSCRIPTIONS_CREATE: &str = "webhookSubscriptions.create";
    /// The team's webhook subscriptions.
    pub const WEBHOOK_SUBSCRIPTIONS_LIST: &str = "webhookSubscriptions.list";
    /// Removes a webhook subscription.
    pub const WEBHOOK_SUBSCRIPTIONS_DELETE: &str = "webhookSubscriptions.delete";
}
