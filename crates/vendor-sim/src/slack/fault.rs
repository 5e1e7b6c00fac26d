//! How a Slack Web API call misbehaves. Which calls a fault fires on is the GitHub simulator's
//! [`super::Fault`] and [`super::Calls`], with these kinds, counted per method name.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::Model;

/// The Web API methods served, as calls are counted and faults matched.
pub mod methods {
    /// `auth.test`
    pub const AUTH_TEST: &str = "auth.test";
    /// `auth.revoke`: the calling token is revoked from then on.
    pub const AUTH_REVOKE: &str = "auth.revoke";
    /// `conversations.list`
    pub const CONVERSATIONS_LIST: &str = "conversations.list";
    /// `conversations.info`
    pub const CONVERSATIONS_INFO: &str = "conversations.info";
    /// `conversations.history`
    pub const CONVERSATIONS_HISTORY: &str = "conversations.history";
    /// `conversations.replies`
    pub const CONVERSATIONS_REPLIES: &str = "conversations.replies";
    /// `chat.postMessage`
    pub const CHAT_POST_MESSAGE: &str = "chat.postMessage";

    /// Every method served; any other answers `unknown_method`.
    /// `oauth.v2.access`: exchanges an authorization code for a bot token, once.
    pub const OAUTH_V2_ACCESS: &str = "oauth.v2.access";
    pub const ALL: &[&str] = &[
        OAUTH_V2_ACCESS,
        AUTH_TEST,
        AUTH_REVOKE,
        CONVERSATIONS_LIST,
        CONVERSATIONS_INFO,
        CONVERSATIONS_HISTORY,
        CONVERSATIONS_REPLIES,
        CHAT_POST_MESSAGE,
    ];
}

/// A change to the model made as a call is served (a message edited, deleted or posted between
/// two pages of a listing). Its events are sent like any change's.
#[derive(Clone)]
pub struct Mutation(pub Arc<dyn Fn(&mut Model) + Send + Sync>);

impl fmt::Debug for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Mutation(..)")
    }
}

/// How a Slack call misbehaves.
#[derive(Clone, Debug)]
pub enum SlackFault {
    /// HTTP 429 with `Retry-After` and `{"ok":false,"error":"ratelimited"}`.
    RateLimited {
        /// `Retry-After` seconds.
        retry_after: u64,
    },
    /// An HTTP error status (500, 502, 503) with a plain body, as Slack's edge answers.
    Status(u16),
    /// HTTP 200 `{"ok":false,"error":<code>}` (e.g. `internal_error`, `fatal_error`,
    /// `invalid_cursor`, `missing_scope`).
    Error(String),
    /// The answer is held back this long (combines with any other kind).
    Delay(Duration),
    /// A listing's `has_more` says this instead of the truth: `true` on the last page (with no
    /// cursor to follow), or `false` with more left (the cursor left out too).
    HasMore(bool),
    /// The page holds at most `keep` items while a cursor continues right after them, as
    /// Slack may answer fewer than `limit` with more to come.
    ShortPage {
        /// Items left on the page.
        keep: usize,
    },
    /// The model changes just before the call is answered.
    Mutate(Mutation),
    /// The call is carried out (a `chat.postMessage` posts), then its answer is lost: the
    /// caller sees this HTTP status instead.
    Lost(u16),
}

impl SlackFault {
    /// A [`SlackFault::Mutate`] from a closure.
    pub fn mutate(f: impl Fn(&mut Model) + Send + Sync + 'static) -> Self {
        SlackFault::Mutate(Mutation(Arc::new(f)))
    }

    /// A [`SlackFault::Error`] with this code.
    pub fn error(code: &str) -> Self {
        SlackFault::Error(code.to_owned())
    }
}
