//! The client: one token, progenitor's generated calls, our retries and call budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use progenitor_client::{ClientInfo as _, ResponseValue};
use uuid::Uuid;
use vendor_http::RetryableError;
use vendor_http::egress::Egress;
use vendor_http::quota::QuotaGauge;

use crate::error::OutlineError;
use crate::generated::{self, types};
use crate::hooks::Limits;
use crate::methods;

/// Outline's hosted service.
pub const OUTLINE_CLOUD: &str = "https://app.getoutline.com";
/// The largest answer the client reads by default.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// Where and how patiently the client calls.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The instance's root, e.g. [`OUTLINE_CLOUD`], a self-hosted server or a simulator; calls
    /// go to `<base_url>/api/<method>`. A final `/` is ignored.
    pub base_url: String,
    /// Retries of throttled, failed and unanswered calls, and each call's deadline.
    pub retry: vendor_http::RetryPolicy,
    /// How long one attempt may take.
    pub request_timeout: Duration,
    /// Where calls may connect: public addresses only unless the operator allows more (a
    /// tenant names its own Outline server).
    pub egress: Egress,
    /// The largest answer read; a larger one fails with [`OutlineError::TooLarge`].
    pub max_response_bytes: usize,
}

impl Default for Settings {
    /// Outline's cloud, the default retry policy, 30 s an attempt, public addresses only,
    /// answers up to [`DEFAULT_MAX_RESPONSE_BYTES`].
    fn default() -> Self {
        Settings {
            base_url: OUTLINE_CLOUD.to_owned(),
            retry: vendor_http::RetryPolicy::default(),
            request_timeout: Duration::from_secs(30),
            egress: Egress::default(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

/// How many HTTP attempts a pass may still send; shared by the clones it is given to.
/// Every attempt spends one, retries included; when none is left the call is not sent and
/// fails with [`OutlineError::BudgetExhausted`].
#[derive(Debug, Clone)]
pub struct CallBudget {
    left: Arc<AtomicU64>,
}

impl CallBudget {
    /// A budget of `calls` attempts.
    pub fn new(calls: u64) -> Self {
        CallBudget {
            left: Arc::new(AtomicU64::new(calls)),
        }
    }

    /// Attempts still allowed.
    pub fn left(&self) -> u64 {
        self.left.load(Ordering::Relaxed)
    }

    /// Takes one attempt, or says none is left.
    fn spend(&self) -> bool {
        self.left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(1)
            })
            .is_ok()
    }
}

/// One page of an `offset`/`limit` listing, as Outline answered it: the caller decides whether
/// the listing is complete (Outline gives no total; a page shorter than `limit` is its end).
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The items, in the order Outline listed them.
    pub items: Vec<T>,
    /// The offset asked for.
    pub offset: u64,
    /// The page size asked for.
    pub limit: u32,
}

/// The order of a `documents.list` page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentSort {
    /// By `createdAt`: stable while documents change, so offsets shift only by deletions.
    CreatedAt,
    /// By `updatedAt`.
    UpdatedAt,
}

impl DocumentSort {
    fn as_str(self) -> &'static str {
        match self {
            DocumentSort::CreatedAt => "createdAt",
            DocumentSort::UpdatedAt => "updatedAt",
        }
    }
}

/// Ascending or descending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Oldest first.
    Asc,
    /// Newest first.
    Desc,
}

/// An Outline API client for one token. Clones share the connection pool and the call count;
/// [`OutlineClient::with_budget`] gives a clone a budget.
#[derive(Clone)]
pub struct OutlineClient {
    inner: Arc<Inner>,
    budget: Option<CallBudget>,
}

struct Inner {
    api: generated::Client,
    egress: Egress,
    retry: vendor_http::RetryPolicy,
    calls: AtomicU64,
    /// Where what Outline says is left of its rate limit is reported, if anywhere.
    quota: Mutex<Option<QuotaGauge>>,
}

impl std::fmt::Debug for OutlineClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("OutlineClient")
            .field("api", &self.inner.api.baseurl())
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

/// The `method` of a failure to build the client.
const SETUP: &str = "client setup";

impl OutlineClient {
    /// A client calling `settings.base_url` with `token` (an API key or an OAuth access token,
    /// sent as `Authorization: Bearer`). Fails, as [`OutlineError::Request`] with method
    /// `"client setup"`, when the base URL is not an `http(s)://` URL, the token cannot be a
    /// header, or no rustls crypto provider is installed.
    pub fn new(settings: &Settings, token: &str) -> Result<Self, OutlineError> {
        let setup = |detail: String| OutlineError::Request {
            method: SETUP,
            detail,
        };
        let base = settings.base_url.trim().trim_end_matches('/');
        let parsed =
            reqwest::Url::parse(base).map_err(|e| setup(format!("base URL {base:?}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(setup(format!(
                "base URL {base:?} is not an http:// or https:// URL"
            )));
        }
        // reqwest takes the process's provider, installed by the binary; without one it would
        // panic, so the client refuses to be built instead.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(setup("no rustls crypto provider installed".to_owned()));
        }
        let mut auth = reqwest::header::HeaderValue::try_from(format!("Bearer {}", token.trim()))
            .map_err(|_| setup("the token is not a valid header value".to_owned()))?;
        auth.set_sensitive(true);
        let headers =
            reqwest::header::HeaderMap::from_iter([(reqwest::header::AUTHORIZATION, auth)]);
        let builder = reqwest::Client::builder()
            .user_agent("forgesync")
            .default_headers(headers)
            .timeout(settings.request_timeout)
            // A redirect would carry the token to wherever it points: never followed.
            .redirect(reqwest::redirect::Policy::none());
        let http = settings
            .egress
            .apply(builder)
            .build()
            .map_err(|e| setup(format!("building the HTTP client: {e}")))?;
        Ok(OutlineClient {
            inner: Arc::new(Inner {
                api: generated::Client::new_with_client(
                    &format!("{base}/api"),
                    http,
                    Limits {
                        max_response_bytes: settings.max_response_bytes,
                    },
                ),
                egress: settings.egress.clone(),
                retry: settings.retry,
                calls: AtomicU64::new(0),
                quota: Mutex::new(None),
            }),
            budget: None,
        })
    }

    /// The same client spending `budget`: each attempt of each call takes one.
    pub fn with_budget(&self, budget: CallBudget) -> Self {
        OutlineClient {
            inner: self.inner.clone(),
            budget: Some(budget),
        }
    }

    /// The budget this client spends, if it has one.
    pub fn budget(&self) -> Option<&CallBudget> {
        self.budget.as_ref()
    }

    /// Reports what Outline's `RateLimit-*` headers say is left for this client (and its
    /// clones) as `vendor_quota_remaining{vendor="outline", resource="api", connection}`; see
    /// [`vendor_http::quota`].
    pub fn report_quota_as(&self, connection: impl Into<String>) {
        *self
            .inner
            .quota
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(QuotaGauge::new("outline", connection));
    }

    /// HTTP attempts sent by this client and its clones (counted when they start, so one that
    /// times out counts too; one refused by the budget does not).
    pub fn calls(&self) -> u64 {
        self.inner.calls.load(Ordering::Relaxed)
    }

    /// `auth.info`: the token's user and team.
    #[tracing::instrument(skip(self))]
    pub async fn auth_info(&self) -> Result<types::Auth, OutlineError> {
        let method = methods::AUTH_INFO;
        let answer = self.call(method, || self.inner.api.auth_info()).await?;
        Ok(answer.data)
    }

    /// `collections.list`: one page of the collections the token can read, in Outline's
    /// default order.
    #[tracing::instrument(skip(self))]
    pub async fn collections_list(
        &self,
        offset: u64,
        limit: u32,
    ) -> Result<Page<types::Collection>, OutlineError> {
        let body = types::CollectionsListBody {
            offset: Some(offset),
            limit: Some(u64::from(limit)),
            direction: None,
            query: None,
            sort: None,
            status_filter: Vec::new(),
        };
        let answer = self
            .call(methods::COLLECTIONS_LIST, || {
                self.inner.api.collections_list(&body)
            })
            .await?;
        Ok(Page {
            items: answer.data,
            offset,
            limit,
        })
    }

    /// `collections.info`: one collection; [`OutlineError::NotFound`] when Outline does not
    /// know it (a deleted one may also come back with `deleted_at` set).
    #[tracing::instrument(skip(self))]
    pub async fn collections_info(&self, id: Uuid) -> Result<types::Collection, OutlineError> {
        let body = types::CollectionsInfoBody { id };
        let answer = self
            .call(methods::COLLECTIONS_INFO, || {
                self.inner.api.collections_info(&body)
            })
            .await?;
        Ok(answer.data)
    }

    /// `documents.list`: one page of the published documents of `collection_id` (of every
    /// collection the token reads when `None`), and of the token user's drafts (`published_at`
    /// unset: check it), ordered by `sort` and `direction`; [`OutlineError::Forbidden`] when
    /// the collection is deleted or unknown.
    #[tracing::instrument(skip(self))]
    pub async fn documents_list(
        &self,
        collection_id: Option<Uuid>,
        offset: u64,
        limit: u32,
        sort: DocumentSort,
        direction: Direction,
    ) -> Result<Page<types::Document>, OutlineError> {
        let body = types::DocumentsListBody {
            offset: Some(offset),
            limit: Some(u64::from(limit)),
            collection_id,
            sort: Some(sort.as_str().to_owned()),
            direction: Some(match direction {
                Direction::Asc => types::DocumentsListBodyDirection::Asc,
                Direction::Desc => types::DocumentsListBodyDirection::Desc,
            }),
            backlink_document_id: None,
            filters: Vec::new(),
            parent_document_id: None,
            status_filter: Vec::new(),
            user_id: None,
        };
        let answer = self
            .call(methods::DOCUMENTS_LIST, || {
                self.inner.api.documents_list(&body)
            })
            .await?;
        Ok(Page {
            items: answer.data,
            offset,
            limit,
        })
    }

    /// `documents.info`: one document; [`OutlineError::NotFound`] when Outline does not know
    /// it. A deleted document may instead come back with `deleted_at` set: check it.
    #[tracing::instrument(skip(self))]
    pub async fn documents_info(&self, id: Uuid) -> Result<types::Document, OutlineError> {
        let body = types::DocumentsInfoBody {
            id: Some(id.to_string()),
            share_id: None,
        };
        let answer = self
            .call(methods::DOCUMENTS_INFO, || {
                self.inner.api.documents_info(&body)
            })
            .await?;
        Ok(answer.data)
    }

    /// `webhookSubscriptions.create`: subscribes `url` to `events`, deliveries signed with
    /// `secret` when given. Retried only when Outline throttled it: after a 5xx or a lost
    /// answer it may have been created (the caller finds it by its name).
    #[tracing::instrument(skip(self, secret))]
    pub async fn webhook_subscriptions_create(
        &self,
        name: &str,
        url: &str,
        events: &[String],
        secret: Option<&str>,
    ) -> Result<types::WebhookSubscription, OutlineError> {
        let method = methods::WEBHOOK_SUBSCRIPTIONS_CREATE;
        let body = types::WebhookSubscriptionsCreateBody {
            name: name.to_owned(),
            url: url.to_owned(),
            events: events.to_vec(),
            secret: secret.map(str::to_owned),
        };
        let answer = self
            .inner
            .retry
            .run(method, || async {
                self.attempt(method, self.inner.api.webhook_subscriptions_create(&body))
                    .await
                    .map_err(CreateOnce)
            })
            .await
            .map_err(|e| e.0)?;
        Ok(answer.data)
    }

    /// `webhookSubscriptions.list`: one page of the team's subscriptions (admin tokens only).
    #[tracing::instrument(skip(self))]
    pub async fn webhook_subscriptions_list(
        &self,
        offset: u64,
        limit: u32,
    ) -> Result<Page<types::WebhookSubscription>, OutlineError> {
        let body = types::Pagination {
            offset: Some(offset),
            limit: Some(u64::from(limit)),
        };
        let answer = self
            .call(methods::WEBHOOK_SUBSCRIPTIONS_LIST, || {
                self.inner.api.webhook_subscriptions_list(&body)
            })
            .await?;
        Ok(Page {
            items: answer.data,
            offset,
            limit,
        })
    }

    /// `webhookSubscriptions.delete`: removes one subscription; [`OutlineError::NotFound`]
    /// when it is already gone.
    #[tracing::instrument(skip(self))]
    pub async fn webhook_subscriptions_delete(&self, id: Uuid) -> Result<(), OutlineError> {
        let method = methods::WEBHOOK_SUBSCRIPTIONS_DELETE;
        let body = types::WebhookSubscriptionsDeleteBody { id };
        let answer = self
            .call(method, || {
                self.inner.api.webhook_subscriptions_delete(&body)
            })
            .await?;
        if answer.success {
            Ok(())
        } else {
            Err(OutlineError::Decode {
                method,
                detail: "Outline answered success: false".to_owned(),
            })
        }
    }

    /// A call retried by policy: throttling, 5xx, timeouts and transport failures.
    async fn call<T, F, Fut>(&self, method: &'static str, send: F) -> Result<T, OutlineError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<ResponseValue<T>, progenitor_client::Error<types::Error>>>,
    {
        self.inner
            .retry
            .run(method, || self.attempt(method, send()))
            .await
    }

    /// One attempt: the egress checked, the budget spent, the call counted, its answer
    /// recorded on the call's span and its error sorted.
    async fn attempt<T>(
        &self,
        method: &'static str,
        sent: impl Future<Output = Result<ResponseValue<T>, progenitor_client::Error<types::Error>>>,
    ) -> Result<T, OutlineError> {
        // A host written as an address is seen by no resolver: checked here.
        self.inner
            .egress
            .check_str(self.inner.api.baseurl())
            .map_err(|refused| OutlineError::Refused {
                method,
                detail: refused.to_string(),
            })?;
        if let Some(budget) = &self.budget
            && !budget.spend()
        {
            tracing::info!(method, "Outline call budget spent; call not sent");
            return Err(OutlineError::BudgetExhausted { method });
        }
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let answer = match sent.await {
            Ok(answer) => answer,
            // A failure status the contract does not declare for the method (a 400
            // `validation_error`, a 500) still carries Outline's error object: its code and
            // message say what was wrong.
            Err(progenitor_client::Error::UnexpectedResponse(response))
                if response.status().is_client_error() || response.status().is_server_error() =>
            {
                self.report_quota(response.headers());
                let status = response.status();
                let headers = response.headers().clone();
                // The hooks left Outline's error object or `{}` (capped, never a proxy's page).
                let body = response
                    .bytes()
                    .await
                    .ok()
                    .and_then(|body| serde_json::from_slice::<types::Error>(&body).ok());
                return Err(OutlineError::from_status(method, status, &headers, body));
            }
            Err(err) => {
                if let progenitor_client::Error::ErrorResponse(answer) = &err {
                    self.report_quota(answer.headers());
                }
                return Err(OutlineError::from_attempt(method, err));
            }
        };
        self.report_quota(answer.headers());
        vendor_http::record_cost(
            &tracing::Span::current(),
            1,
            vendor_http::header_number(answer.headers(), "ratelimit-remaining"),
        );
        Ok(answer.into_inner())
    }
}

impl OutlineClient {
    /// Reports `RateLimit-Remaining` of `RateLimit-Limit` when Outline sent both.
    fn report_quota(&self, headers: &reqwest::header::HeaderMap) {
        let quota = self
            .inner
            .quota
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(gauge) = quota.as_ref() else {
            return;
        };
        if let (Some(remaining), Some(limit)) = (
            vendor_http::header_number(headers, "ratelimit-remaining"),
            vendor_http::header_number(headers, "ratelimit-limit"),
        ) {
            gauge.report("api", remaining, limit);
        }
    }
}

/// A failed attempt of a call that must not be sent twice: retried only when Outline said it
/// throttled it (nothing was created).
struct CreateOnce(OutlineError);

impl std::fmt::Display for CreateOnce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl RetryableError for CreateOnce {
    const VENDOR: &'static str = OutlineError::VENDOR;

    fn is_retryable(&self) -> bool {
        matches!(self.0, OutlineError::RateLimited { .. })
    }

    fn retry_after(&self) -> Option<Duration> {
        self.0.retry_after()
    }

    fn deadline_passed(method: &'static str, deadline: Duration) -> Self {
        CreateOnce(OutlineError::deadline_passed(method, deadline))
    }
}
