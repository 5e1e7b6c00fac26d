//! The HTTP server: `POST /api/graphql` and the `/api/v4` calls of our contract, each call
//! authenticated, counted, charged to the rate-limit window and run through the injected faults
//! before it is answered.

// Early answers are whole `Response`s carried in `Err`; boxing them buys nothing in a test server.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::{Value as Json, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::fault::{GitlabFault, ops};
use super::graphql::{self, GitlabSchema};
use super::model::{Model, Note, NoteOn};
use super::webhook::{self, HookAttempt};
use crate::github::{Fault, Faults};
use crate::served::Served;

/// GitLab leaves `X-Total` (and `X-Total-Pages`) out past this many rows.
const TOTAL_HEADER_LIMIT: usize = 10_000;

struct Shared {
    model: Arc<Mutex<Model>>,
    faults: Mutex<Faults<GitlabFault>>,
    schema: GitlabSchema,
    base_url: String,
    /// Sends the hooks' deliveries.
    http: reqwest::Client,
    /// Wakes the sender when a change queued deliveries.
    hooks_queued: tokio::sync::Notify,
    /// One sender at a time, so deliveries leave in the order they were queued.
    sending: tokio::sync::Mutex<()>,
    /// Every execution of a hook so far.
    attempts: Mutex<Vec<HookAttempt>>,
    /// Every call's operation, in the order the calls arrived.
    log: Mutex<Vec<String>>,
    /// While set, queued deliveries wait for [`GitlabSim::take_held_hooks`] instead of leaving.
    held: std::sync::atomic::AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running simulated GitLab on `127.0.0.1:<port>`. Dropping it stops the server.
pub struct GitlabSim {
    shared: Arc<Shared>,
    served: Served,
}

impl GitlabSim {
    /// Serves `model` on a free port of 127.0.0.1.
    pub async fn start(model: Model) -> std::io::Result<GitlabSim> {
        let (listener, base_url) = crate::served::bind().await?;
        let mut model = model;
        model.instance_url = base_url.clone();
        let model = Arc::new(Mutex::new(model));
        let shared = Arc::new(Shared {
            schema: graphql::schema(model.clone()),
            model,
            faults: Mutex::new(Faults::default()),
            base_url,
            http: reqwest::Client::new(),
            hooks_queued: tokio::sync::Notify::new(),
            sending: tokio::sync::Mutex::new(()),
            attempts: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            held: std::sync::atomic::AtomicBool::new(false),
        });
        let app = Router::new()
            .route("/api/graphql", post(graphql_call))
            .route("/api/v4/projects/{id}", get(get_project))
            .route(
                "/api/v4/projects/{id}/merge_requests/{iid}",
                get(get_merge_request),
            )
            .route(
                "/api/v4/projects/{id}/merge_requests/{iid}/approvals",
                get(get_merge_request_approvals),
            )
            .route("/api/v4/projects/{id}/{kind}/{iid}/notes", get(list_notes))
            .route(
                "/api/v4/projects/{id}/{kind}/{iid}/notes/{note_id}",
                get(get_note),
            )
            .route(
                "/api/v4/groups/{id}/hooks",
                get(list_hooks).post(create_hook),
            )
            .route("/api/v4/groups/{id}/hooks/{hook_id}", delete(delete_hook))
            .route("/api/v4/groups/{id}/members", get(list_members))
            .route("/api/v4/groups/{id}/members/{user_id}", get(get_member))
            .with_state(shared.clone());
        let sender = {
            let shared = shared.clone();
            async move {
                loop {
                    shared.hooks_queued.notified().await;
                    send_pending_hooks(&shared).await;
                }
            }
        };
        let served = Served::start(listener, app, "gitlab", Some(sender));
        Ok(GitlabSim { shared, served })
    }

    /// `http://127.0.0.1:<port>`: the instance URL (`/api/graphql`, `/api/v4/...` below it).
    pub fn base_url(&self) -> &str {
        &self.shared.base_url
    }

    /// Reads or changes the model while the simulator runs. The hook deliveries a change
    /// queues are sent right after, in the background ([`GitlabSim::flush_hooks`] waits for
    /// them).
    pub fn model<R>(&self, f: impl FnOnce(&mut Model) -> R) -> R {
        let (out, queued) = {
            let mut m = lock(&self.shared.model);
            let out = f(&mut m);
            (out, !m.pending_hooks.is_empty())
        };
        if queued {
            self.shared.hooks_queued.notify_one();
        }
        out
    }

    /// Sends every hook delivery queued so far (waiting for a send in progress) and returns
    /// the executions this call made.
    pub async fn flush_hooks(&self) -> Vec<HookAttempt> {
        send_pending_hooks(&self.shared).await
    }

    /// Holds (`true`) or releases the deliveries changes queue: while held, the test takes them
    /// with [`GitlabSim::take_held_hooks`] and sends them itself, in any order and as often as
    /// it likes; a release sends nothing by itself ([`GitlabSim::flush_hooks`] does).
    pub fn hold_hooks(&self, hold: bool) {
        self.shared
            .held
            .store(hold, std::sync::atomic::Ordering::SeqCst);
    }

    /// The deliveries queued so far, each with where its hook sends it; a hook that is gone or
    /// not executable now drops its deliveries, as GitLab would.
    pub fn take_held_hooks(&self) -> Vec<HeldDelivery> {
        let mut m = lock(&self.shared.model);
        let now = OffsetDateTime::now_utc();
        let pending = m.take_pending_hooks();
        pending
            .into_iter()
            .filter_map(|p| {
                let h = m
                    .hooks
                    .get(&p.hook_id)
                    .filter(|_| m.hook_executable(p.hook_id, now))?;
                Some(HeldDelivery {
                    delivery: p.delivery,
                    url: h.url.clone(),
                    token: h.token.clone(),
                    hook_uuid: h.uuid.clone(),
                    instance: m.instance_url.clone(),
                })
            })
            .collect()
    }

    /// Every execution of a hook so far, oldest first.
    pub fn hook_attempts(&self) -> Vec<HookAttempt> {
        lock(&self.shared.attempts).clone()
    }

    /// Arms a fault; it counts matching calls from now on.
    pub fn inject(&self, fault: Fault<GitlabFault>) {
        lock(&self.shared.faults).inject(fault);
    }

    /// Disarms every fault.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// How many calls of `operation` were answered or refused.
    pub fn calls(&self, operation: &str) -> u64 {
        self.call_counts().get(operation).copied().unwrap_or(0)
    }

    /// Every call's operation (as [`ops`] names it), in the order the calls arrived.
    pub fn call_log(&self) -> Vec<String> {
        lock(&self.shared.log).clone()
    }

    /// Calls per operation.
    pub fn call_counts(&self) -> BTreeMap<String, u64> {
        lock(&self.shared.faults).calls()
    }

    /// Stops the server and waits (up to 5 s) for open calls to finish.
    pub async fn shutdown(mut self) {
        self.served.shutdown().await;
    }
}

/// Executes the queued deliveries in order, each with its hook's URL, token and UUID, skipping
/// hooks GitLab would not execute now, and records each outcome on its hook.
async fn send_pending_hooks(shared: &Shared) -> Vec<HookAttempt> {
    let _one_sender = shared.sending.lock().await;
    if shared.held.load(std::sync::atomic::Ordering::SeqCst) {
        return Vec::new();
    }
    let pending = lock(&shared.model).take_pending_hooks();
    let mut made = Vec::new();
    for p in pending {
        let target = {
            let m = lock(&shared.model);
            m.hooks
                .get(&p.hook_id)
                .filter(|_| m.hook_executable(p.hook_id, OffsetDateTime::now_utc()))
                .map(|h| {
                    (
                        h.url.clone(),
                        h.token.clone(),
                        h.uuid.clone(),
                        m.instance_url.clone(),
                    )
                })
        };
        let Some((url, token, hook_uuid, instance)) = target else {
            continue;
        };
        let sent = p
            .delivery
            .send(&shared.http, &url, &token, &hook_uuid, &instance)
            .await;
        let attempt = HookAttempt {
            hook_id: p.hook_id,
            event: p.delivery.event.clone(),
            event_uuid: p.delivery.event_uuid.clone(),
            status: sent.map(|s| s.as_u16()).unwrap_or(0),
            body: p.delivery.body.clone(),
        };
        lock(&shared.model).record_hook_result(
            p.hook_id,
            attempt.succeeded(),
            OffsetDateTime::now_utc(),
        );
        lock(&shared.attempts).push(attempt.clone());
        made.push(attempt);
    }
    made
}

/// A delivery taken while hooks are held, with its hook's target.
#[derive(Debug, Clone)]
pub struct HeldDelivery {
    pub delivery: webhook::Delivery,
    pub url: String,
    pub token: String,
    pub hook_uuid: String,
    pub instance: String,
}

impl HeldDelivery {
    /// Sends it as its hook would; the receiver's status.
    pub async fn send(&self, client: &reqwest::Client) -> Result<StatusCode, reqwest::Error> {
        self.delivery
            .send(
                client,
                &self.url,
                &self.token,
                &self.hook_uuid,
                &self.instance,
            )
            .await
    }

    /// The same event sent again by another execution, as a manual resend or a second hook
    /// is: a new `Idempotency-Key`, the same `X-Gitlab-Event-UUID` and body.
    pub fn resent(&self) -> HeldDelivery {
        let mut copy = self.clone();
        copy.delivery.idempotency_key = uuid::Uuid::new_v4().to_string();
        copy
    }
}

fn message(status: StatusCode, text: &str) -> Response {
    (status, axum::Json(json!({ "message": text }))).into_response()
}

/// `RateLimit-*` as GitLab sends them on every answer.
fn rate_headers(headers: &mut HeaderMap, m: &Model) {
    let r = m.rate_limit;
    headers.insert("ratelimit-limit", HeaderValue::from(r.limit));
    headers.insert("ratelimit-remaining", HeaderValue::from(r.remaining));
    headers.insert(
        "ratelimit-observed",
        HeaderValue::from(r.limit - r.remaining.min(r.limit)),
    );
    headers.insert(
        "ratelimit-reset",
        HeaderValue::from(r.reset_at.unix_timestamp()),
    );
}

/// Counts the call, checks the token, charges the window and applies the faults that change
/// its course. `Err` is the whole answer; `Ok` carries the kinds that shape the answer.
async fn begin(
    shared: &Shared,
    operation: &str,
    headers: &HeaderMap,
) -> Result<Vec<GitlabFault>, Response> {
    lock(&shared.log).push(operation.to_owned());
    let fired = lock(&shared.faults).on_call(operation);
    let delay: Duration = fired
        .iter()
        .filter_map(|k| match k {
            GitlabFault::Delay(d) => Some(*d),
            _ => None,
        })
        .sum();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let mut m = lock(&shared.model);
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| headers.get("private-token").and_then(|v| v.to_str().ok()));
    if !token.is_some_and(|t| m.tokens.contains(t)) {
        return Err(message(StatusCode::UNAUTHORIZED, "401 Unauthorized"));
    }
    let now = OffsetDateTime::now_utc();
    if m.rate_limit.reset_at <= now {
        m.rate_limit.remaining = m.rate_limit.limit;
        m.rate_limit.reset_at = now + time::Duration::minutes(1);
    }
    let throttled = fired.iter().find_map(|k| match k {
        GitlabFault::TooManyRequests { retry_after } => Some(*retry_after),
        _ => None,
    });
    let spent = m.rate_limit.remaining == 0;
    if let Some(wait) =
        throttled.or(spent.then(|| (m.rate_limit.reset_at - now).whole_seconds().max(1) as u64))
    {
        let mut r = message(StatusCode::TOO_MANY_REQUESTS, "Retry later");
        rate_headers(r.headers_mut(), &m);
        r.headers_mut()
            .insert("retry-after", HeaderValue::from(wait));
        return Err(r);
    }
    m.rate_limit.remaining -= 1;
    for kind in &fired {
        if let GitlabFault::Mutate(mutation) = kind {
            (mutation.0)(&mut m);
        }
    }
    for kind in &fired {
        if let GitlabFault::Status(code) = kind {
            let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut r = message(status, "500 Internal Server Error");
            rate_headers(r.headers_mut(), &m);
            return Err(r);
        }
    }
    Ok(fired)
}

#[derive(Deserialize)]
struct GraphqlBody {
    query: String,
    #[serde(default, rename = "operationName")]
    operation_name: Option<String>,
    #[serde(default)]
    variables: Option<Json>,
}

/// The operation's name: as given, else the document's first named operation.
fn operation_name(query: &str, given: Option<&str>) -> String {
    if let Some(name) = given {
        return name.to_owned();
    }
    async_graphql::parser::parse_query(query)
        .ok()
        .and_then(|doc| match doc.operations {
            async_graphql::parser::types::DocumentOperations::Single(_) => None,
            async_graphql::parser::types::DocumentOperations::Multiple(ops) => {
                ops.keys().next().map(|k| k.to_string())
            }
        })
        .or_else(|| {
            // A single named operation: `query Name(...)`.
            let rest = query.trim_start().strip_prefix("query")?.trim_start();
            let end = rest.find(|c: char| !c.is_alphanumeric() && c != '_')?;
            (end > 0).then(|| rest[..end].to_owned())
        })
        .unwrap_or_else(|| "anonymous".to_owned())
}

async fn graphql_call(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<GraphqlBody>(&body) else {
        return message(StatusCode::BAD_REQUEST, "Invalid JSON");
    };
    let operation = operation_name(&body.query, body.operation_name.as_deref());
    let fired = match begin(&shared, &operation, &headers).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let mut request = async_graphql::Request::new(body.query).variables(
        async_graphql::Variables::from_json(body.variables.unwrap_or(Json::Null)),
    );
    if let Some(name) = body.operation_name {
        request = request.operation_name(name);
    }
    let response = shared.schema.execute(request).await;
    let mut out = serde_json::to_value(&response).unwrap_or(Json::Null);
    if out
        .get("errors")
        .is_some_and(|e| e.as_array().is_some_and(Vec::is_empty))
    {
        out.as_object_mut().map(|o| o.remove("errors"));
    }
    for kind in &fired {
        apply_graphql_fault(&mut out, kind);
    }
    let mut r = axum::Json(out).into_response();
    rate_headers(r.headers_mut(), &lock(&shared.model));
    r
}

/// The first object under `data` (depth first) that is a connection: `nodes` and `pageInfo`.
fn first_connection(value: &mut Json) -> Option<&mut serde_json::Map<String, Json>> {
    // Find the path first (depth first), then borrow along it.
    fn find(value: &Json, path: &mut Vec<String>) -> bool {
        if let Json::Object(map) = value {
            if map.contains_key("nodes") && map.contains_key("pageInfo") {
                return true;
            }
            for (key, child) in map {
                path.push(key.clone());
                if find(child, path) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = Vec::new();
    if !find(value.get("data")?, &mut path) {
        return None;
    }
    let mut at = value.get_mut("data")?;
    for key in path {
        at = at.get_mut(&key)?;
    }
    at.as_object_mut()
}

/// The value at a dotted response path under `data`, with list indices as numbers.
fn at_path<'a>(value: &'a mut Json, path: &str) -> Option<&'a mut Json> {
    let mut at = value.get_mut("data")?;
    for step in path.split('.') {
        at = match step.parse::<usize>() {
            Ok(i) => at.get_mut(i)?,
            Err(_) => at.get_mut(step)?,
        };
    }
    Some(at)
}

fn apply_graphql_fault(out: &mut Json, kind: &GitlabFault) {
    match kind {
        GitlabFault::ShortPage { keep } => {
            if let Some(Json::Array(nodes)) = first_connection(out).and_then(|c| c.get_mut("nodes"))
            {
                nodes.truncate(*keep);
            }
        }
        GitlabFault::HasNextPage(v) => {
            if let Some(info) = first_connection(out).and_then(|c| c.get_mut("pageInfo")) {
                info["hasNextPage"] = Json::Bool(*v);
            }
        }
        GitlabFault::TotalOffBy(d) => {
            if let Some(count) = first_connection(out).and_then(|c| c.get_mut("count")) {
                let n = count.as_i64().unwrap_or(0);
                *count = json!((n + d).max(0));
            }
        }
        GitlabFault::FieldError { path, message } => {
            if let Some(v) = at_path(out, path) {
                *v = Json::Null;
                let steps: Vec<Json> = path
                    .split('.')
                    .map(|s| {
                        s.parse::<u64>()
                            .map(Json::from)
                            .unwrap_or_else(|_| json!(s))
                    })
                    .collect();
                let error = json!({ "message": message, "locations": [], "path": steps });
                match out.get_mut("errors").and_then(Json::as_array_mut) {
                    Some(errors) => errors.push(error),
                    None => out["errors"] = json!([error]),
                }
            }
        }
        GitlabFault::ReplaceValue { path, value } => {
            if let Some(v) = at_path(out, path) {
                *v = value.clone();
            }
        }
        _ => {}
    }
}

fn note_on(kind: &str, project: u64, iid: u64) -> Option<NoteOn> {
    match kind {
        "issues" => Some(NoteOn::Issue(project, iid)),
        "merge_requests" => Some(NoteOn::MergeRequest(project, iid)),
        _ => None,
    }
}

fn parent_exists(m: &Model, on: NoteOn) -> bool {
    match on {
        NoteOn::Issue(p, i) => m.issues.contains_key(&(p, i)),
        NoteOn::MergeRequest(p, i) => m.merge_requests.contains_key(&(p, i)),
    }
}

fn note_json(n: &Note) -> Json {
    json!({
        "id": n.id,
        "type": n.kind,
        "body": n.body,
        "author": { "id": 1, "username": n.author },
        "created_at": n.created_at.format(&Rfc3339).unwrap_or_default(),
        "updated_at": n.updated_at.format(&Rfc3339).unwrap_or_default(),
        "system": n.system,
        "resolvable": n.resolvable(),
        "position": n.position.as_ref().map(|p| json!({
            "base_sha": p.base_sha,
            "start_sha": p.start_sha,
            "head_sha": p.head_sha,
            "old_path": p.old_path,
            "new_path": p.new_path,
            "position_type": "text",
            "old_line": p.old_line,
            "new_line": p.new_line,
        })),
        "noteable_type": match n.on { NoteOn::Issue(..) => "Issue", NoteOn::MergeRequest(..) => "MergeRequest" },
    })
}

#[derive(Deserialize)]
struct PageQuery {
    page: Option<usize>,
    per_page: Option<usize>,
}

async fn list_notes(
    State(shared): State<Arc<Shared>>,
    Path((project, kind, iid)): Path<(u64, String, u64)>,
    Query(q): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let fired = match begin(&shared, ops::LIST_NOTES, &headers).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let mut m = lock(&shared.model);
    for kind in &fired {
        if let GitlabFault::DeleteNote(id) = kind {
            m.notes.remove(id);
        }
    }
    let Some(on) = note_on(&kind, project, iid).filter(|on| parent_exists(&m, *on)) else {
        return message(StatusCode::NOT_FOUND, "404 Not found");
    };
    let hidden: Vec<u64> = fired
        .iter()
        .filter_map(|k| match k {
            GitlabFault::HideNote(id) => Some(*id),
            _ => None,
        })
        .collect();
    let notes: Vec<&Note> = m
        .notes_of(on)
        .into_iter()
        .filter(|n| !hidden.contains(&n.id))
        .collect();
    let body: Vec<Json> = notes.iter().map(|n| note_json(n)).collect();
    let mut r = offset_page(body, &q, &fired);
    rate_headers(r.headers_mut(), &m);
    r
}

/// One page of a REST listing as GitLab pages it: `page` from 1, `per_page` 20 by default and
/// at most 100, with `X-Page`, `X-Per-Page`, `X-Next-Page` (empty on the last page),
/// `X-Prev-Page`, and `X-Total`/`X-Total-Pages` up to GitLab's counting limit. The paging
/// faults shape the page and its headers.
fn offset_page(items: Vec<Json>, q: &PageQuery, fired: &[GitlabFault]) -> Response {
    let per_page = q.per_page.unwrap_or(20).clamp(1, 100);
    let page = q.page.unwrap_or(1).max(1);
    let total = items.len();
    let mut body: Vec<Json> = items
        .into_iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .collect();
    let pages = total.div_ceil(per_page).max(1);
    let next = if page < pages {
        (page + 1).to_string()
    } else {
        String::new()
    };
    let mut total_header = Some(total as i64);
    let mut omit: Vec<&str> = Vec::new();
    for kind in fired {
        match kind {
            GitlabFault::ShortPage { keep } => body.truncate(*keep),
            GitlabFault::TotalOffBy(d) => total_header = total_header.map(|t| (t + d).max(0)),
            GitlabFault::OmitHeaders(names) => omit.extend(names.iter().copied()),
            _ => {}
        }
    }
    let mut r = axum::Json(body).into_response();
    let h = r.headers_mut();
    let mut set = |name: &'static str, value: String| {
        if !omit.contains(&name)
            && let Ok(v) = HeaderValue::from_str(&value)
        {
            h.insert(name, v);
        }
    };
    set("x-page", page.to_string());
    set("x-per-page", per_page.to_string());
    set("x-next-page", next);
    set(
        "x-prev-page",
        if page > 1 {
            (page - 1).to_string()
        } else {
            String::new()
        },
    );
    // Past 10,000 rows GitLab does not count: no X-Total, no X-Total-Pages.
    if total <= TOTAL_HEADER_LIMIT {
        if let Some(t) = total_header {
            set("x-total", t.to_string());
        }
        set("x-total-pages", pages.to_string());
    }
    r
}

async fn get_note(
    State(shared): State<Arc<Shared>>,
    Path((project, kind, iid, note_id)): Path<(u64, String, u64, u64)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = begin(&shared, ops::GET_NOTE, &headers).await {
        return r;
    }
    let m = lock(&shared.model);
    let found =
        note_on(&kind, project, iid).and_then(|on| m.notes.get(&note_id).filter(|n| n.on == on));
    let mut r = match found {
        Some(n) => axum::Json(note_json(n)).into_response(),
        None => message(StatusCode::NOT_FOUND, "404 Not found"),
    };
    rate_headers(r.headers_mut(), &m);
    r
}

async fn get_project(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = begin(&shared, ops::GET_PROJECT, &headers).await {
        return r;
    }
    let m = lock(&shared.model);
    let mut r = match (m.projects.get(&id), m.project_path(id)) {
        (Some(p), Some(path)) => axum::Json(json!({
            "id": p.id,
            "name": p.name,
            "path": p.path,
            "path_with_namespace": path,
            "archived": p.archived,
            "namespace": {
                "id": p.group,
                "full_path": m.group_path(p.group),
                "kind": "group",
            },
        }))
        .into_response(),
        _ => message(StatusCode::NOT_FOUND, "404 Project Not Found"),
    };
    rate_headers(r.headers_mut(), &m);
    r
}

async fn get_merge_request(
    State(shared): State<Arc<Shared>>,
    Path((project, iid)): Path<(u64, u64)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = begin(&shared, ops::GET_MERGE_REQUEST, &headers).await {
        return r;
    }
    let m = lock(&shared.model);
    let time = |t: Option<OffsetDateTime>| t.and_then(|t| t.format(&Rfc3339).ok());
    let mut r = match m.merge_requests.get(&(project, iid)) {
        Some(mr) => axum::Json(json!({
            "id": mr.id,
            "iid": mr.iid,
            "project_id": project,
            "title": mr.title,
            "state": mr.state,
            "created_at": time(Some(mr.created_at)),
            "updated_at": time(Some(mr.updated_at)),
            "merged_at": time(mr.merged_at),
            "closed_at": time(mr.closed_at),
            "source_branch": mr.source_branch,
            "target_branch": mr.target_branch,
        }))
        .into_response(),
        None => message(StatusCode::NOT_FOUND, "404 Not found"),
    };
    rate_headers(r.headers_mut(), &m);
    r
}

/// `GET /projects/{id}/merge_requests/{iid}/approvals`: whose approval stands, each with
/// `approved_at` (the standing row's creation time).
async fn get_merge_request_approvals(
    State(shared): State<Arc<Shared>>,
    Path((project, iid)): Path<(u64, u64)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = begin(&shared, ops::GET_MERGE_REQUEST_APPROVALS, &headers).await {
        return r;
    }
    let m = lock(&shared.model);
    let time = |t: OffsetDateTime| t.format(&Rfc3339).ok();
    let mut r = match m.merge_requests.get(&(project, iid)) {
        Some(mr) => axum::Json(json!({
            "id": mr.id,
            "iid": mr.iid,
            "project_id": project,
            "title": mr.title,
            "description": mr.description,
            "state": mr.state,
            "created_at": time(mr.created_at),
            "updated_at": time(mr.updated_at),
            "approved": mr.approved,
            "approved_by": mr.approved_by.iter().map(|(u, at)| json!({
                "user": { "username": u, "name": u },
                "approved_at": time(*at),
            })).collect::<Vec<_>>(),
        }))
        .into_response(),
        None => message(StatusCode::NOT_FOUND, "404 Not found"),
    };
    rate_headers(r.headers_mut(), &m);
    r
}

async fn list_hooks(
    State(shared): State<Arc<Shared>>,
    Path(group): Path<u64>,
    Query(q): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let fired = match begin(&shared, ops::LIST_GROUP_HOOKS, &headers).await {
        Ok(fired) => fired,
        Err(r) => return r,
    };
    let m = lock(&shared.model);
    if !m.groups.contains_key(&group) {
        return message(StatusCode::NOT_FOUND, "404 Group Not Found");
    }
    let hooks: Vec<Json> = m
        .hooks
        .values()
        .filter(|h| h.group == group)
        .map(webhook::hook_json)
        .collect();
    let mut r = offset_page(hooks, &q, &fired);
    rate_headers(r.headers_mut(), &m);
    r
}

#[derive(Deserialize)]
struct NewHook {
    #[serde(default)]
    project_events: bool,
    #[serde(default)]
    subgroup_events: bool,
    #[serde(default)]
    member_events: bool,
    url: String,
    #[serde(default)]
    token: String,
    #[serde(default)]
    issues_events: bool,
    #[serde(default)]
    merge_requests_events: bool,
    #[serde(default)]
    note_events: bool,
    #[serde(default)]
    pipeline_events: bool,
    #[serde(default)]
    push_events: bool,
}

async fn create_hook(
    State(shared): State<Arc<Shared>>,
    Path(group): Path<u64>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let fired = match begin(&shared, ops::CREATE_GROUP_HOOK, &headers).await {
        Ok(fired) => fired,
        Err(r) => return r,
    };
    let Ok(new) = serde_json::from_slice::<NewHook>(&body) else {
        return message(StatusCode::BAD_REQUEST, "400 Bad request - url is missing");
    };
    let r = created_hook(&shared, group, new);
    // Created, but the answer comes too late for a client that stopped waiting.
    let late: Duration = fired
        .iter()
        .filter_map(|k| match k {
            GitlabFault::AnswerLate(d) => Some(*d),
            _ => None,
        })
        .sum();
    if !late.is_zero() {
        tokio::time::sleep(late).await;
    }
    r
}

fn created_hook(shared: &Shared, group: u64, new: NewHook) -> Response {
    let mut m = lock(&shared.model);
    if !m.groups.contains_key(&group) {
        return message(StatusCode::NOT_FOUND, "404 Group Not Found");
    }
    let id = m.hooks.keys().next_back().copied().unwrap_or(0) + 1;
    let events = [
        new.issues_events,
        new.merge_requests_events,
        new.note_events,
        new.pipeline_events,
        new.push_events,
    ];
    let mut hook = webhook::new_hook(id, group, &new.url, &new.token, events);
    hook.project_events = new.project_events;
    hook.subgroup_events = new.subgroup_events;
    hook.member_events = new.member_events;
    let out = webhook::hook_json(&hook);
    m.hooks.insert(id, hook);
    let mut r = (StatusCode::CREATED, axum::Json(out)).into_response();
    rate_headers(r.headers_mut(), &m);
    r
}

async fn delete_hook(
    State(shared): State<Arc<Shared>>,
    Path((group, hook_id)): Path<(u64, u64)>,
    headers: HeaderMap,
) -> Response {
    let fired = match begin(&shared, ops::DELETE_GROUP_HOOK, &headers).await {
        Ok(fired) => fired,
        Err(r) => return r,
    };
    let r = {
        let mut m = lock(&shared.model);
        let removed = m.hooks.get(&hook_id).is_some_and(|h| h.group == group);
        let mut r = if removed {
            m.hooks.remove(&hook_id);
            StatusCode::NO_CONTENT.into_response()
        } else {
            message(StatusCode::NOT_FOUND, "404 Not found")
        };
        rate_headers(r.headers_mut(), &m);
        r
    };
    // Deleted, then answered late: a client that times out never learns it landed.
    let late: Duration = fired
        .iter()
        .filter_map(|k| match k {
            GitlabFault::AnswerLate(d) => Some(*d),
            _ => None,
        })
        .sum();
    if !late.is_zero() {
        tokio::time::sleep(late).await;
    }
    r
}

async fn list_members(
    State(shared): State<Arc<Shared>>,
    Path(group): Path<u64>,
    Query(q): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let fired = match begin(&shared, ops::LIST_GROUP_MEMBERS, &headers).await {
        Ok(fired) => fired,
        Err(r) => return r,
    };
    let m = lock(&shared.model);
    if !m.groups.contains_key(&group) {
        return message(StatusCode::NOT_FOUND, "404 Group Not Found");
    }
    let mut r = offset_page(m.members_json(group), &q, &fired);
    rate_headers(r.headers_mut(), &m);
    r
}

async fn get_member(
    State(shared): State<Arc<Shared>>,
    Path((group, user_id)): Path<(u64, u64)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = begin(&shared, ops::GET_GROUP_MEMBER, &headers).await {
        return r;
    }
    let m = lock(&shared.model);
    let mut r = match m.members.get(&(group, user_id)) {
        Some(member) => axum::Json(super::groups::member_json(member)).into_response(),
        None => message(StatusCode::NOT_FOUND, "404 Not found"),
    };
    rate_headers(r.headers_mut(), &m);
    r
}
