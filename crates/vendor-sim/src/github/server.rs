//! The HTTP server: `POST /graphql` and the REST calls we use, each call counted and run through
//! the injected faults before it is answered. It answers as api.github.com does (at the root)
//! and as a GitHub Enterprise Server does (`/api/v3`, `/api/graphql`); an Enterprise-only
//! simulator ([`GithubSim::start_enterprise`]) refuses the root layout.

// Early answers are whole `Response`s carried in `Err`; boxing them buys nothing in a test server.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_graphql::parser::types::{
    DocumentOperations, ExecutableDocument, Selection, SelectionSet,
};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::deliveries::{self, DeliveryAttempt, DeliveryLog, HookTarget};
use super::fault::{Fault, FaultKind, Faults, ops};
use super::graphql::{self, GithubSchema, Nullability, PageFaults, RateView};
use super::model::{self, InstallationId, Model, RateLimitBudget, RateLimitResource, Viewer};
use super::webhook;
use crate::served::Served;

struct Shared {
    model: Arc<Mutex<Model>>,
    faults: Mutex<Faults>,
    schema: GithubSchema,
    nullability: Nullability,
    base_url: String,
    /// Where REST calls are served: `base_url`, or `<base_url>/api/v3` for an Enterprise-only
    /// simulator (pagination links point there).
    rest_base: String,
    graphql_url: String,
    deliveries: Mutex<DeliveryLog>,
    /// GraphQL points charged, by operation.
    points: Mutex<BTreeMap<String, u64>>,
    /// Sends the App's webhooks.
    http: reqwest::Client,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test closure that panicked inside a mutation must not take the simulator down.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running simulated GitHub on `127.0.0.1:<port>`. Dropping it stops the server.
pub struct GithubSim {
    shared: Arc<Shared>,
    served: Served,
}

impl GithubSim {
    /// Serves `model` on a free port of 127.0.0.1, at the root as api.github.com and under
    /// `/api` as an Enterprise Server.
    pub async fn start(model: Model) -> std::io::Result<GithubSim> {
        Self::serve(model, true).await
    }

    /// Serves `model` as a GitHub Enterprise Server only: REST under `/api/v3`, GraphQL at
    /// `/api/graphql`, nothing at the root ([`GithubSim::base_url`] is the server's URL).
    pub async fn start_enterprise(model: Model) -> std::io::Result<GithubSim> {
        Self::serve(model, false).await
    }

    async fn serve(model: Model, at_root: bool) -> std::io::Result<GithubSim> {
        let (listener, base_url) = crate::served::bind().await?;
        let model = Arc::new(Mutex::new(model));
        let shared = Arc::new(Shared {
            schema: graphql::schema(model.clone()),
            nullability: Nullability::new(&graphql::sdl()),
            model,
            faults: Mutex::new(Faults::default()),
            rest_base: if at_root {
                base_url.clone()
            } else {
                format!("{base_url}/api/v3")
            },
            graphql_url: if at_root {
                format!("{base_url}/graphql")
            } else {
                format!("{base_url}/api/graphql")
            },
            base_url,
            deliveries: Mutex::default(),
            points: Mutex::default(),
            http: reqwest::Client::new(),
        });
        let rest = Router::new()
            .route(
                "/app/installations/{installation_id}/access_tokens",
                post(create_access_token),
            )
            .route(
                "/app/installations/{installation_id}",
                get(get_installation).delete(delete_installation),
            )
            .route("/installation/repositories", get(installation_repositories))
            .route("/repositories/{id}", get(repository_by_id))
            .route("/app/hook/deliveries", get(list_hook_deliveries))
            .route(
                "/app/hook/deliveries/{delivery_id}/attempts",
                post(redeliver_hook_delivery),
            )
            .with_state(shared.clone());
        let mut app = Router::new()
            .route("/api/graphql", post(graphql_call))
            .with_state(shared.clone())
            .nest("/api/v3", rest.clone());
        if at_root {
            app = app
                .route("/graphql", post(graphql_call).with_state(shared.clone()))
                .merge(rest);
        }
        let served = Served::start(listener, app, "github", None::<std::future::Ready<()>>);
        Ok(GithubSim { shared, served })
    }

    /// `http://127.0.0.1:<port>`: the base for REST calls in place of `https://api.github.com`,
    /// and the server URL a connection names (its `/api/v3` and `/api/graphql` are served too).
    pub fn base_url(&self) -> &str {
        &self.shared.base_url
    }

    /// `<base_url>/graphql`, or `<base_url>/api/graphql` for an Enterprise-only simulator.
    pub fn graphql_url(&self) -> String {
        self.shared.graphql_url.clone()
    }

    /// The REST base: [`GithubSim::base_url`], or `<base_url>/api/v3` for an Enterprise-only
    /// simulator.
    pub fn rest_url(&self) -> &str {
        &self.shared.rest_base
    }

    /// Reads or changes the model while the simulator runs.
    pub fn model<R>(&self, f: impl FnOnce(&mut Model) -> R) -> R {
        f(&mut lock(&self.shared.model))
    }

    /// Arms a fault; it counts matching calls from now on.
    pub fn inject(&self, fault: Fault) {
        lock(&self.shared.faults).inject(fault);
    }

    /// Disarms every fault.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// How many calls of `operation` were received (see [`ops`]).
    pub fn calls(&self, operation: &str) -> u64 {
        lock(&self.shared.faults)
            .calls()
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// Calls received per operation.
    pub fn call_counts(&self) -> BTreeMap<String, u64> {
        lock(&self.shared.faults).calls()
    }

    /// GraphQL points charged to operation `operation` so far.
    pub fn points(&self, operation: &str) -> u64 {
        lock(&self.shared.points)
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// Points the App's webhook at `url`, signed with `secret`; later attempts and
    /// redeliveries go there.
    pub fn set_webhook_target(&self, url: &str, secret: &[u8]) {
        lock(&self.shared.deliveries).target = Some(HookTarget {
            url: url.to_owned(),
            secret: secret.to_vec(),
        });
    }

    /// Sends `delivery` to the App's webhook now and logs the attempt (a redelivery if its
    /// guid was attempted before). Returns the receiver's status, 0 when it was unreachable or
    /// no target is set.
    pub async fn deliver(&self, delivery: &webhook::Delivery) -> u16 {
        deliver_and_log(&self.shared, delivery, None)
            .await
            .status_code
    }

    /// Like [`GithubSim::deliver`], with the attempt logged as made at `at` (an old attempt
    /// for tests of the delivery log's time window).
    pub async fn deliver_at(&self, delivery: &webhook::Delivery, at: time::OffsetDateTime) -> u16 {
        deliver_and_log(&self.shared, delivery, Some(at))
            .await
            .status_code
    }

    /// Every logged attempt of the event `guid` (`X-GitHub-Delivery`), oldest first.
    pub fn delivery_attempts(&self, guid: &str) -> Vec<DeliveryAttempt> {
        lock(&self.shared.deliveries).attempts_of(guid)
    }

    /// Stops the server and waits (up to 5 s) for open calls to finish.
    pub async fn shutdown(mut self) {
        self.served.shutdown().await;
    }
}

fn message(status: StatusCode, text: &str) -> Response {
    (
        status,
        axum::Json(json!({
            "message": text,
            "documentation_url": "https://docs.github.com/rest",
        })),
    )
        .into_response()
}

/// Counts the call and applies the faults that change its course. `Err` is the whole answer;
/// `Ok` carries the kinds that shape the answer itself.
async fn begin(
    shared: &Shared,
    operation: &str,
    resource: RateLimitResource,
) -> Result<Vec<FaultKind>, Response> {
    let fired = lock(&shared.faults).on_call(operation);
    let delay: Duration = fired
        .iter()
        .filter_map(|k| match k {
            FaultKind::Delay(d) => Some(*d),
            _ => None,
        })
        .sum();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    for kind in &fired {
        match kind {
            FaultKind::Mutate(f) => f(&mut lock(&shared.model)),
            FaultKind::ExhaustRateLimit => {
                let mut m = lock(&shared.model);
                let mut b = m.rate_limit(resource);
                b.remaining = 0;
                m.set_rate_limit(resource, b);
            }
            _ => {}
        }
    }
    for kind in &fired {
        match kind {
            FaultKind::Status(code) => {
                let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::BAD_GATEWAY);
                return Err(message(status, "Server Error"));
            }
            FaultKind::Unavailable { retry_after } => {
                let mut r = message(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable");
                r.headers_mut()
                    .insert("retry-after", HeaderValue::from(*retry_after));
                return Err(r);
            }
            FaultKind::BadCredentials => {
                return Err(message(StatusCode::UNAUTHORIZED, "Bad credentials"));
            }
            FaultKind::Forbidden { permission } => {
                let mut r = message(
                    StatusCode::FORBIDDEN,
                    "Resource not accessible by integration",
                );
                if let Some(permission) = permission
                    && let Ok(value) = HeaderValue::from_str(permission)
                {
                    r.headers_mut()
                        .insert("x-accepted-github-permissions", value);
                }
                return Err(r);
            }
            FaultKind::SecondaryRateLimit { retry_after } => {
                let mut r = message(
                    StatusCode::FORBIDDEN,
                    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                );
                r.headers_mut()
                    .insert("retry-after", HeaderValue::from(*retry_after));
                return Err(r);
            }
            _ => {}
        }
    }
    Ok(fired)
}

/// The bearer token of a call, either scheme GitHub accepts.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get("authorization")?.to_str().ok()?;
    v.strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("bearer "))
        .or_else(|| v.strip_prefix("token "))
        .map(str::trim)
}

/// Who a token is: `Some(installation)` for installation tokens, `None` for a PAT.
fn authenticate(model: &Model, headers: &HeaderMap) -> Result<Option<InstallationId>, Response> {
    Ok(match viewer(model, headers)? {
        Viewer::Installation(i) => Some(i),
        Viewer::User(_) | Viewer::Everything => None,
    })
}

/// Who a token is, as far as repository visibility goes.
fn viewer(model: &Model, headers: &HeaderMap) -> Result<Viewer, Response> {
    let bad = || message(StatusCode::UNAUTHORIZED, "Bad credentials");
    let token = model
        .tokens
        .get(bearer(headers).ok_or_else(bad)?)
        .ok_or_else(bad)?;
    if token
        .expires_at
        .is_some_and(|at| at <= model::now_seconds())
    {
        return Err(bad());
    }
    Ok(Viewer::of(token))
}

fn rate_headers(headers: &mut HeaderMap, b: RateLimitBudget, resource: &'static str) {
    headers.insert("x-ratelimit-limit", HeaderValue::from(b.limit));
    headers.insert("x-ratelimit-remaining", HeaderValue::from(b.remaining));
    headers.insert(
        "x-ratelimit-used",
        HeaderValue::from(b.limit.saturating_sub(b.remaining)),
    );
    headers.insert(
        "x-ratelimit-reset",
        HeaderValue::from(b.reset_at.unix_timestamp()),
    );
    headers.insert("x-ratelimit-resource", HeaderValue::from_static(resource));
}

#[derive(Deserialize)]
struct GraphqlBody {
    query: String,
    #[serde(default)]
    variables: Option<Json>,
    #[serde(default, rename = "operationName")]
    operation_name: Option<String>,
}

/// Connection fields: each costs one request per parent node GitHub assumes (`first`).
const CONNECTIONS: &[&str] = &[
    "issues",
    "pullRequests",
    "comments",
    "reviews",
    "reviewThreads",
    "reviewRequests",
    "contexts",
    "checkSuites",
    "checkRuns",
];

/// What GitHub charges for `query` with `variables` (points), as the simulator charges it.
pub fn graphql_cost(query: &str, variables: &Json) -> u32 {
    async_graphql::parser::parse_query(query)
        .map(|doc| query_cost(&doc, None, variables).0)
        .unwrap_or(1)
}

/// GitHub's cost: one request per connection per node its parents may return, /100, at least 1.
/// Returns `(cost, nodeCount)`.
fn query_cost(doc: &ExecutableDocument, operation: Option<&str>, vars: &Json) -> (u32, u32) {
    fn first_of(field: &async_graphql::parser::types::Field, vars: &Json) -> u64 {
        field
            .arguments
            .iter()
            .find(|(n, _)| n.node == "first" || n.node == "last")
            .and_then(|(_, v)| {
                v.node
                    .clone()
                    .into_const_with(|name| {
                        let value = vars.get(name.as_str()).cloned().unwrap_or(Json::Null);
                        async_graphql::Value::from_json(value).map_err(|_| ())
                    })
                    .ok()
            })
            .and_then(|v| match v {
                async_graphql::Value::Number(n) => n.as_u64(),
                _ => None,
            })
            .unwrap_or(0)
    }
    fn walk(
        doc: &ExecutableDocument,
        set: &SelectionSet,
        mult: u64,
        vars: &Json,
        depth: u32,
        acc: &mut (u64, u64),
    ) {
        if depth > 16 {
            return;
        }
        for item in &set.items {
            match &item.node {
                Selection::Field(f) => {
                    let f = &f.node;
                    let mut child = mult;
                    if CONNECTIONS.contains(&f.name.node.as_str()) {
                        let first = first_of(f, vars);
                        acc.0 += mult;
                        acc.1 += mult * first;
                        child = mult * first.max(1);
                    }
                    walk(doc, &f.selection_set.node, child, vars, depth + 1, acc);
                }
                Selection::InlineFragment(i) => {
                    walk(doc, &i.node.selection_set.node, mult, vars, depth + 1, acc)
                }
                Selection::FragmentSpread(s) => {
                    if let Some(frag) = doc.fragments.get(&s.node.fragment_name.node) {
                        walk(
                            doc,
                            &frag.node.selection_set.node,
                            mult,
                            vars,
                            depth + 1,
                            acc,
                        );
                    }
                }
            }
        }
    }
    let op = match (&doc.operations, operation) {
        (DocumentOperations::Single(op), _) => Some(op),
        (DocumentOperations::Multiple(ops), Some(name)) => ops.get(name),
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => ops.values().next(),
        _ => None,
    };
    let mut acc = (0, 0);
    if let Some(op) = op {
        walk(doc, &op.node.selection_set.node, 1, vars, 0, &mut acc);
    }
    let cost = ((acc.0 + 50) / 100).max(1);
    (
        u32::try_from(cost).unwrap_or(u32::MAX),
        u32::try_from(acc.1).unwrap_or(u32::MAX),
    )
}

fn operation_name(doc: Option<&ExecutableDocument>, given: Option<&str>) -> String {
    if let Some(name) = given {
        return name.to_owned();
    }
    match doc.map(|d| &d.operations) {
        Some(DocumentOperations::Single(_)) => {
            // The parser keeps a single operation's name only in the multiple form.
            "anonymous".to_owned()
        }
        Some(DocumentOperations::Multiple(ops)) if ops.len() == 1 => {
            ops.keys().next().map(|n| n.to_string()).unwrap_or_default()
        }
        _ => "anonymous".to_owned(),
    }
}

async fn graphql_call(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<GraphqlBody>(&body) else {
        return message(StatusCode::BAD_REQUEST, "Problems parsing JSON");
    };
    let doc = async_graphql::parser::parse_query(&body.query).ok();
    let operation = operation_name(doc.as_ref(), body.operation_name.as_deref());
    let fired = match begin(&shared, &operation, RateLimitResource::Graphql).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let vars = body.variables.clone().unwrap_or(Json::Null);
    let (cost, node_count) = doc
        .as_ref()
        .map(|d| query_cost(d, body.operation_name.as_deref(), &vars))
        .unwrap_or((1, 0));

    let (budget, viewer) = {
        let mut m = lock(&shared.model);
        let viewer = match viewer(&m, &headers) {
            Ok(v) => v,
            Err(r) => return r,
        };
        let installation = match &viewer {
            Viewer::Installation(i) => Some(*i),
            Viewer::User(_) | Viewer::Everything => None,
        };
        let mut b = m.rate_limit(RateLimitResource::Graphql);
        if b.remaining < cost {
            // GitHub answers an exhausted budget with 200 and a RATE_LIMITED error.
            let who = installation
                .map(|i| format!("installation ID {i}"))
                .unwrap_or_else(|| "user ID 1".to_owned());
            let mut r = axum::Json(json!({
                "errors": [{
                    "type": "RATE_LIMITED",
                    "code": "graphql_rate_limit",
                    "message": format!("API rate limit already exceeded for {who}."),
                }]
            }))
            .into_response();
            rate_headers(r.headers_mut(), b, "graphql");
            return r;
        }
        b.remaining -= cost;
        m.set_rate_limit(RateLimitResource::Graphql, b);
        *lock(&shared.points).entry(operation.clone()).or_default() += u64::from(cost);
        (b, viewer)
    };

    let mut page_faults = PageFaults::default();
    for kind in fired {
        match kind {
            FaultKind::TruncatedPage { keep } => page_faults.truncate = Some(keep),
            FaultKind::HasNextPage(v) => page_faults.has_next_page = Some(v),
            FaultKind::TotalCountOffBy(d) => page_faults.total_off_by = Some(d),
            FaultKind::FieldError {
                path,
                error_type,
                message,
            } => page_faults.field_errors.push((path, error_type, message)),
            _ => {}
        }
    }
    let mut request = async_graphql::Request::new(body.query)
        .variables(async_graphql::Variables::from_json(vars))
        .data(page_faults)
        .data(viewer)
        .data(RateView {
            cost,
            node_count,
            budget,
        });
    if let Some(name) = body.operation_name {
        request = request.operation_name(name);
    }
    let response = shared.schema.execute(request).await;
    let mut out = github_shaped(&shared.nullability, &response);
    let mut r = axum::Json(std::mem::take(&mut out)).into_response();
    rate_headers(r.headers_mut(), budget, "graphql");
    r
}

/// async-graphql's response as GitHub prints it: `type` at the top of each error, and nulls
/// where errors are.
fn github_shaped(nullability: &Nullability, response: &async_graphql::Response) -> Json {
    let mut data = serde_json::to_value(&response.data).unwrap_or(Json::Null);
    let mut errors = Vec::new();
    for e in &response.errors {
        let mut v = serde_json::to_value(e).unwrap_or_else(|_| json!({"message": e.message}));
        if let Some(obj) = v.as_object_mut() {
            let ty = obj
                .get_mut("extensions")
                .and_then(Json::as_object_mut)
                .and_then(|x| x.remove("type"));
            if obj
                .get("extensions")
                .and_then(Json::as_object)
                .is_some_and(|x| x.is_empty())
            {
                obj.remove("extensions");
            }
            if let Some(ty) = ty {
                obj.insert("type".to_owned(), ty);
            }
            if let Some(Json::Array(path)) = obj.get("path")
                && !path.is_empty()
            {
                nullability.null_out(&mut data, path);
            }
        }
        errors.push(v);
    }
    if errors.is_empty() {
        json!({ "data": data })
    } else {
        json!({ "data": data, "errors": errors })
    }
}

/// Starts a REST call: faults, budget, authentication.
async fn rest_begin(
    shared: &Shared,
    operation: &str,
    headers: &HeaderMap,
) -> Result<(Vec<FaultKind>, Option<InstallationId>, RateLimitBudget), Response> {
    let fired = begin(shared, operation, RateLimitResource::Rest).await?;
    let mut m = lock(&shared.model);
    let installation = authenticate(&m, headers)?;
    let b = spend_rest(&mut m)?;
    Ok((fired, installation, b))
}

/// Takes one request from the REST pool, or answers GitHub's 403 when it is spent. (One pool
/// stands for every identity's, the App's own JWT calls included.)
fn spend_rest(m: &mut Model) -> Result<RateLimitBudget, Response> {
    let mut b = m.rate_limit(RateLimitResource::Rest);
    if b.remaining == 0 {
        let mut r = message(
            StatusCode::FORBIDDEN,
            "API rate limit exceeded. Check out the documentation for more details.",
        );
        rate_headers(r.headers_mut(), b, "core");
        return Err(r);
    }
    b.remaining -= 1;
    m.set_rate_limit(RateLimitResource::Rest, b);
    Ok(b)
}

fn with_rate(mut r: Response, b: RateLimitBudget) -> Response {
    rate_headers(r.headers_mut(), b, "core");
    r
}

#[derive(Deserialize)]
struct JwtClaims {
    iss: Option<Json>,
    exp: Option<i64>,
}

async fn create_access_token(
    State(shared): State<Arc<Shared>>,
    Path(installation_id): Path<u64>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = begin(
        &shared,
        ops::CREATE_INSTALLATION_ACCESS_TOKEN,
        RateLimitResource::Rest,
    )
    .await
    {
        return r;
    }
    let mut m = lock(&shared.model);
    if let Err(r) = authenticate_app(&m, &headers) {
        return r;
    }
    let budget = match spend_rest(&mut m) {
        Ok(b) => b,
        Err(r) => return r,
    };
    if !m.installations.contains_key(&installation_id) {
        return with_rate(message(StatusCode::NOT_FOUND, "Not Found"), budget);
    }
    let (token, expires_at) = m.issue_installation_token(installation_id);
    let r = (
        StatusCode::CREATED,
        axum::Json(json!({
            "token": token,
            "expires_at": model::format_time(expires_at),
            "permissions": {"issues": "read", "pull_requests": "read", "metadata": "read"},
            "repository_selection": "selected",
        })),
    )
        .into_response();
    with_rate(r, budget)
}

fn installation_json(m: &Model, i: &model::Installation) -> Json {
    json!({
        "id": i.id,
        "app_id": m.app_id.as_deref().and_then(|a| a.parse::<u64>().ok()),
        "account": {"login": i.account},
        "target_type": "Organization",
    })
}

/// `GET /app/installations/{id}` as the App: the installation, or 404 when the App has none of
/// that id.
async fn get_installation(
    State(shared): State<Arc<Shared>>,
    Path(installation_id): Path<u64>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = begin(&shared, ops::GET_INSTALLATION, RateLimitResource::Rest).await {
        return r;
    }
    let mut m = lock(&shared.model);
    if let Err(r) = authenticate_app(&m, &headers) {
        return r;
    }
    let budget = match spend_rest(&mut m) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let r = match m.installations.get(&installation_id) {
        Some(i) => (StatusCode::OK, axum::Json(installation_json(&m, i))).into_response(),
        None => message(StatusCode::NOT_FOUND, "Not Found"),
    };
    with_rate(r, budget)
}

/// `DELETE /app/installations/{id}` as the App: uninstalls it, `204`; 404 when the App has none
/// of that id. [`FaultKind::Accepted`] answers 202 and [`FaultKind::AnswerLate`] answers late,
/// both after the uninstall.
async fn delete_installation(
    State(shared): State<Arc<Shared>>,
    Path(installation_id): Path<u64>,
    headers: HeaderMap,
) -> Response {
    let fired = match begin(&shared, ops::DELETE_INSTALLATION, RateLimitResource::Rest).await {
        Ok(fired) => fired,
        Err(r) => return r,
    };
    let r = {
        let mut m = lock(&shared.model);
        if let Err(r) = authenticate_app(&m, &headers) {
            return r;
        }
        let budget = match spend_rest(&mut m) {
            Ok(b) => b,
            Err(r) => return r,
        };
        let r = if m.installations.remove(&installation_id).is_none() {
            message(StatusCode::NOT_FOUND, "Not Found")
        } else if fired.iter().any(|k| matches!(k, FaultKind::Accepted)) {
            StatusCode::ACCEPTED.into_response()
        } else {
            StatusCode::NO_CONTENT.into_response()
        };
        with_rate(r, budget)
    };
    let late: Duration = fired
        .iter()
        .filter_map(|k| match k {
            FaultKind::AnswerLate(d) => Some(*d),
            _ => None,
        })
        .sum();
    if !late.is_zero() {
        tokio::time::sleep(late).await;
    }
    r
}

/// Checks that a call is made as the App (a JWT); `Err` is the 401 GitHub answers.
fn authenticate_app(m: &Model, headers: &HeaderMap) -> Result<(), Response> {
    // The App JWT is checked for shape, `iss` and `exp`; its RS256 signature is not verified.
    let claims = bearer(headers)
        .and_then(|jwt| jwt.split('.').nth(1))
        .and_then(|p| URL_SAFE_NO_PAD.decode(p.trim_end_matches('=')).ok())
        .and_then(|p| serde_json::from_slice::<JwtClaims>(&p).ok());
    let Some(claims) = claims else {
        return Err(message(
            StatusCode::UNAUTHORIZED,
            "A JSON web token could not be decoded",
        ));
    };
    let iss = match &claims.iss {
        Some(Json::String(s)) => Some(s.clone()),
        Some(Json::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let iss_ok = match (&m.app_id, &iss) {
        (_, None) => false,
        (Some(want), Some(got)) => want == got,
        (None, Some(_)) => true,
    };
    let fresh = claims
        .exp
        .is_none_or(|exp| exp > model::now_seconds().unix_timestamp());
    if !iss_ok || !fresh {
        return Err(message(
            StatusCode::UNAUTHORIZED,
            "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires",
        ));
    }
    Ok(())
}

/// Sends `delivery` to the App's webhook target and logs the attempt, dated `at` or now.
async fn deliver_and_log(
    shared: &Shared,
    delivery: &webhook::Delivery,
    at: Option<time::OffsetDateTime>,
) -> DeliveryAttempt {
    let started = model::now_seconds();
    let target = lock(&shared.deliveries).target.clone();
    let (status, took) = deliveries::attempt(&shared.http, target.as_ref(), delivery).await;
    lock(&shared.deliveries).record(delivery, at.unwrap_or(started), status, took)
}

#[derive(Deserialize)]
struct CursorQuery {
    per_page: Option<usize>,
    cursor: Option<String>,
}

async fn list_hook_deliveries(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<CursorQuery>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = begin(
        &shared,
        ops::LIST_APP_HOOK_DELIVERIES,
        RateLimitResource::Rest,
    )
    .await
    {
        return r;
    }
    if let Err(r) = authenticate_app(&lock(&shared.model), &headers) {
        return r;
    }
    let per_page = q.per_page.unwrap_or(30).clamp(1, 100);
    let (attempts, next) = lock(&shared.deliveries).page(q.cursor.as_deref(), per_page);
    let items: Vec<Json> = attempts.iter().map(DeliveryAttempt::to_json).collect();
    let mut r = axum::Json(items).into_response();
    if let Some(next) = next {
        let link = format!(
            "<{}/app/hook/deliveries?per_page={per_page}&cursor={next}>; rel=\"next\"",
            shared.rest_base
        );
        if let Ok(v) = HeaderValue::from_str(&link) {
            r.headers_mut().insert("link", v);
        }
    }
    r
}

async fn redeliver_hook_delivery(
    State(shared): State<Arc<Shared>>,
    Path(delivery_id): Path<u64>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = begin(
        &shared,
        ops::REDELIVER_APP_HOOK_DELIVERY,
        RateLimitResource::Rest,
    )
    .await
    {
        return r;
    }
    if let Err(r) = authenticate_app(&lock(&shared.model), &headers) {
        return r;
    }
    let Some(delivery) = lock(&shared.deliveries).delivery_of(delivery_id) else {
        return message(StatusCode::NOT_FOUND, "Not Found");
    };
    // Like GitHub: accepted now, attempted right after (same guid, logged as a redelivery).
    let shared = shared.clone();
    tokio::spawn(async move {
        deliver_and_log(&shared, &delivery, None).await;
    });
    (StatusCode::ACCEPTED, axum::Json(json!({}))).into_response()
}

#[derive(Deserialize)]
struct PageQuery {
    per_page: Option<usize>,
    page: Option<usize>,
}

async fn installation_repositories(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let (fired, installation, budget) =
        match rest_begin(&shared, ops::LIST_INSTALLATION_REPOSITORIES, &headers).await {
            Ok(v) => v,
            Err(r) => return r,
        };
    let Some(installation) = installation else {
        return with_rate(
            message(
                StatusCode::FORBIDDEN,
                "You must authenticate with an installation access token in order to list repositories for an installation.",
            ),
            budget,
        );
    };
    let per_page = q.per_page.unwrap_or(30).clamp(1, 100);
    let page = q.page.unwrap_or(1).max(1);
    let m = lock(&shared.model);
    let visible: Vec<_> = m
        .repositories()
        .filter(|r| r.installation == Some(installation))
        .collect();
    let mut total = i64::try_from(visible.len()).unwrap_or(i64::MAX);
    let start = (page - 1).saturating_mul(per_page);
    let mut items: Vec<Json> = visible
        .iter()
        .skip(start)
        .take(per_page)
        .map(|r| webhook::repository_json(&m, r))
        .collect();
    let mut has_next = start.saturating_add(per_page) < visible.len();
    let last = visible.len().div_ceil(per_page).max(1);
    for kind in fired {
        match kind {
            FaultKind::TruncatedPage { keep } => items.truncate(keep),
            FaultKind::HasNextPage(v) => has_next = v,
            FaultKind::TotalCountOffBy(d) => total = (total + d).max(0),
            _ => {}
        }
    }
    let mut r = axum::Json(json!({"total_count": total, "repositories": items})).into_response();
    let link = |p: usize, rel: &str| {
        format!(
            "<{}/installation/repositories?per_page={per_page}&page={p}>; rel=\"{rel}\"",
            shared.rest_base
        )
    };
    let mut links = Vec::new();
    if page > 1 {
        links.push(link(page - 1, "prev"));
    }
    if has_next {
        links.push(link(page + 1, "next"));
        links.push(link(last.max(page + 1), "last"));
    }
    if let Ok(v) = HeaderValue::from_str(&links.join(", "))
        && !links.is_empty()
    {
        r.headers_mut().insert("link", v);
    }
    with_rate(r, budget)
}

async fn repository_by_id(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> Response {
    let (_, installation, budget) =
        match rest_begin(&shared, ops::GET_REPOSITORY_BY_ID, &headers).await {
            Ok(v) => v,
            Err(r) => return r,
        };
    let m = lock(&shared.model);
    let Ok(viewer) = viewer(&m, &headers) else {
        return message(StatusCode::UNAUTHORIZED, "Bad credentials");
    };
    // A repository the caller cannot see is answered as missing.
    let found = m
        .repository(id)
        .filter(|r| installation.is_none() || r.installation == installation)
        .filter(|r| viewer.sees(r));
    let r = match found {
        Some(repo) => axum::Json(webhook::repository_json(&m, repo)).into_response(),
        None => message(StatusCode::NOT_FOUND, "Not Found"),
    };
    with_rate(r, budget)
}
