//! Slack's Web API as forgesync uses it: `auth.test`, `conversations.list`, `.info`,
//! `.history`, `.replies` and `chat.postMessage`, one page per call (the caller paginates).
//!
//! Transport: slack-morphism's hyper connector, pointed at [`Settings::base_url`] (slack.com,
//! or a simulator over plain HTTP). Its answers are decoded into this crate's small types
//! ([`Message`], [`Channel`], ...) rather than slack-morphism's full models, so a block kit or
//! file shape we do not read can never fail a page.
//!
//! Policy:
//! - **Throttling is slack-morphism's**: its rate controller spaces calls by each method's
//!   Web API tier (and the special limits of `auth.test` and `chat.postMessage`), per client and
//!   its clones.
//! - **Retries are ours**: slack-morphism retries nothing; 429 (waiting out `Retry-After`),
//!   `ratelimited`, 5xx, timeouts and transport failures go through one
//!   [`vendor_http::RetryPolicy`], whose deadline bounds every attempt and wait of a call.
//!   `chat.postMessage` is retried only when Slack said it was throttled, since a 5xx may
//!   still have posted.
//! - **Errors are typed** ([`SlackError`]): Slack's `ok: false` keeps its code, and
//!   [`SlackError::class`] sorts every failure into the shared
//!   [`VendorErrorClass`](lifecycle_core::vendor_error::VendorErrorClass): refused tokens are
//!   `BadCredentials`, a channel out of the bot's reach is `ScopeLost`, `missing_scope` is
//!   `Forbidden` naming the scope Slack says is needed.
//! - [`SlackClient::calls`] counts every HTTP attempt, for budget accounting.
//!
//! Slack's answers are bounded by each call's `limit`; the connector reads a body whole.
//! The crate installs no rustls crypto provider and uses the process's: binaries install ring's
//! first thing (`runtime::install_crypto_provider`), tests install it themselves;
//! [`SlackClient::new`] fails without one.

#![forbid(unsafe_code)]

mod client;
mod error;
mod model;

pub use client::{HistoryQuery, OAuthAccess, RepliesQuery, SLACK_API, Settings, SlackClient};
pub use error::SlackError;
pub use model::{AuthTest, Channel, FileRef, Message, Page};
pub use vendor_http::RetryPolicy;

/// The Web API methods this client calls, as Slack names them (and as errors and retry logs
/// name the call).
pub mod methods {
    /// Exchanges an authorization code for the app's bot token.
    pub const OAUTH_V2_ACCESS: &str = "oauth.v2.access";
    /// Who the token is: team, bot user and bot.
    pub const AUTH_TEST: &str = "auth.test";
    /// Revokes the calling token.
    pub const AUTH_REVOKE: &str = "auth.revoke";
    /// The workspace's public and private channels.
    pub const CONVERSATIONS_LIST: &str = "conversations.list";
    /// One channel.
    pub const CONVERSATIONS_INFO: &str = "conversations.info";
    /// A channel's messages, newest first.
    pub const CONVERSATIONS_HISTORY: &str = "conversations.history";
    /// A thread's parent and replies, oldest first.
    pub const CONVERSATIONS_REPLIES: &str = "conversations.replies";
    /// Posts a message as the bot.
    pub const CHAT_POST_MESSAGE: &str = "chat.postMessage";
}
