//! The HTTP server: `/api/<method>` for the Web API methods of our contract (GET query, POST
//! form or JSON), each call logged with its parameters, authenticated, charged to its rate-limit
//! tier and run through the injected faults before it is answered; `/_admin/<action>` to change
//! the model over HTTP for the local stack.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value as Json, json};

use super::events::{self, EventAttempt, Outbox, RetrySchedule, SendError, Subscription};
use super::fault::{SlackFault, methods};
use super::model::{Channel, Model, SlackError, Team, Ts};
use super::wire;
use crate::github::{Fault, Faults};
use crate::served::Served;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One Web API call as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiCall {
    /// The method (`conversations.history`).
    pub method: String,
    /// The bearer token (or `token` parameter) it came with.
    pub token: Option<String>,
    /// Its parameters, query and body merged (`token` left out).
    pub params: BTreeMap<String, String>,
}

impl ApiCall {
    /// One parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }
}

struct Shared {
    model: Arc<Mutex<Model>>,
    faults: Mutex<Faults<SlackFault>>,
    log: Mutex<Vec<ApiCall>>,
    /// Recent calls per rate-limit key (token, method, and channel for `chat.postMessage`).
    windows: Mutex<HashMap<String, VecDeque<Instant>>>,
    outbox: Arc<Outbox>,
}

impl Shared {
    /// Wakes the event sender if a change queued events; without a subscription they are
    /// dropped, as Slack sends nobody the changes made while no app listened.
    fn changed(&self) {
        let mut m = lock(&self.model);
        if m.events.is_empty() {
            return;
        }
        if self.outbox.subscription().is_none() {
            m.take_events();
        } else {
            self.outbox.queued.notify_one();
        }
    }
}

/// A running simulated Slack on `127.0.0.1:<port>`. Dropping it stops the server and the
/// event sender.
pub struct SlackSim {
    shared: Arc<Shared>,
    base_url: String,
    served: Served,
}

impl SlackSim {
    /// Serves `model` on a free port of 127.0.0.1.
    pub async fn start(mut model: Model) -> std::io::Result<SlackSim> {
        // The model as given is the workspace's state, not news.
        model.take_events();
        let (listener, base_url) = crate::served::bind().await?;
        let shared = Arc::new(Shared {
            model: Arc::new(Mutex::new(model)),
            faults: Mutex::new(Faults::default()),
            log: Mutex::new(Vec::new()),
            windows: Mutex::new(HashMap::new()),
            outbox: Arc::new(Outbox::new()),
        });
        let app = Router::new()
            .route("/api/{method}", any(api_call))
            .route("/oauth/v2/authorize", axum::routing::get(oauth_authorize))
            .route("/_admin/{action}", post(admin))
            .with_state(shared.clone());
        let sender = {
            let shared = shared.clone();
            async move {
                loop {
                    shared.outbox.queued.notified().await;
                    shared.outbox.pump(&shared.model).await;
                }
            }
        };
        let served = Served::start(listener, app, "slack", Some(sender));
        Ok(SlackSim {
            shared,
            base_url,
            served,
        })
    }

    /// `http://127.0.0.1:<port>/api/`: a method's URL is this with the method's name appended.
    pub fn api_url(&self) -> String {
        format!("{}/api/", self.base_url)
    }

    /// `http://127.0.0.1:<port>`: the admin routes are under `/_admin/`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Reads or changes the model while the simulator runs. The events a change queues are
    /// sent right after, in the background ([`SlackSim::settle`] waits for them).
    pub fn model<R>(&self, f: impl FnOnce(&mut Model) -> R) -> R {
        let out = f(&mut lock(&self.shared.model));
        self.shared.changed();
        out
    }

    /// Sends every change's events from now on to `url`, signed with `signing_secret`, as a
    /// Slack app's Event Subscriptions do for every workspace it is installed in.
    pub fn subscribe_events(&self, url: &str, signing_secret: &str) {
        self.shared.outbox.subscribe(Some(Subscription {
            url: url.to_owned(),
            secret: signing_secret.as_bytes().to_vec(),
        }));
    }

    /// Stops sending events; changes made meanwhile are never delivered.
    pub fn unsubscribe_events(&self) {
        self.shared.outbox.subscribe(None);
    }

    /// Sets the delivery timeout and retry waits (Slack's by default).
    pub fn set_retry_schedule(&self, schedule: RetrySchedule) {
        self.shared.outbox.set_schedule(schedule);
    }

    /// Waits until every queued event has been sent and every retry made or given up.
    pub async fn settle(&self) {
        loop {
            self.shared.outbox.pump(&self.shared.model).await;
            if self.shared.outbox.idle(&self.shared.model) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Every delivery attempt so far, in the order they were made.
    pub fn deliveries(&self) -> Vec<EventAttempt> {
        self.shared.outbox.attempts()
    }

    /// The headers Slack would sign `body` with now, with the subscription's secret (none
    /// without a subscription).
    pub fn sign(&self, body: &[u8]) -> Option<reqwest::header::HeaderMap> {
        let sub = self.shared.outbox.subscription()?;
        Some(events::signed_headers(
            &sub.secret,
            events::unix_now(),
            body,
        ))
    }

    /// POSTs `body` (a crafted, replayed or reordered envelope) to the Request URL, signed
    /// now, as retry `n` with `reason` when `retry` is given; the receiver's status.
    pub async fn send_event(
        &self,
        body: &[u8],
        retry: Option<(u32, &str)>,
    ) -> Result<reqwest::StatusCode, SendError> {
        Ok(self.shared.outbox.send_raw(body, retry).await?.0)
    }

    /// Sends Slack's `url_verification` request to the Request URL, signed; whether the
    /// receiver echoed the challenge (as the plain body, or `{"challenge": ...}`), as Slack
    /// requires before it saves a Request URL.
    pub async fn verify_url(&self) -> Result<bool, SendError> {
        let challenge = uuid::Uuid::new_v4().simple().to_string();
        let token = lock(&self.shared.model).verification_token.clone();
        let body = json!({ "token": token, "challenge": challenge, "type": "url_verification" });
        let (status, answer) = self
            .shared
            .outbox
            .send_raw(&serde_json::to_vec(&body).unwrap_or_default(), None)
            .await?;
        let echoed = answer == challenge.as_bytes()
            || serde_json::from_slice::<Json>(&answer)
                .is_ok_and(|a| a["challenge"].as_str() == Some(challenge.as_str()));
        Ok(status.is_success() && echoed)
    }

    /// Arms a fault; it counts matching calls from now on.
    pub fn inject(&self, fault: Fault<SlackFault>) {
        lock(&self.shared.faults).inject(fault);
    }

    /// Disarms every fault.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// How many calls of `method` arrived.
    pub fn calls(&self, method: &str) -> u64 {
        lock(&self.shared.faults)
            .calls()
            .get(method)
            .copied()
            .unwrap_or(0)
    }

    /// Every call with its parameters, in the order the calls arrived.
    pub fn call_log(&self) -> Vec<ApiCall> {
        lock(&self.shared.log).clone()
    }

    /// The calls of one method, in the order they arrived.
    pub fn calls_of(&self, method: &str) -> Vec<ApiCall> {
        lock(&self.shared.log)
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// Stops the server and waits (up to 5 s) for open calls to finish.
    pub async fn shutdown(mut self) {
        self.served.shutdown().await;
    }
}

impl Drop for SlackSim {
    fn drop(&mut self) {
        self.shared.outbox.abort_retries();
    }
}

/// A call's parameters: query, then form or JSON body.
struct Params(BTreeMap<String, String>);

impl Params {
    fn parse(query: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Params {
        let mut out = BTreeMap::new();
        let mut form = |text: &str| {
            if let Ok(mut url) = reqwest::Url::parse("http://form.invalid/") {
                url.set_query(Some(text));
                out.extend(
                    url.query_pairs()
                        .map(|(k, v)| (k.into_owned(), v.into_owned())),
                );
            }
        };
        if let Some(q) = query {
            form(q);
        }
        let json_body = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if json_body {
            if let Ok(Json::Object(map)) = serde_json::from_slice::<Json>(body) {
                for (k, v) in map {
                    let v = match v {
                        Json::String(s) => s,
                        Json::Null => continue,
                        other => other.to_string(),
                    };
                    out.insert(k, v);
                }
            }
        } else if let Ok(text) = std::str::from_utf8(body)
            && !text.is_empty()
        {
            form(text);
        }
        Params(out)
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some("true" | "1"))
    }

    /// `limit`, Slack's default when absent or 0, capped at the method's maximum.
    fn limit(&self, default: usize, max: usize) -> usize {
        match self.get("limit").and_then(|l| l.parse::<usize>().ok()) {
            Some(0) | None => default,
            Some(n) => n.min(max),
        }
    }

    /// A `ts` bound; Slack's `invalid_ts_oldest` / `invalid_ts_latest` when unreadable.
    fn ts(&self, name: &str) -> Result<Option<Ts>, SlackError> {
        let bad = SlackError(match name {
            "oldest" => "invalid_ts_oldest",
            "latest" => "invalid_ts_latest",
            _ => "invalid_arguments",
        });
        self.get(name)
            .map(|v| v.parse().map_err(|_| bad))
            .transpose()
    }
}

fn ok(mut body: Json) -> Response {
    body["ok"] = json!(true);
    axum::Json(body).into_response()
}

fn api_error(code: &str) -> Response {
    axum::Json(json!({ "ok": false, "error": code })).into_response()
}

fn rate_limited(retry_after: u64) -> Response {
    let mut r = (
        StatusCode::TOO_MANY_REQUESTS,
        axum::Json(json!({ "ok": false, "error": "ratelimited" })),
    )
        .into_response();
    r.headers_mut()
        .insert("retry-after", HeaderValue::from(retry_after));
    r
}

fn token_of(headers: &HeaderMap, params: &Params) -> Option<String> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
        .or_else(|| params.get("token").map(str::to_owned))
}

fn basic_auth(headers: &HeaderMap) -> Option<(String, String)> {
    use base64::Engine as _;
    let value = headers.get("authorization")?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (id, secret) = text.split_once(':')?;
    Some((id.to_owned(), secret.to_owned()))
}

/// Charges a call to its tier's window for this token; the seconds to wait when it is spent.
fn charge(
    shared: &Shared,
    model: &Model,
    token: &str,
    method: &str,
    params: &Params,
) -> Option<u64> {
    let limits = model.rate_limits?;
    let tier = model.tier(method)?;
    // chat.postMessage's limit is per channel; the others' per method.
    let key = match method {
        methods::CHAT_POST_MESSAGE => {
            format!("{token}/{method}/{}", params.get("channel").unwrap_or(""))
        }
        _ => format!("{token}/{method}"),
    };
    let now = Instant::now();
    let mut windows = lock(&shared.windows);
    let calls = windows.entry(key).or_default();
    while calls
        .front()
        .is_some_and(|t| now.duration_since(*t) >= limits.window)
    {
        calls.pop_front();
    }
    if calls.len() >= tier.per_window() as usize {
        let oldest = calls.front().copied().unwrap_or(now);
        let wait = limits.window.saturating_sub(now.duration_since(oldest));
        return Some(wait.as_secs_f64().ceil().max(1.0) as u64);
    }
    calls.push_back(now);
    None
}

async fn api_call(
    State(shared): State<Arc<Shared>>,
    Path(method): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut params = Params::parse(query.as_deref(), &headers, &body);
    let token = token_of(&headers, &params);
    params.0.remove("token");
    // The app's credentials as HTTP Basic (`oauth.v2.access`), as parameters.
    if let Some((id, secret)) = basic_auth(&headers) {
        params.0.entry("client_id".to_owned()).or_insert(id);
        params.0.entry("client_secret".to_owned()).or_insert(secret);
    }
    lock(&shared.log).push(ApiCall {
        method: method.clone(),
        token: token.clone(),
        params: params.0.clone(),
    });
    let fired = lock(&shared.faults).on_call(&method);
    let delay: Duration = fired
        .iter()
        .filter_map(|k| match k {
            SlackFault::Delay(d) => Some(*d),
            _ => None,
        })
        .sum();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let response = answer(&shared, &method, token.as_deref(), &params, &fired);
    shared.changed();
    response
}

/// The answer to a call once its delay is over.
fn answer(
    shared: &Shared,
    method: &str,
    token: Option<&str>,
    params: &Params,
    fired: &[SlackFault],
) -> Response {
    let mut m = lock(&shared.model);
    if !methods::ALL.contains(&method) {
        return api_error("unknown_method");
    }
    if method == methods::OAUTH_V2_ACCESS {
        return oauth_v2_access(&mut m, params, fired);
    }
    let team = match m.authenticate(token) {
        Ok(t) => t.clone(),
        Err(e) => return api_error(e.0),
    };
    if let Some(wait) = charge(shared, &m, token.unwrap_or(""), method, params) {
        return rate_limited(wait);
    }
    for kind in fired {
        if let SlackFault::RateLimited { retry_after } = kind {
            return rate_limited(*retry_after);
        }
    }
    for kind in fired {
        if let SlackFault::Mutate(mutation) = kind {
            (mutation.0)(&mut m);
        }
    }
    if let Some(failed) = failed_before(fired) {
        return failed;
    }
    let answered = match method {
        methods::AUTH_TEST => Ok(auth_test(&team)),
        methods::AUTH_REVOKE => Ok(auth_revoke(&mut m, token.unwrap_or(""), params)),
        methods::CONVERSATIONS_LIST => conversations_list(&m, &team, params, fired),
        methods::CONVERSATIONS_INFO => conversations_info(&m, &team, params),
        methods::CONVERSATIONS_HISTORY => conversations_history(&m, &team, params, fired),
        methods::CONVERSATIONS_REPLIES => conversations_replies(&m, &team, params, fired),
        methods::CHAT_POST_MESSAGE => chat_post_message(&mut m, &team, params),
        _ => Err(SlackError("unknown_method")),
    };
    if let Some(lost) = lost_after(fired) {
        return lost;
    }
    match answered {
        Ok(body) => ok(body),
        Err(e) => api_error(e.0),
    }
}

/// A call that fails before it is carried out (an edge status, an `ok: false` code).
fn failed_before(fired: &[SlackFault]) -> Option<Response> {
    fired.iter().find_map(|kind| match kind {
        SlackFault::Status(code) => {
            let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::BAD_GATEWAY);
            Some((status, "upstream connect error or disconnect/reset").into_response())
        }
        SlackFault::Error(code) => Some(api_error(code)),
        _ => None,
    })
}

/// A call carried out whose answer is lost.
fn lost_after(fired: &[SlackFault]) -> Option<Response> {
    fired.iter().find_map(|kind| match kind {
        SlackFault::Lost(code) => {
            let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::BAD_GATEWAY);
            Some((status, "upstream request timeout").into_response())
        }
        _ => None,
    })
}

/// `GET /oauth/v2/authorize`: the person approves at once, in the installing team; the browser
/// is sent back to `redirect_uri` with a code and the `state` as given.
async fn oauth_authorize(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response {
    let params = Params::parse(query.as_deref(), &HeaderMap::new(), &[]);
    let m = &mut lock(&shared.model);
    if params.get("client_id") != Some(m.oauth_client.0.as_str()) {
        return (StatusCode::BAD_REQUEST, "invalid_client_id").into_response();
    }
    let Some(redirect) = params.get("redirect_uri").map(str::to_owned) else {
        return (StatusCode::BAD_REQUEST, "no redirect_uri").into_response();
    };
    let Some(code) = m.authorize(Some(&redirect)) else {
        return (StatusCode::BAD_REQUEST, "no team to install in").into_response();
    };
    let mut url = match reqwest::Url::parse(&redirect) {
        Ok(url) => url,
        Err(_) => return (StatusCode::BAD_REQUEST, "bad_redirect_uri").into_response(),
    };
    url.query_pairs_mut().append_pair("code", &code);
    if let Some(state) = params.get("state") {
        url.query_pairs_mut().append_pair("state", state);
    }
    let mut r = StatusCode::FOUND.into_response();
    if let Ok(location) = HeaderValue::from_str(url.as_str()) {
        r.headers_mut().insert("location", location);
    }
    r
}

/// `oauth.v2.access`: the app's credentials (HTTP Basic, or `client_id` and `client_secret`
/// parameters) and a code, for a fresh bot token. Faults apply as to any call; a lost answer
/// is lost after the exchange happened.
fn oauth_v2_access(m: &mut Model, params: &Params, fired: &[SlackFault]) -> Response {
    if let Some(failed) = failed_before(fired) {
        return failed;
    }
    let client = (params.get("client_id"), params.get("client_secret"));
    if client.0 != Some(m.oauth_client.0.as_str()) {
        return api_error("invalid_client_id");
    }
    if client.1 != Some(m.oauth_client.1.as_str()) {
        return api_error("bad_client_secret");
    }
    let Some(code) = params.get("code") else {
        return api_error("invalid_code");
    };
    let answered = m.exchange(code, params.get("redirect_uri"));
    if let Some(lost) = lost_after(fired) {
        return lost;
    }
    match answered {
        Ok((token, team)) => ok(json!({
            "access_token": token,
            "token_type": "bot",
            "scope": "channels:history,channels:read,groups:history,groups:read,chat:write",
            "bot_user_id": team.bot_user,
            "app_id": m.app_id,
            "team": {"id": team.id, "name": team.domain},
            "enterprise": null,
            "authed_user": {"id": "USIMINSTALLER"},
        })),
        Err(e) => api_error(e.0),
    }
}

fn auth_test(team: &Team) -> Json {
    json!({
        "url": format!("https://{}.slack.com/", team.domain),
        "team": team.domain,
        "user": "forgesync",
        "team_id": team.id,
        "user_id": team.bot_user,
        "bot_id": team.bot_id,
        "is_enterprise_install": false,
    })
}

/// `auth.revoke`: revokes the calling token (unless `test` is set), as Slack answers it.
fn auth_revoke(m: &mut Model, token: &str, params: &Params) -> Json {
    let test = params.flag("test");
    if !test {
        m.revoke_token(token);
    }
    json!({ "revoked": !test })
}

/// Where a page ends and whether a cursor follows, after the paging faults.
struct Page {
    end: usize,
    has_more: bool,
    next: Option<usize>,
}

fn page(len: usize, start: usize, limit: usize, fired: &[SlackFault]) -> Page {
    let mut end = start.saturating_add(limit).min(len);
    for kind in fired {
        if let SlackFault::ShortPage { keep } = kind {
            end = end.min(start + keep);
        }
    }
    let mut has_more = end < len;
    let mut next = has_more.then_some(end);
    for kind in fired {
        if let SlackFault::HasMore(v) = kind {
            has_more = *v;
            if !v {
                next = None;
            }
        }
    }
    Page {
        end,
        has_more,
        next,
    }
}

fn cursor(prefix: &str, at: &str) -> String {
    BASE64.encode(format!("{prefix}:{at}"))
}

fn read_cursor(params: &Params, prefix: &str) -> Result<Option<String>, SlackError> {
    let Some(c) = params.get("cursor") else {
        return Ok(None);
    };
    let bad = SlackError("invalid_cursor");
    let text = String::from_utf8(BASE64.decode(c).map_err(|_| bad)?).map_err(|_| bad)?;
    let at = text.strip_prefix(prefix).and_then(|r| r.strip_prefix(':'));
    at.map(|a| Some(a.to_owned())).ok_or(bad)
}

fn read_ts_cursor(params: &Params) -> Result<Option<Ts>, SlackError> {
    read_cursor(params, "next_ts")?
        .map(|t| t.parse().map_err(|_| SlackError("invalid_cursor")))
        .transpose()
}

fn conversations_list(
    m: &Model,
    team: &Team,
    params: &Params,
    fired: &[SlackFault],
) -> Result<Json, SlackError> {
    let types = params.get("types").unwrap_or("public_channel");
    let public = types.split(',').any(|t| t.trim() == "public_channel");
    let private = types.split(',').any(|t| t.trim() == "private_channel");
    let exclude_archived = params.flag("exclude_archived");
    let listed: Vec<_> = m
        .channels()
        .filter(|c| c.team == team.id)
        // A private channel is visible to the bot only as a member.
        .filter(|c| {
            if c.is_private {
                private && c.bot_member
            } else {
                public
            }
        })
        .filter(|c| !(exclude_archived && c.is_archived))
        .collect();
    let start = match read_cursor(params, "team")? {
        Some(id) => listed.partition_point(|c| c.id < id),
        None => 0,
    };
    let p = page(listed.len(), start, params.limit(100, 1000), fired);
    let channels: Vec<Json> = listed[start..p.end]
        .iter()
        .map(|c| wire::channel_json(c))
        .collect();
    let next = p
        .next
        .map_or(String::new(), |i| cursor("team", &listed[i].id));
    Ok(json!({ "channels": channels, "response_metadata": { "next_cursor": next } }))
}

/// The team's channel as the bot may see it.
fn visible<'a>(m: &'a Model, team: &Team, params: &Params) -> Result<&'a Channel, SlackError> {
    let id = params
        .get("channel")
        .ok_or(SlackError("channel_not_found"))?;
    m.channel(id)
        .filter(|c| c.team == team.id && (!c.is_private || c.bot_member))
        .ok_or(SlackError("channel_not_found"))
}

/// The team's channel whose messages the bot may read.
fn readable<'a>(m: &'a Model, team: &Team, params: &Params) -> Result<&'a Channel, SlackError> {
    let c = visible(m, team, params)?;
    if !c.bot_member {
        return Err(SlackError("not_in_channel"));
    }
    Ok(c)
}

fn conversations_info(m: &Model, team: &Team, params: &Params) -> Result<Json, SlackError> {
    let c = visible(m, team, params)?;
    Ok(json!({ "channel": wire::channel_json(c) }))
}

/// Whether `ts` is within `oldest`..`latest` (exclusive unless `inclusive`).
fn bounded(params: &Params) -> Result<impl Fn(Ts) -> bool, SlackError> {
    let oldest = params.ts("oldest")?;
    let latest = params.ts("latest")?;
    let inclusive = params.flag("inclusive");
    Ok(move |ts: Ts| {
        let after = oldest.is_none_or(|o| if inclusive { ts >= o } else { ts > o });
        let before = latest.is_none_or(|l| if inclusive { ts <= l } else { ts < l });
        after && before
    })
}

fn conversations_history(
    m: &Model,
    team: &Team,
    params: &Params,
    fired: &[SlackFault],
) -> Result<Json, SlackError> {
    let c = readable(m, team, params)?;
    let within = bounded(params)?;
    // Newest first; thread replies only when broadcast.
    let listed: Vec<_> = c
        .messages()
        .rev()
        .filter(|msg| msg.in_history() && within(msg.ts))
        .collect();
    let start = match read_ts_cursor(params)? {
        Some(at) => listed.partition_point(|msg| msg.ts > at),
        None => 0,
    };
    let (default, max) = m.page_limits(100, 999);
    let p = page(listed.len(), start, params.limit(default, max), fired);
    let messages: Vec<Json> = listed[start..p.end]
        .iter()
        .map(|msg| wire::message_json(c, msg))
        .collect();
    let mut out = json!({
        "messages": messages,
        "has_more": p.has_more,
        "pin_count": 0,
        "channel_actions_ts": null,
        "channel_actions_count": 0,
    });
    // Slack leaves `response_metadata` out on a last page.
    if let Some(i) = p.next {
        out["response_metadata"] =
            json!({ "next_cursor": cursor("next_ts", &listed[i].ts.to_string()) });
    }
    Ok(out)
}

fn conversations_replies(
    m: &Model,
    team: &Team,
    params: &Params,
    fired: &[SlackFault],
) -> Result<Json, SlackError> {
    let c = readable(m, team, params)?;
    let ts: Ts = params
        .get("ts")
        .ok_or(SlackError("thread_not_found"))?
        .parse()
        .map_err(|_| SlackError("thread_not_found"))?;
    let asked = c.messages.get(&ts).ok_or(SlackError("thread_not_found"))?;
    let root = c
        .messages
        .get(&asked.thread_ts.unwrap_or(asked.ts))
        .ok_or(SlackError("thread_not_found"))?;
    let within = bounded(params)?;
    // The root first, then its replies oldest first.
    let listed: Vec<_> = std::iter::once(root)
        .chain(c.replies(root.ts).filter(|r| within(r.ts)))
        .collect();
    let start = match read_ts_cursor(params)? {
        Some(at) => 1 + listed[1..].partition_point(|msg| msg.ts < at),
        None => 0,
    };
    let (default, max) = m.page_limits(1000, 1000);
    let p = page(listed.len(), start, params.limit(default, max), fired);
    let messages: Vec<Json> = listed[start..p.end]
        .iter()
        .map(|msg| wire::message_json(c, msg))
        .collect();
    let mut out = json!({ "messages": messages, "has_more": p.has_more });
    if let Some(i) = p.next {
        out["response_metadata"] =
            json!({ "next_cursor": cursor("next_ts", &listed[i].ts.to_string()) });
    }
    Ok(out)
}

fn chat_post_message(m: &mut Model, team: &Team, params: &Params) -> Result<Json, SlackError> {
    let target = params
        .get("channel")
        .ok_or(SlackError("channel_not_found"))?;
    // A channel by id, or by name as Slack also accepts.
    let id = m
        .channel(target)
        .filter(|c| c.team == team.id)
        .or_else(|| m.channel_named(&team.id, target.trim_start_matches('#')))
        .filter(|c| !c.is_private || c.bot_member)
        .map(|c| c.id.clone())
        .ok_or(SlackError("channel_not_found"))?;
    let text = params.get("text").ok_or(SlackError("no_text"))?;
    let message = m.post_as_bot(
        &id,
        text,
        params.get("thread_ts"),
        params.flag("reply_broadcast"),
    )?;
    let c = m.channel(&id).ok_or(SlackError("channel_not_found"))?;
    Ok(json!({
        "channel": id,
        "ts": message.ts.to_string(),
        "message": wire::message_json(c, &message),
    }))
}

/// `POST /_admin/<action>` with a JSON body: the model's methods over HTTP, for the local
/// stack. Answers `{"ok":true,...}`, or 400 with `{"ok":false,"error":...}`.
async fn admin(
    State(shared): State<Arc<Shared>>,
    Path(action): Path<String>,
    body: Bytes,
) -> Response {
    let args: Json = serde_json::from_slice(&body).unwrap_or(json!({}));
    let s = |name: &str| args[name].as_str().unwrap_or_default().to_owned();
    let done = {
        let mut m = lock(&shared.model);
        let m = &mut *m;
        let ts = |r: Result<String, SlackError>| r.map(|ts| json!({ "ts": ts }));
        let unit = |r: Result<(), SlackError>| r.map(|()| json!({}));
        match action.as_str() {
            "add_team" => Ok(json!({ "team": m.add_team(&s("domain")) })),
            "add_token" => {
                m.add_token(&s("token"), &s("team"));
                Ok(json!({}))
            }
            "revoke_token" => {
                m.revoke_token(&s("token"));
                Ok(json!({}))
            }
            "add_user" => Ok(json!({ "user": m.add_user(&s("team")) })),
            "add_channel" => m
                .add_channel(
                    &s("team"),
                    &s("name"),
                    args["private"].as_bool() == Some(true),
                )
                .map(|id| json!({ "channel": id })),
            "join_bot" => unit(m.join_bot(&s("channel"))),
            "remove_bot" => unit(m.remove_bot(&s("channel"))),
            "archive" => unit(m.archive(&s("channel"))),
            "unarchive" => unit(m.unarchive(&s("channel"))),
            "rename" => unit(m.rename(&s("channel"), &s("name"))),
            "delete_channel" => unit(m.delete_channel(&s("channel"))),
            "post" => ts(m.post(&s("channel"), &s("user"), &s("text"))),
            "reply" => ts(m.reply(
                &s("channel"),
                &s("thread_ts"),
                &s("user"),
                &s("text"),
                args["broadcast"].as_bool() == Some(true),
            )),
            "edit" => ts(m.edit(&s("channel"), &s("ts"), &s("text"))),
            "unfurl" => unit(m.unfurl(&s("channel"), &s("ts"))),
            "delete" => unit(m.delete(&s("channel"), &s("ts"))),
            "share_file" => ts(m.share_file(&s("channel"), &s("user"), &s("name"))),
            "bot_message" => {
                ts(m.bot_message(&s("channel"), &s("bot_id"), &s("username"), &s("text")))
            }
            "subscribe_events" => {
                shared.outbox.subscribe(Some(Subscription {
                    url: s("url"),
                    secret: s("signing_secret").into_bytes(),
                }));
                Ok(json!({}))
            }
            _ => Err(SlackError("unknown_action")),
        }
    };
    shared.changed();
    match done {
        Ok(body) => ok(body),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({ "ok": false, "error": e.0 })),
        )
            .into_response(),
    }
}
