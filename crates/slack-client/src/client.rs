//! The client: one bot token, slack-morphism's throttled connector, our retries.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use slack_morphism::api::{
    AUTH_TEST_SPECIAL_LIMIT_RATE_CTL, CHAT_POST_MESSAGE_SPECIAL_LIMIT_RATE_CTL,
};
use slack_morphism::hyper_tokio::{SlackClientHyperConnector, SlackHyperHttpsConnector};
use slack_morphism::prelude::{
    SLACK_TIER2_METHOD_CONFIG, SLACK_TIER3_METHOD_CONFIG, SlackApiMethodRateControlConfig,
    SlackApiRateControlConfig,
};
use slack_morphism::{SlackApiToken, SlackApiTokenValue, SlackClientHttpConnector, SlackTeamId};
use vendor_http::{RetryPolicy, RetryableError};

use crate::error::SlackError;
use crate::methods;
use crate::model::{
    AuthRevokeBody, AuthTest, AuthTestBody, Channel, ChannelBody, ChannelsBody, Message,
    MessagesBody, Page, PostMessage, PostedBody,
};

/// Slack's Web API.
pub const SLACK_API: &str = "https://slack.com/api/";

/// Where and how patiently the client calls.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The Web API's base, e.g. [`SLACK_API`]; a missing final `/` is added.
    pub base_url: String,
    /// Retries of throttled, failed and unanswered calls, and each call's deadline.
    pub retry: RetryPolicy,
    /// How long one attempt may take, its throttling wait included.
    pub request_timeout: Duration,
}

impl Default for Settings {
    /// slack.com, the default retry policy, 30 s an attempt.
    fn default() -> Self {
        Settings {
            base_url: SLACK_API.to_owned(),
            retry: RetryPolicy::default(),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// A `conversations.history` request: one page of a channel's messages, newest first.
#[derive(Debug, Clone, Copy)]
pub struct HistoryQuery<'a> {
    /// The channel's id.
    pub channel: &'a str,
    /// Only messages after this `ts`.
    pub oldest: Option<&'a str>,
    /// Only messages before this `ts`.
    pub latest: Option<&'a str>,
    /// Include messages at exactly `oldest` or `latest`.
    pub inclusive: bool,
    /// The previous page's `next_cursor`.
    pub cursor: Option<&'a str>,
    /// The most messages a page holds (Slack allows up to 1000).
    pub limit: u16,
}

/// A `conversations.replies` request: one page of a thread, parent first.
#[derive(Debug, Clone, Copy)]
pub struct RepliesQuery<'a> {
    /// The channel's id.
    pub channel: &'a str,
    /// The thread's parent `ts`.
    pub ts: &'a str,
    /// Only replies after this `ts` (the parent is always included).
    pub oldest: Option<&'a str>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<&'a str>,
    /// The most messages a page holds (Slack allows up to 1000).
    pub limit: u16,
}

/// A Slack Web API client for one bot token. Clones share the connection pool, the
/// throttling state and the call count.
#[derive(Clone)]
pub struct SlackClient {
    inner: Arc<Inner>,
}

struct Inner {
    slack: slack_morphism::SlackClient<SlackClientHyperConnector<SlackHyperHttpsConnector>>,
    token: SlackApiToken,
    retry: RetryPolicy,
    request_timeout: Duration,
    calls: AtomicU64,
}

impl std::fmt::Debug for SlackClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("SlackClient")
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

/// The `method` of a failure to build the client.
const SETUP: &str = "client setup";

impl SlackClient {
    /// A client calling `settings.base_url` with `bot_token`. Fails, as `Unreachable` with
    /// method `"client setup"`, when the base URL is not an `http(s)://` URL, no rustls crypto
    /// provider is installed, or no root certificates are found for an `https` base.
    pub fn new(settings: &Settings, bot_token: &str) -> Result<Self, SlackError> {
        let setup = |detail: String| SlackError::Unreachable {
            method: SETUP,
            detail,
        };
        let base = settings.base_url.trim();
        let base = base.strip_suffix('/').unwrap_or(base);
        let https = if base.starts_with("https://") {
            true
        } else if base.starts_with("http://") {
            false
        } else {
            return Err(setup(format!(
                "base URL {base:?} is not an http:// or https:// URL"
            )));
        };
        // The process's provider, installed by the binary: none is installed here.
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .ok_or_else(|| setup("no rustls crypto provider installed".to_owned()))?;
        let tls = if https {
            hyper_rustls::HttpsConnectorBuilder::new()
                .with_provider_and_native_roots(provider)
                .map_err(|e| setup(format!("no root certificates: {e}")))?
                .https_only()
        } else {
            // A plain-HTTP base (a local simulator) never uses TLS.
            let no_roots = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| setup(e.to_string()))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(no_roots)
                .https_or_http()
        };
        let connector =
            SlackClientHyperConnector::with_connector(tls.enable_all_versions().build())
                .with_slack_api_url(base)
                // Tier throttling on; its own retries off (`max_retries` unset): ours retry.
                .with_rate_control(SlackApiRateControlConfig::new());
        connector
            .create_method_uri_path(methods::AUTH_TEST)
            .map_err(|e| setup(format!("base URL {base:?}: {e}")))?;
        // slack-morphism throttles only calls whose token names a team. A client is one
        // token, so one team, whatever Slack's id for it is.
        let token = SlackApiToken::new(SlackApiTokenValue(bot_token.to_owned()))
            .with_team_id(SlackTeamId("this-token".to_owned()));
        Ok(SlackClient {
            inner: Arc::new(Inner {
                slack: slack_morphism::SlackClient::new(connector),
                token,
                retry: settings.retry,
                request_timeout: settings.request_timeout,
                calls: AtomicU64::new(0),
            }),
        })
    }

    /// `oauth.v2.access`: exchanges the authorization `code` of an installation for the app's
    /// bot token, with the app's credentials (HTTP Basic) and the `redirect_uri` the
    /// authorization was asked with. Sent once: a code is single-use, so after a lost answer
    /// only `invalid_code` could come back, and the exchange's outcome is unknown.
    #[tracing::instrument(skip_all)]
    pub async fn oauth_v2_access(
        settings: &Settings,
        client_id: &str,
        client_secret: &str,
        code: &str,
        redirect_uri: &str,
    ) -> Result<OAuthAccess, SlackError> {
        use slack_morphism::prelude::{
            SlackClientId, SlackClientSecret, SlackOAuthCode, SlackOAuthV2AccessTokenRequest,
        };
        let method = methods::OAUTH_V2_ACCESS;
        let redirect = url::Url::parse(redirect_uri).map_err(|e| SlackError::Unreachable {
            method,
            detail: format!("redirect URI: {e}"),
        })?;
        // No token acts here: the app's credentials do.
        let client = SlackClient::new(settings, "")?;
        let request = SlackOAuthV2AccessTokenRequest {
            client_id: SlackClientId(client_id.to_owned()),
            client_secret: SlackClientSecret(client_secret.to_owned()),
            code: SlackOAuthCode(code.to_owned()),
            redirect_uri: Some(redirect),
        };
        let answer = client
            .attempt(method, client.inner.slack.oauth2_access(&request))
            .await?;
        Ok(OAuthAccess {
            access_token: answer.access_token.0,
            team_id: answer.team.id.0,
            bot_user_id: answer.bot_user_id.map(|u| u.0),
            app_id: answer.app_id.0,
        })
    }

    /// Web API calls sent by this client and its clones, each attempt counted (when it starts,
    /// so one that times out counts too).
    pub fn calls(&self) -> u64 {
        self.inner.calls.load(Ordering::Relaxed)
    }

    /// `auth.test`: who the token is.
    #[tracing::instrument(skip(self))]
    pub async fn auth_test(&self) -> Result<AuthTest, SlackError> {
        let body: AuthTestBody = self
            .get(methods::AUTH_TEST, &[], &AUTH_TEST_SPECIAL_LIMIT_RATE_CTL)
            .await?;
        Ok(body.into())
    }

    /// `auth.revoke`: revokes this client's token; whether Slack says it is revoked. Retried only
    /// when Slack throttled it: after a 5xx or a lost answer it may have been revoked, and a
    /// second call would only meet `token_revoked`.
    #[tracing::instrument(skip(self))]
    pub async fn auth_revoke(&self) -> Result<bool, SlackError> {
        let method = methods::AUTH_REVOKE;
        let body: Result<AuthRevokeBody, PostOnce> = self
            .inner
            .retry
            .run(method, || async {
                let session = self.inner.slack.open_session(&self.inner.token);
                let params: Vec<(&str, Option<&str>)> = Vec::new();
                self.attempt(
                    method,
                    session.http_session_api.http_get(
                        method,
                        &params,
                        Some(&SLACK_TIER3_METHOD_CONFIG),
                    ),
                )
                .await
                .map_err(PostOnce)
            })
            .await;
        Ok(body.map_err(|e| e.0)?.revoked)
    }

    /// `conversations.list`: one page of the workspace's public and private channels,
    /// archived ones included.
    #[tracing::instrument(skip(self))]
    pub async fn conversations_list(
        &self,
        cursor: Option<&str>,
        limit: u16,
    ) -> Result<Page<Channel>, SlackError> {
        let limit = limit.to_string();
        let body: ChannelsBody = self
            .get(
                methods::CONVERSATIONS_LIST,
                &[
                    ("types", Some("public_channel,private_channel")),
                    ("exclude_archived", Some("false")),
                    ("cursor", cursor),
                    ("limit", Some(&limit)),
                ],
                &SLACK_TIER2_METHOD_CONFIG,
            )
            .await?;
        Ok(body.into())
    }

    /// `conversations.info`: one channel.
    #[tracing::instrument(skip(self))]
    pub async fn conversations_info(&self, channel: &str) -> Result<Channel, SlackError> {
        let body: ChannelBody = self
            .get(
                methods::CONVERSATIONS_INFO,
                &[("channel", Some(channel))],
                &SLACK_TIER3_METHOD_CONFIG,
            )
            .await?;
        Ok(body.channel)
    }

    /// `conversations.history`: one page of a channel's messages, newest first.
    #[tracing::instrument(skip(self))]
    pub async fn conversations_history(
        &self,
        q: &HistoryQuery<'_>,
    ) -> Result<Page<Message>, SlackError> {
        let limit = q.limit.to_string();
        let body: MessagesBody = self
            .get(
                methods::CONVERSATIONS_HISTORY,
                &[
                    ("channel", Some(q.channel)),
                    ("oldest", q.oldest),
                    ("latest", q.latest),
                    // Slack's default is exclusive.
                    ("inclusive", q.inclusive.then_some("true")),
                    ("cursor", q.cursor),
                    ("limit", Some(&limit)),
                ],
                &SLACK_TIER3_METHOD_CONFIG,
            )
            .await?;
        Ok(body.into())
    }

    /// `conversations.replies`: one page of a thread, its parent first.
    #[tracing::instrument(skip(self))]
    pub async fn conversations_replies(
        &self,
        q: &RepliesQuery<'_>,
    ) -> Result<Page<Message>, SlackError> {
        let limit = q.limit.to_string();
        let body: MessagesBody = self
            .get(
                methods::CONVERSATIONS_REPLIES,
                &[
                    ("channel", Some(q.channel)),
                    ("ts", Some(q.ts)),
                    ("oldest", q.oldest),
                    ("cursor", q.cursor),
                    ("limit", Some(&limit)),
                ],
                &SLACK_TIER3_METHOD_CONFIG,
            )
            .await?;
        Ok(body.into())
    }

    /// `chat.postMessage`: posts `text` to `channel` as the bot; the posted message's `ts`.
    /// Retried only when Slack throttled it: after a 5xx or a lost answer it may have posted.
    #[tracing::instrument(skip(self, text))]
    pub async fn chat_post_message(&self, channel: &str, text: &str) -> Result<String, SlackError> {
        let method = methods::CHAT_POST_MESSAGE;
        let request = PostMessage { channel, text };
        let posted: Result<PostedBody, PostOnce> = self
            .inner
            .retry
            .run(method, || async {
                self.post(method, &request, &CHAT_POST_MESSAGE_SPECIAL_LIMIT_RATE_CTL)
                    .await
                    .map_err(PostOnce)
            })
            .await;
        Ok(posted.map_err(|e| e.0)?.ts)
    }

    /// A GET call of `method` with its query `params` (`None` ones left out), retried.
    async fn get<RS>(
        &self,
        method: &'static str,
        params: &[(&str, Option<&str>)],
        rate: &'static SlackApiMethodRateControlConfig,
    ) -> Result<RS, SlackError>
    where
        RS: DeserializeOwned + Send,
    {
        self.inner
            .retry
            .run(method, || async {
                let session = self.inner.slack.open_session(&self.inner.token);
                let params = params.to_vec();
                self.attempt(
                    method,
                    session
                        .http_session_api
                        .http_get(method, &params, Some(rate)),
                )
                .await
            })
            .await
    }

    /// One attempt of a JSON POST of `method` (the caller decides about retries).
    async fn post<RQ, RS>(
        &self,
        method: &'static str,
        request: &RQ,
        rate: &'static SlackApiMethodRateControlConfig,
    ) -> Result<RS, SlackError>
    where
        RQ: Serialize + Send + Sync,
        RS: DeserializeOwned + Send,
    {
        let session = self.inner.slack.open_session(&self.inner.token);
        self.attempt(
            method,
            session
                .http_session_api
                .http_post(method, request, Some(rate)),
        )
        .await
    }

    /// Counts and bounds one attempt, and sorts its error.
    async fn attempt<RS>(
        &self,
        method: &'static str,
        sent: impl Future<Output = slack_morphism::ClientResult<RS>>,
    ) -> Result<RS, SlackError> {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.inner.request_timeout, sent).await {
            Ok(answer) => answer.map_err(|e| SlackError::from_attempt(method, e)),
            Err(_) => Err(SlackError::Timeout { method }),
        }
    }
}

/// What `oauth.v2.access` returned: the bot token and whose it is.
#[derive(Clone)]
pub struct OAuthAccess {
    pub access_token: String,
    pub team_id: String,
    /// The bot user the token acts as (absent when no bot scope was granted).
    pub bot_user_id: Option<String>,
    pub app_id: String,
}

impl std::fmt::Debug for OAuthAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthAccess")
            .field("team_id", &self.team_id)
            .field("bot_user_id", &self.bot_user_id)
            .field("app_id", &self.app_id)
            .finish_non_exhaustive()
    }
}

/// A failed attempt of a call that must not be sent twice: retried only when Slack said it
/// throttled it (nothing was posted).
struct PostOnce(SlackError);

impl std::fmt::Display for PostOnce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl RetryableError for PostOnce {
    const VENDOR: &'static str = SlackError::VENDOR;

    fn is_retryable(&self) -> bool {
        matches!(self.0, SlackError::RateLimited { .. })
    }

    fn retry_after(&self) -> Option<Duration> {
        self.0.retry_after()
    }

    fn deadline_passed(method: &'static str, deadline: Duration) -> Self {
        PostOnce(SlackError::deadline_passed(method, deadline))
    }
}
