//! The HTTP server: `POST /api/<method>` with a JSON body for the methods of our contract, each
//! call logged with its body, authenticated and run through the injected faults before it is
//! answered in Outline's envelope (`{data, pagination?, policies?, status, ok}`, errors
//! `{ok:false, error, status, message}`); `POST /_admin/<action>` to change the team, script
//! faults and read the logs over HTTP.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value as Json, json};
use time::OffsetDateTime;

use super::deliveries::{DeliveryAttempt, DeliveryPlan, Order, Outbox};
use super::fault::{Change, FaultSpec, Lost, OutlineFault, methods};
use super::model::{Document, Model, NewDocument, OutlineError};
use super::wire;
use crate::github::{Fault, Faults};
use crate::served::Served;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One API call as it arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiCall {
    /// The method (`documents.list`).
    pub method: String,
    /// The bearer token it came with.
    pub token: Option<String>,
    /// Its JSON body (`{}` when there was none or it did not parse).
    pub body: Json,
}

impl ApiCall {
    /// One field of the body.
    pub fn param(&self, name: &str) -> Option<&Json> {
        self.body.get(name)
    }
}

struct Shared {
    model: Arc<Mutex<Model>>,
    /// Per API key: when its current rate-limit window began, and the calls in it.
    windows: Mutex<HashMap<String, (Instant, u32)>>,
    faults: Mutex<Faults<OutlineFault>>,
    log: Mutex<Vec<ApiCall>>,
    outbox: Arc<Outbox>,
}

impl Shared {
    /// Wakes the sender if a change queued deliveries.
    fn changed(&self) {
        if !lock(&self.model).deliveries.is_empty() {
            self.outbox.queued.notify_one();
        }
    }
}

/// A running simulated Outline on `127.0.0.1:<port>`. Dropping it stops the server and the
/// delivery sender.
pub struct OutlineSim {
    shared: Arc<Shared>,
    base_url: String,
    served: Served,
}

impl OutlineSim {
    /// Serves `model` on a free port of 127.0.0.1.
    pub async fn start(mut model: Model) -> std::io::Result<OutlineSim> {
        // The model as given is the team's state, not news.
        model.take_deliveries();
        let (listener, base_url) = crate::served::bind().await?;
        let shared = Arc::new(Shared {
            model: Arc::new(Mutex::new(model)),
            windows: Mutex::new(HashMap::new()),
            faults: Mutex::new(Faults::default()),
            log: Mutex::new(Vec::new()),
            outbox: Arc::new(Outbox::new()),
        });
        let app = Router::new()
            .route("/api/{method}", post(api_call))
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
        let served = Served::start(listener, app, "outline", Some(sender));
        Ok(OutlineSim {
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

    /// Reads or changes the model while the simulator runs. The deliveries a change queues are
    /// sent right after, in the background ([`OutlineSim::settle`] waits for them).
    pub fn model<R>(&self, f: impl FnOnce(&mut Model) -> R) -> R {
        let out = f(&mut lock(&self.shared.model));
        self.shared.changed();
        out
    }

    /// Arms a fault; it counts matching calls from now on.
    pub fn inject(&self, fault: Fault<OutlineFault>) {
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

    /// Every call with its body, in the order the calls arrived.
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

    /// How deliveries leave from now on (copies, holding, receiver timeout).
    pub fn set_delivery_plan(&self, plan: DeliveryPlan) {
        self.shared.outbox.set_plan(plan);
    }

    /// Sends the held deliveries (see [`DeliveryPlan::hold`]) in `order`, each as many times
    /// as the plan says; how many were held. Waits until they are sent.
    pub async fn release(&self, order: Order) -> usize {
        self.settle().await;
        self.shared.outbox.release(order).await
    }

    /// How many deliveries are held.
    pub fn held(&self) -> usize {
        self.shared.outbox.held()
    }

    /// Sends an earlier delivery once more, freshly signed; whether it was known.
    pub async fn redeliver(&self, delivery_id: &str) -> bool {
        self.shared.outbox.redeliver(delivery_id).await
    }

    /// Waits until every queued delivery has been sent (or held).
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
    pub fn deliveries(&self) -> Vec<DeliveryAttempt> {
        self.shared.outbox.attempts()
    }

    /// Stops the server and waits (up to 5 s) for open calls to finish.
    pub async fn shutdown(mut self) {
        self.served.shutdown().await;
    }
}

fn ok(mut body: Json) -> Response {
    body["status"] = json!(200);
    body["ok"] = json!(true);
    axum::Json(body).into_response()
}

fn error(e: &OutlineError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    (
        status,
        axum::Json(json!({
            "ok": false,
            "error": e.code,
            "status": e.status,
            "message": e.message,
        })),
    )
        .into_response()
}

/// A 429 saying to retry after `retry_after` seconds (Outline's limiter writes milliseconds
/// divided by 1000, so a fraction such as `0.734`).
fn rate_limited(retry_after: impl Into<HeaderValue>) -> Response {
    let mut r = (
        StatusCode::TOO_MANY_REQUESTS,
        axum::Json(json!({
            "ok": false,
            "error": "rate_limit_exceeded",
            "status": 429,
            "message": "Rate limit exceeded for this operation",
        })),
    )
        .into_response();
    let h = r.headers_mut();
    h.insert("retry-after", retry_after.into());
    h.insert("ratelimit-remaining", HeaderValue::from(0));
    r
}

fn status_fault(code: u16) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY);
    if code == 500 {
        return error(&OutlineError {
            status: 500,
            code: "internal_server_error",
            message: "An unexpected error occurred".to_owned(),
        });
    }
    (
        status,
        "upstream connect error or disconnect/reset before headers",
    )
        .into_response()
}

/// A 200 whose body breaks off half-way: the connection closes before the answer is whole.
fn dropped() -> Response {
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from_static(b"{\"data\":{\"id\":")),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "simulated connection drop",
        )),
    ];
    let mut r = Response::new(Body::from_stream(futures::stream::iter(chunks)));
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    r
}

fn token_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
}

async fn api_call(
    State(shared): State<Arc<Shared>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Json = serde_json::from_slice(&body)
        .ok()
        .filter(Json::is_object)
        .unwrap_or_else(|| json!({}));
    let token = token_of(&headers);
    lock(&shared.log).push(ApiCall {
        method: method.clone(),
        token: token.clone(),
        body: body.clone(),
    });
    let fired = lock(&shared.faults).on_call(&method);
    let delay: Duration = fired
        .iter()
        .filter_map(|k| match k {
            OutlineFault::Delay(d) => Some(*d),
            _ => None,
        })
        .sum();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let quota = charge(&shared, token.as_deref());
    let mut response = match quota {
        Some(q) if q.remaining.is_none() => rate_limited(seconds_as_outline_writes(q.reset_in)),
        _ => answer(&shared, &method, token.as_deref(), &body, &fired),
    };
    if let Some(q) = quota {
        let h = response.headers_mut();
        h.insert("ratelimit-limit", HeaderValue::from(q.limit));
        h.insert(
            "ratelimit-remaining",
            HeaderValue::from(q.remaining.unwrap_or(0)),
        );
        let reset = SystemTime::now() + q.reset_in;
        let reset = reset
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        h.insert("ratelimit-reset", HeaderValue::from(reset));
    }
    shared.changed();
    response
}

/// `Retry-After` as Outline's limiter writes it: `msBeforeNext / 1000` in JavaScript, so whole
/// milliseconds as a decimal fraction of a second (`0.734`, `1.5`, `60`).
fn seconds_as_outline_writes(wait: Duration) -> HeaderValue {
    let millis = wait.as_millis().max(1);
    let text = if millis.is_multiple_of(1000) {
        format!("{}", millis / 1000)
    } else {
        format!("{}.{:03}", millis / 1000, millis % 1000)
            .trim_end_matches('0')
            .to_owned()
    };
    HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static("1"))
}

/// Where a call leaves its API key's allowance.
#[derive(Clone, Copy)]
struct Quota {
    limit: u32,
    /// Calls left in the window; `None` when this call is past the limit.
    remaining: Option<u32>,
    reset_in: Duration,
}

/// Counts a call of a live API key against its window; `None` without a rate limit.
fn charge(shared: &Shared, token: Option<&str>) -> Option<Quota> {
    let (limits, live) = {
        let m = lock(&shared.model);
        (m.rate_limit?, m.authenticate(token).is_ok())
    };
    // Refused keys are answered 401 and not counted.
    let token = token.filter(|_| live)?;
    let now = Instant::now();
    let mut windows = lock(&shared.windows);
    let (began, calls) = windows.entry(token.to_owned()).or_insert((now, 0));
    if now.duration_since(*began) >= limits.window {
        *began = now;
        *calls = 0;
    }
    let reset_in = limits.window.saturating_sub(now.duration_since(*began));
    if *calls >= limits.limit {
        return Some(Quota {
            limit: limits.limit,
            remaining: None,
            reset_in,
        });
    }
    *calls += 1;
    Some(Quota {
        limit: limits.limit,
        remaining: Some(limits.limit - *calls),
        reset_in,
    })
}

/// The answer to a call once its delay is over.
fn answer(
    shared: &Shared,
    method: &str,
    token: Option<&str>,
    body: &Json,
    fired: &[OutlineFault],
) -> Response {
    let mut m = lock(&shared.model);
    if !methods::ALL.contains(&method) {
        return error(&OutlineError::not_found());
    }
    if let Err(e) = m.authenticate(token) {
        return error(&e);
    }
    for kind in fired {
        match kind {
            OutlineFault::RateLimited { retry_after } => return rate_limited(*retry_after),
            OutlineFault::Status(code) => return status_fault(*code),
            _ => {}
        }
    }
    for kind in fired {
        match kind {
            OutlineFault::Mutate(mutation) => (mutation.0)(&mut m),
            OutlineFault::Change(changes) => {
                for c in changes {
                    if let Err(e) = c.apply(&mut m) {
                        tracing::debug!(change = ?c, error = %e, "outline simulator: scripted change refused");
                    }
                }
            }
            _ => {}
        }
    }
    let keep = fired
        .iter()
        .filter_map(|k| match k {
            OutlineFault::ShortPage { keep } => Some(*keep),
            _ => None,
        })
        .min();
    let answered = match method {
        methods::AUTH_INFO => Ok(auth_info(&m)),
        methods::COLLECTIONS_LIST => collections_list(&m, body, keep),
        methods::COLLECTIONS_INFO => collections_info(&m, body),
        methods::DOCUMENTS_LIST => documents_list(&m, body, keep),
        methods::DOCUMENTS_INFO => documents_info(&m, body),
        methods::WEBHOOK_SUBSCRIPTIONS_CREATE => subscriptions_create(&mut m, body),
        methods::WEBHOOK_SUBSCRIPTIONS_LIST => subscriptions_list(&m, body, keep),
        methods::WEBHOOK_SUBSCRIPTIONS_DELETE => subscriptions_delete(&mut m, body),
        _ => Err(OutlineError::not_found()),
    };
    // The work is done; only its answer goes missing.
    for kind in fired {
        if let OutlineFault::Lost(lost) = kind {
            return match lost {
                Lost::Status { status } => status_fault(*status),
                Lost::Drop => dropped(),
            };
        }
    }
    match answered {
        Ok(body) => ok(body),
        Err(e) => error(&e),
    }
}

fn str_field<'a>(body: &'a Json, name: &str) -> Option<&'a str> {
    body.get(name)
        .and_then(Json::as_str)
        .filter(|s| !s.is_empty())
}

fn required<'a>(body: &'a Json, name: &str) -> Result<&'a str, OutlineError> {
    str_field(body, name).ok_or_else(|| OutlineError::validation(format!("{name}: Required")))
}

/// A number, or a string holding one (both reach Outline from clients).
fn number(body: &Json, name: &str) -> Result<Option<i64>, OutlineError> {
    match body.get(name) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| OutlineError::validation(format!("{name} must be an integer"))),
        Some(Json::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| OutlineError::validation(format!("{name} must be an integer"))),
        Some(_) => Err(OutlineError::validation(format!(
            "{name} must be an integer"
        ))),
    }
}

/// `offset` and `limit` as Outline's pagination reads them: 0 and 25 by default, at most 100.
fn paging(body: &Json) -> Result<(usize, usize), OutlineError> {
    let offset = number(body, "offset")?.unwrap_or(0);
    let limit = number(body, "limit")?.unwrap_or(25);
    if offset < 0 {
        return Err(OutlineError::validation(
            "Pagination offset must be a positive integer",
        ));
    }
    if limit < 0 {
        return Err(OutlineError::validation(
            "Pagination limit must be a positive integer",
        ));
    }
    if limit > 100 {
        return Err(OutlineError::validation(
            "Pagination limit is too large (max 100)",
        ));
    }
    Ok((offset as usize, limit as usize))
}

/// One page of `items` and its `pagination`. Outline names a `nextPath` on every page, the
/// last one too: a listing ends with an empty page. A short page (`keep`) holds fewer items
/// while `nextPath` still moves on by `limit`, as Outline's does when rows are dropped after
/// the query.
fn page<T: Clone>(
    method: &str,
    items: &[T],
    offset: usize,
    limit: usize,
    keep: Option<usize>,
) -> (Vec<T>, Json) {
    let start = offset.min(items.len());
    let end = offset.saturating_add(limit).min(items.len());
    let end = keep.map_or(end, |k| end.min(start + k));
    let pagination = json!({
        "offset": offset,
        "limit": limit,
        "nextPath": format!("/api/{method}?limit={limit}&offset={}", offset + limit),
    });
    (items[start..end].to_vec(), pagination)
}

fn auth_info(m: &Model) -> Json {
    json!({
        "data": {
            "user": wire::user_json(m),
            "team": wire::team_json(m),
            "groups": [],
            "groupUsers": [],
            "availableTeams": [{
                "id": m.team.id,
                "name": m.team.name,
                "avatarUrl": format!("https://avatars.example/{}.png", m.team.id),
                "url": format!("https://{}.getoutline.com", m.team.subdomain),
                "isSignedIn": true,
            }],
        },
        "policies": [wire::policy(&m.team.id, false)],
    })
}

/// `direction`: `DESC` unless `ASC` (any case).
fn descending(body: &Json, default_desc: bool) -> Result<bool, OutlineError> {
    match str_field(body, "direction").map(str::to_ascii_uppercase) {
        None => Ok(default_desc),
        Some(d) if d == "ASC" => Ok(false),
        Some(d) if d == "DESC" => Ok(true),
        Some(_) => Err(OutlineError::validation(
            "direction must be one of ASC, DESC",
        )),
    }
}

fn collections_list(m: &Model, body: &Json, keep: Option<usize>) -> Result<Json, OutlineError> {
    let (offset, limit) = paging(body)?;
    let desc = descending(body, false)?;
    let mut listed: Vec<_> = m.collections().filter(|c| c.deleted_at.is_none()).collect();
    match str_field(body, "sort").unwrap_or("index") {
        "index" | "createdAt" => {
            listed.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)))
        }
        "updatedAt" => listed.sort_by(|a, b| (a.updated_at, &a.id).cmp(&(b.updated_at, &b.id))),
        "name" => listed.sort_by(|a, b| (&a.name, &a.id).cmp(&(&b.name, &b.id))),
        other => return Err(OutlineError::validation(format!("unknown sort {other}"))),
    }
    if desc {
        listed.reverse();
    }
    let (items, pagination) = page(methods::COLLECTIONS_LIST, &listed, offset, limit, keep);
    let data: Vec<Json> = items.iter().map(|c| wire::collection_json(c)).collect();
    let policies: Vec<Json> = items.iter().map(|c| wire::policy(&c.id, false)).collect();
    Ok(json!({ "data": data, "pagination": pagination, "policies": policies }))
}

fn collections_info(m: &Model, body: &Json) -> Result<Json, OutlineError> {
    let id = required(body, "id")?;
    let c = m
        .collections()
        .find(|c| c.id == id || c.url_id == id)
        .filter(|c| c.deleted_at.is_none())
        .ok_or_else(OutlineError::not_found)?;
    Ok(json!({
        "data": wire::collection_json(c),
        "policies": [wire::policy(&c.id, false)],
    }))
}

fn parse_date(v: &Json) -> Result<OffsetDateTime, OutlineError> {
    v.as_str()
        .and_then(|s| OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok())
        .ok_or_else(|| OutlineError::validation("filter value must be an ISO 8601 date"))
}

/// Whether `d` passes one leaf of `filters` (the fields a mirror filters on: its collection,
/// parent, and dates).
fn passes(d: &Document, leaf: &Json) -> Result<bool, OutlineError> {
    let field = leaf["field"].as_str().unwrap_or_default();
    let op = leaf["operator"].as_str().unwrap_or_default();
    let unsupported = || {
        OutlineError::validation(format!(
            "filter {field} {op} is not supported by the simulator"
        ))
    };
    let value = &leaf["value"];
    match field {
        "collectionId" | "parentDocumentId" => {
            let have = if field == "collectionId" {
                Some(d.collection_id.as_str())
            } else {
                d.parent_document_id.as_deref()
            };
            match op {
                "eq" => Ok(have == value.as_str()),
                "neq" => Ok(have != value.as_str()),
                "isNull" => Ok(have.is_none()),
                "isNotNull" => Ok(have.is_some()),
                "in" => Ok(value
                    .as_array()
                    .is_some_and(|vs| vs.iter().any(|v| v.as_str() == have))),
                _ => Err(unsupported()),
            }
        }
        "createdAt" | "updatedAt" | "publishedAt" | "archivedAt" => {
            let have = match field {
                "createdAt" => Some(d.created_at),
                "updatedAt" => Some(d.updated_at),
                "publishedAt" => d.published_at,
                _ => d.archived_at,
            };
            match op {
                "isNull" => return Ok(have.is_none()),
                "isNotNull" => return Ok(have.is_some()),
                _ => {}
            }
            let Some(have) = have else { return Ok(false) };
            let at = parse_date(value)?;
            match op {
                "gt" => Ok(have > at),
                "gte" => Ok(have >= at),
                "lt" => Ok(have < at),
                "lte" => Ok(have <= at),
                "eq" => Ok(have == at),
                _ => Err(unsupported()),
            }
        }
        _ => Err(unsupported()),
    }
}

fn documents_list(m: &Model, body: &Json, keep: Option<usize>) -> Result<Json, OutlineError> {
    let (offset, limit) = paging(body)?;
    let desc = descending(body, true)?;
    let filters = body.get("filters").and_then(Json::as_array);
    let collection = str_field(body, "collectionId");
    let parent = str_field(body, "parentDocumentId");
    if filters.is_some() && (collection.is_some() || parent.is_some()) {
        return Err(OutlineError::validation(
            "filters cannot be combined with collectionId or parentDocumentId",
        ));
    }
    if let Some(id) = collection
        && m.collection(id).is_none_or(|c| c.deleted_at.is_some())
    {
        return Err(OutlineError::forbidden());
    }
    let statuses: Vec<&str> = body
        .get("statusFilter")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_else(|| vec!["published", "draft"]);
    let mut listed = Vec::new();
    for d in m.documents() {
        if d.deleted_at.is_some() {
            continue;
        }
        if m.collection(&d.collection_id)
            .is_none_or(|c| c.deleted_at.is_some())
        {
            continue;
        }
        let status = if d.archived_at.is_some() {
            "archived"
        } else if d.published_at.is_some() {
            "published"
        } else {
            "draft"
        };
        if !statuses.contains(&status) {
            continue;
        }
        if collection.is_some_and(|c| c != d.collection_id)
            || parent.is_some_and(|p| d.parent_document_id.as_deref() != Some(p))
        {
            continue;
        }
        let mut pass = true;
        for leaf in filters.into_iter().flatten() {
            pass = pass && passes(d, leaf)?;
        }
        if pass {
            listed.push(d);
        }
    }
    let sort = str_field(body, "sort").unwrap_or("updatedAt");
    match sort {
        "createdAt" => listed.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id))),
        "updatedAt" => listed.sort_by(|a, b| (a.updated_at, &a.id).cmp(&(b.updated_at, &b.id))),
        "publishedAt" => {
            listed.sort_by(|a, b| (a.published_at, &a.id).cmp(&(b.published_at, &b.id)))
        }
        "title" => listed.sort_by(|a, b| (&a.title, &a.id).cmp(&(&b.title, &b.id))),
        other => return Err(OutlineError::validation(format!("unknown sort {other}"))),
    }
    if desc {
        listed.reverse();
    }
    let (items, pagination) = page(methods::DOCUMENTS_LIST, &listed, offset, limit, keep);
    let data: Vec<Json> = items.iter().map(|d| wire::document_json(m, d)).collect();
    let policies: Vec<Json> = items.iter().map(|d| wire::policy(&d.id, false)).collect();
    Ok(json!({ "data": data, "pagination": pagination, "policies": policies }))
}

fn documents_info(m: &Model, body: &Json) -> Result<Json, OutlineError> {
    let id = str_field(body, "id")
        .ok_or_else(|| OutlineError::validation("id or shareId is required"))?;
    // A permanently deleted document is gone; a soft-deleted one answers with `deletedAt`.
    let d = m.document(id).ok_or_else(OutlineError::not_found)?;
    Ok(json!({
        "data": wire::document_json(m, d),
        "policies": [wire::policy(&d.id, d.deleted_at.is_some())],
    }))
}

fn subscriptions_create(m: &mut Model, body: &Json) -> Result<Json, OutlineError> {
    let name = required(body, "name")?;
    let url = required(body, "url")?;
    let events: Vec<String> = body
        .get("events")
        .and_then(Json::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Json::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let s = m.create_subscription(name, url, &events, str_field(body, "secret"))?;
    Ok(json!({ "data": wire::subscription_json(&s) }))
}

fn subscriptions_list(m: &Model, body: &Json, keep: Option<usize>) -> Result<Json, OutlineError> {
    let (offset, limit) = paging(body)?;
    // Newest first, as Outline lists them.
    let mut listed: Vec<_> = m.subscriptions().collect();
    listed.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
    let (items, pagination) = page(
        methods::WEBHOOK_SUBSCRIPTIONS_LIST,
        &listed,
        offset,
        limit,
        keep,
    );
    let data: Vec<Json> = items.iter().map(|s| wire::subscription_json(s)).collect();
    let policies: Vec<Json> = items.iter().map(|s| wire::policy(&s.id, false)).collect();
    Ok(json!({ "data": data, "pagination": pagination, "policies": policies }))
}

fn subscriptions_delete(m: &mut Model, body: &Json) -> Result<Json, OutlineError> {
    let id = required(body, "id")?;
    m.delete_subscription(id)?;
    Ok(json!({ "success": true }))
}

fn attempt_json(a: &DeliveryAttempt) -> Json {
    json!({
        "deliveryId": a.delivery_id,
        "subscriptionId": a.subscription_id,
        "event": a.event,
        "url": a.url,
        "status": a.status,
        "failure": a.failure,
        "signature": a.signature,
        "body": a.json(),
    })
}

/// `POST /_admin/<action>` with a JSON body: the model's methods, faults, the delivery plan
/// and the logs over HTTP, for tests in other processes and the local stack. Answers
/// `{"ok":true,...}`, or the error's status with `{"ok":false,"error":...,"message":...}`.
///
/// A change delivers its event unless `"deliver": false`; `documents.delete` delivers only with
/// `"deliver": true`.
async fn admin(
    State(shared): State<Arc<Shared>>,
    Path(action): Path<String>,
    body: Bytes,
) -> Response {
    let args: Json = serde_json::from_slice(&body).unwrap_or(json!({}));
    let s = |name: &str| args[name].as_str().unwrap_or_default().to_owned();
    let deliver = |default: bool| args["deliver"].as_bool().unwrap_or(default);
    let unit = |r: Result<(), OutlineError>| r.map(|()| json!({}));
    let done: Result<Json, OutlineError> = match action.as_str() {
        "deliveries.release" => {
            let order = match args["order"].as_str().unwrap_or("in_order") {
                "reversed" => Order::Reversed,
                "shuffled" => Order::Shuffled(args["seed"].as_u64().unwrap_or(1)),
                _ => Order::InOrder,
            };
            // What changes queued so far is held first.
            shared.outbox.pump(&shared.model).await;
            let n = shared.outbox.release(order).await;
            Ok(json!({ "released": n }))
        }
        _ => {
            let shared = &shared;
            let mut m = lock(&shared.model);
            let m = &mut *m;
            // A change made with or without its deliveries.
            let change =
                |m: &mut Model,
                 on: bool,
                 f: &mut dyn FnMut(&mut Model) -> Result<Json, OutlineError>| {
                    if on { f(m) } else { m.quietly(|m| f(m)) }
                };
            match action.as_str() {
                "tokens.add" => {
                    m.add_token(&s("token"));
                    Ok(json!({}))
                }
                "tokens.revoke" => {
                    m.revoke_token(&s("token"));
                    Ok(json!({}))
                }
                "collections.create" => change(m, deliver(true), &mut |m| {
                    Ok(json!({ "id": m.add_collection(&s("name")) }))
                }),
                "collections.delete" => change(m, deliver(true), &mut |m| {
                    unit(m.delete_collection(&s("id")))
                }),
                "documents.create" => match serde_json::from_value::<NewDocument>(args.clone()) {
                    Ok(new) => change(m, deliver(true), &mut |m| {
                        let id = m.add_document(new.clone())?;
                        let url_id = m.document(&id).map(|d| d.url_id.clone());
                        Ok(json!({ "id": id, "urlId": url_id }))
                    }),
                    Err(e) => Err(OutlineError::validation(e.to_string())),
                },
                "documents.update" => change(m, deliver(true), &mut |m| {
                    unit(m.update_document(&s("id"), args["title"].as_str(), args["text"].as_str()))
                }),
                "documents.delete" => change(m, deliver(false), &mut |m| {
                    unit(m.delete_document(&s("id")))
                }),
                "documents.move" => change(m, deliver(true), &mut |m| {
                    unit(m.move_document(
                        &s("id"),
                        &s("collectionId"),
                        args["parentDocumentId"].as_str(),
                    ))
                }),
                "documents.archive" => change(m, deliver(true), &mut |m| {
                    unit(m.archive_document(&s("id")))
                }),
                "documents.publish" => change(m, deliver(true), &mut |m| {
                    unit(m.publish_document(&s("id")))
                }),
                "documents.restore" => change(m, deliver(true), &mut |m| {
                    unit(m.restore_document(&s("id"), args["collectionId"].as_str()))
                }),
                "documents.permanent_delete" => change(m, deliver(true), &mut |m| {
                    unit(Change::PermanentlyDeleteDocument { id: s("id") }.apply(m))
                }),
                "documents.list" => {
                    let docs: Vec<Json> =
                        m.documents().map(|d| wire::document_json(m, d)).collect();
                    Ok(json!({ "data": docs }))
                }
                "collections.list" => {
                    let cs: Vec<Json> = m.collections().map(wire::collection_json).collect();
                    Ok(json!({ "data": cs }))
                }
                "webhookSubscriptions.list" => {
                    let subs: Vec<Json> = m.subscriptions().map(wire::subscription_json).collect();
                    Ok(json!({ "data": subs }))
                }
                "calls" => {
                    let calls: Vec<Json> = lock(&shared.log)
                        .iter()
                        .map(|c| json!({ "method": c.method, "token": c.token, "body": c.body }))
                        .collect();
                    Ok(json!({ "data": calls }))
                }
                "deliveries" => {
                    let attempts: Vec<Json> =
                        shared.outbox.attempts().iter().map(attempt_json).collect();
                    Ok(json!({ "data": attempts, "held": shared.outbox.held() }))
                }
                "deliveries.plan" => {
                    let d = DeliveryPlan::default();
                    shared.outbox.set_plan(DeliveryPlan {
                        copies: args["copies"].as_u64().map_or(d.copies, |c| c as u32),
                        fresh_copy_ids: args["freshCopyIds"].as_bool().unwrap_or(d.fresh_copy_ids),
                        hold: args["hold"].as_bool().unwrap_or(d.hold),
                        timeout: args["timeoutMs"]
                            .as_u64()
                            .map_or(d.timeout, Duration::from_millis),
                    });
                    Ok(json!({}))
                }
                "faults.inject" => match serde_json::from_value::<FaultSpec>(args.clone()) {
                    Ok(spec) => {
                        lock(&shared.faults).inject(spec.into_fault());
                        Ok(json!({}))
                    }
                    Err(e) => Err(OutlineError::validation(e.to_string())),
                },
                "faults.clear" => {
                    lock(&shared.faults).clear();
                    Ok(json!({}))
                }
                _ => Err(OutlineError::validation(format!(
                    "unknown admin action {action}"
                ))),
            }
        }
    };
    shared.changed();
    match done {
        Ok(mut body) => {
            body["ok"] = json!(true);
            axum::Json(body).into_response()
        }
        Err(e) => error(&e),
    }
}
