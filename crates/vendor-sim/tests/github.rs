//! The GitHub simulator over real HTTP: pagination, every fault kind, renames and transfers,
//! REST auth, webhooks, and the schema contract.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value as Json, json};
use vendor_sim::github::{
    Calls, Fault, FaultKind, GithubSim, Model, NewIssue, RateLimitBudget, RateLimitResource,
    Scenario, generate, ops, webhook,
};

const ISSUES: &str = r#"query RepositoryIssues($owner: String!, $name: String!, $first: Int!, $after: String) {
  rateLimit { cost limit remaining resetAt }
  repository(owner: $owner, name: $name) {
    id databaseId nameWithOwner isArchived owner { login }
    issues(first: $first, after: $after, orderBy: {field: CREATED_AT, direction: ASC}) {
      totalCount pageInfo { hasNextPage endCursor }
      nodes { id databaseId number title body state stateReason createdAt updatedAt closedAt
              locked activeLockReason author { login } comments(first: 0) { totalCount } }
    }
  }
}"#;

const PULLS: &str = r#"query RepositoryPullRequests($owner: String!, $name: String!, $first: Int!, $after: String) {
  rateLimit { cost limit remaining resetAt }
  repository(owner: $owner, name: $name) {
    id databaseId nameWithOwner isArchived owner { login }
    pullRequests(first: $first, after: $after, orderBy: {field: CREATED_AT, direction: ASC}) {
      totalCount pageInfo { hasNextPage endCursor }
      nodes { id databaseId number title body state isDraft createdAt updatedAt closedAt mergedAt
              locked activeLockReason headRefName headRefOid baseRefName author { login }
              comments(first: 0) { totalCount } reviews(first: 0) { totalCount } }
    }
  }
}"#;

const BY_ID: &str = r#"query RepositoryById($id: ID!) {
  rateLimit { cost limit remaining resetAt }
  node(id: $id) { ... on Repository { id databaseId nameWithOwner owner { login } } }
}"#;

const PAT: &str = "ghp_simulated";

struct Api {
    sim: GithubSim,
    http: reqwest::Client,
}

impl Api {
    async fn start(model: Model) -> Api {
        runtime::install_crypto_provider();
        let sim = GithubSim::start(model).await.expect("simulator starts");
        sim.model(|m| m.add_personal_access_token(PAT));
        Api {
            sim,
            http: reqwest::Client::new(),
        }
    }

    async fn graphql(&self, query: &str, variables: Json) -> (reqwest::StatusCode, Json) {
        let r = self
            .http
            .post(self.sim.graphql_url())
            .bearer_auth(PAT)
            .json(&json!({"query": query, "variables": variables}))
            .send()
            .await
            .expect("sim answers");
        let status = r.status();
        (status, r.json().await.unwrap_or(Json::Null))
    }

    async fn issues_page(&self, name: &str, after: Option<&str>) -> Json {
        let (status, body) = self
            .graphql(
                ISSUES,
                json!({"owner": "acme", "name": name, "first": 100, "after": after}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Lists every issue of `name`, following `endCursor` while `hasNextPage`.
    async fn all_issues(&self, name: &str) -> (Vec<Json>, i64) {
        let mut after: Option<String> = None;
        let mut nodes = Vec::new();
        loop {
            let body = self.issues_page(name, after.as_deref()).await;
            let conn = &body["data"]["repository"]["issues"];
            let total = conn["totalCount"].as_i64().expect("totalCount");
            nodes.extend(conn["nodes"].as_array().expect("nodes").iter().cloned());
            if !conn["pageInfo"]["hasNextPage"]
                .as_bool()
                .expect("hasNextPage")
            {
                return (nodes, total);
            }
            after = conn["pageInfo"]["endCursor"].as_str().map(str::to_owned);
        }
    }
}

fn numbers(nodes: &[Json]) -> Vec<u64> {
    nodes
        .iter()
        .map(|n| n["number"].as_u64().unwrap())
        .collect()
}

fn small_model() -> (Model, u64) {
    let g = generate(&Scenario {
        seed: 7,
        repositories: 1,
        items: 350,
        pull_request_percent: 0,
        ..Scenario::default()
    });
    (g.model, g.repositories[0])
}

#[tokio::test]
async fn lists_10000_items_in_pages_of_100_completely_and_in_order() {
    let g = generate(&Scenario::default());
    let expected: usize = g
        .model
        .repositories()
        .map(|r| r.issues().count() + r.pull_requests().count())
        .sum();
    assert_eq!(expected, 10_000);
    let api = Api::start(g.model).await;
    let started = Instant::now();
    let mut seen = HashSet::new();
    let mut pages = 0;
    for repo in 0..5 {
        let name = format!("repo-{repo}");
        for (query, conn) in [(ISSUES, "issues"), (PULLS, "pullRequests")] {
            let mut after: Option<String> = None;
            let mut last_created = String::new();
            loop {
                let (status, body) = api
                    .graphql(
                        query,
                        json!({"owner": "acme", "name": name, "first": 100, "after": after}),
                    )
                    .await;
                assert_eq!(status, 200);
                assert!(body.get("errors").is_none(), "{body}");
                pages += 1;
                let c = &body["data"]["repository"][conn];
                for node in c["nodes"].as_array().unwrap() {
                    assert!(seen.insert(node["id"].as_str().unwrap().to_owned()));
                    let created = node["createdAt"].as_str().unwrap().to_owned();
                    assert!(created >= last_created, "CREATED_AT ASC");
                    last_created = created;
                }
                if !c["pageInfo"]["hasNextPage"].as_bool().unwrap() {
                    break;
                }
                after = c["pageInfo"]["endCursor"].as_str().map(str::to_owned);
            }
        }
    }
    assert_eq!(seen.len(), 10_000);
    assert!(pages >= 100);
    let elapsed = started.elapsed();
    eprintln!("10,000 items in {pages} pages: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(30), "too slow: {elapsed:?}");
    assert_eq!(
        api.sim.calls(ops::REPOSITORY_ISSUES) + api.sim.calls(ops::REPOSITORY_PULL_REQUESTS),
        pages
    );
}

#[tokio::test]
async fn scalars_and_enums_are_shaped_like_github() {
    let (model, _) = small_model();
    let api = Api::start(model).await;
    let body = api.issues_page("repo-0", None).await;
    let repo = &body["data"]["repository"];
    assert_eq!(repo["nameWithOwner"], "acme/repo-0");
    assert_eq!(repo["owner"]["login"], "acme");
    assert!(repo["databaseId"].is_i64());
    let conn = &repo["issues"];
    assert_eq!(conn["totalCount"], 350);
    let node = &conn["nodes"][0];
    let created = node["createdAt"].as_str().unwrap();
    assert_eq!(created.len(), "2024-01-02T00:00:00Z".len(), "{created}");
    assert!(created.ends_with('Z'));
    assert!(["OPEN", "CLOSED"].contains(&node["state"].as_str().unwrap()));
    let rate = &body["data"]["rateLimit"];
    assert_eq!(rate["cost"], 1);
    assert_eq!(rate["limit"], 5000);
    assert_eq!(rate["remaining"], 4999);

    let g = generate(&Scenario {
        repositories: 1,
        items: 50,
        pull_request_percent: 100,
        ..Scenario::default()
    });
    let api = Api::start(g.model).await;
    let (_, body) = api
        .graphql(
            PULLS,
            json!({"owner": "acme", "name": "repo-0", "first": 100}),
        )
        .await;
    let pr = &body["data"]["repository"]["pullRequests"]["nodes"][0];
    let oid = pr["headRefOid"].as_str().unwrap();
    assert_eq!(oid.len(), 40);
    assert!(oid.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(["OPEN", "CLOSED", "MERGED"].contains(&pr["state"].as_str().unwrap()));
    // Two nested connections per node: GitHub's formula gives 2 points for 100 nodes.
    assert_eq!(body["data"]["rateLimit"]["cost"], 2);
}

#[tokio::test]
async fn pagination_arguments_are_checked_like_github() {
    let (model, _) = small_model();
    let api = Api::start(model).await;
    let (_, body) = api
        .graphql(
            ISSUES,
            json!({"owner": "acme", "name": "repo-0", "first": 101}),
        )
        .await;
    assert_eq!(body["errors"][0]["type"], "EXCESSIVE_PAGINATION");
    assert_eq!(body["data"]["repository"], Json::Null);
    let (_, body) = api
        .graphql(
            ISSUES,
            json!({"owner": "acme", "name": "repo-0", "first": 10, "after": "garbage"}),
        )
        .await;
    assert_eq!(body["errors"][0]["type"], "INVALID_CURSOR_ARGUMENTS");
    let (_, body) = api
        .graphql(
            ISSUES,
            json!({"owner": "acme", "name": "missing", "first": 10}),
        )
        .await;
    assert_eq!(body["errors"][0]["type"], "NOT_FOUND");
    assert_eq!(body["errors"][0]["path"], json!(["repository"]));
    assert_eq!(body["data"]["repository"], Json::Null);
    assert!(body["data"]["rateLimit"].is_object());
}

#[tokio::test]
async fn truncated_page_skips_items_while_page_info_looks_whole() {
    let (model, _) = small_model();
    let api = Api::start(model).await;
    api.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        2,
        FaultKind::TruncatedPage { keep: 40 },
    ));
    let (nodes, total) = api.all_issues("repo-0").await;
    assert_eq!(total, 350);
    assert_eq!(nodes.len(), 290, "60 items silently skipped");
}

#[tokio::test]
async fn has_next_page_can_lie_both_ways() {
    let (model, _) = small_model();
    let api = Api::start(model).await;
    api.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        1,
        FaultKind::HasNextPage(false),
    ));
    let (nodes, total) = api.all_issues("repo-0").await;
    assert_eq!((nodes.len(), total), (100, 350), "listing ends early");

    // On the last page (4th call of this listing), claim there is more.
    api.sim.clear_faults();
    api.sim.inject(Fault {
        operation: Some(ops::REPOSITORY_ISSUES.to_owned()),
        calls: Calls::Nth(4),
        kind: FaultKind::HasNextPage(true),
    });
    let (nodes, _) = api.all_issues("repo-0").await;
    assert_eq!(nodes.len(), 350, "the extra page is empty");
    assert_eq!(api.sim.calls(ops::REPOSITORY_ISSUES), 1 + 5);
}

#[tokio::test]
async fn total_count_can_disagree() {
    let (model, _) = small_model();
    let api = Api::start(model).await;
    api.sim.inject(Fault::always(
        ops::REPOSITORY_ISSUES,
        FaultKind::TotalCountOffBy(-7),
    ));
    let (nodes, total) = api.all_issues("repo-0").await;
    assert_eq!((nodes.len(), total), (350, 343));
}

#[tokio::test]
async fn field_errors_null_the_field_and_propagate_through_non_null_parents() {
    let (model, _) = small_model();
    let api = Api::start(model).await;
    api.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        1,
        FaultKind::field_error(
            "repository.issues.nodes.3.author",
            "FORBIDDEN",
            "Resource not accessible by integration",
        ),
    ));
    let body = api.issues_page("repo-0", None).await;
    let err = &body["errors"][0];
    assert_eq!(err["type"], "FORBIDDEN");
    assert_eq!(
        err["path"],
        json!(["repository", "issues", "nodes", 3, "author"])
    );
    let nodes = &body["data"]["repository"]["issues"]["nodes"];
    assert_eq!(nodes[3]["author"], Json::Null, "nullable field is null");
    assert!(nodes[3]["number"].is_u64(), "siblings survive");

    // `issues` is non-null: the error nulls the nearest nullable ancestor, `repository`.
    // A fault counts calls from its injection on.
    api.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        1,
        FaultKind::field_error("repository.issues", "SERVICE_UNAVAILABLE", "timeout"),
    ));
    let body = api.issues_page("repo-0", None).await;
    assert_eq!(body["errors"][0]["path"], json!(["repository", "issues"]));
    assert_eq!(body["data"]["repository"], Json::Null);
    assert!(body["data"]["rateLimit"]["remaining"].is_u64());

    // A non-null scalar in a list item nulls the item (the list's items are nullable).
    api.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        1,
        FaultKind::field_error("repository.issues.nodes.5.title", "INTERNAL", "boom"),
    ));
    let body = api.issues_page("repo-0", None).await;
    let nodes = &body["data"]["repository"]["issues"]["nodes"];
    assert_eq!(nodes[5], Json::Null);
    assert!(nodes[4].is_object());
}

#[tokio::test]
async fn budget_is_spent_by_cost_and_exhaustion_answers_rate_limited() {
    let (model, _) = small_model();
    let api = Api::start(model).await;
    api.sim.model(|m| {
        m.set_rate_limit(
            RateLimitResource::Graphql,
            RateLimitBudget {
                limit: 5000,
                remaining: 2,
                reset_at: time::OffsetDateTime::now_utc() + time::Duration::HOUR,
            },
        )
    });
    let body = api.issues_page("repo-0", None).await;
    assert_eq!(body["data"]["rateLimit"]["remaining"], 1);
    let body = api.issues_page("repo-0", None).await;
    assert_eq!(body["data"]["rateLimit"]["remaining"], 0);
    let body = api.issues_page("repo-0", None).await;
    assert_eq!(body["errors"][0]["type"], "RATE_LIMITED");
    assert!(body.get("data").is_none_or(Json::is_null));

    // The fault form: budget drops to 0 on the chosen call.
    let (model, _) = small_model();
    let api = Api::start(model).await;
    api.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        2,
        FaultKind::ExhaustRateLimit,
    ));
    assert!(
        api.issues_page("repo-0", None)
            .await
            .get("errors")
            .is_none()
    );
    let r = api
        .http
        .post(api.sim.graphql_url())
        .bearer_auth(PAT)
        .json(&json!({"query": ISSUES, "variables": {"owner": "acme", "name": "repo-0", "first": 100}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-ratelimit-remaining"], "0");
    let body: Json = r.json().await.unwrap();
    assert_eq!(body["errors"][0]["type"], "RATE_LIMITED");
}

#[tokio::test]
async fn server_errors_secondary_limits_and_delays() {
    let (model, _) = small_model();
    let api = Api::start(model).await;
    api.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        1,
        FaultKind::Status(502),
    ));
    api.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        2,
        FaultKind::SecondaryRateLimit { retry_after: 7 },
    ));
    api.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        3,
        FaultKind::Delay(Duration::from_millis(300)),
    ));
    let vars = json!({"owner": "acme", "name": "repo-0", "first": 100});
    let (status, _) = api.graphql(ISSUES, vars.clone()).await;
    assert_eq!(status, 502);
    let r = api
        .http
        .post(api.sim.graphql_url())
        .bearer_auth(PAT)
        .json(&json!({"query": ISSUES, "variables": vars}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.headers()["retry-after"], "7");
    let started = Instant::now();
    let (status, body) = api.graphql(ISSUES, vars.clone()).await;
    assert_eq!(status, 200);
    assert!(body.get("errors").is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    // Faults without an operation hit every call.
    api.sim.inject(Fault {
        operation: None,
        calls: Calls::From(1),
        kind: FaultKind::Status(503),
    });
    assert_eq!(api.graphql(BY_ID, json!({"id": "x"})).await.0, 503);
}

#[tokio::test]
async fn items_deleted_or_created_between_pages_shift_nothing() {
    let (model, repo) = small_model();
    let numbers_before: Vec<u64> = model
        .repository(repo)
        .unwrap()
        .issues()
        .map(|i| i.number)
        .collect();
    let api = Api::start(model).await;
    // Before page 2: delete one item already listed and one not yet listed, create one.
    let (listed, unlisted) = (numbers_before[10], numbers_before[250]);
    api.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        2,
        FaultKind::mutate(move |m| {
            m.delete_issue(repo, listed);
            m.delete_issue(repo, unlisted);
            m.add_issue(
                repo,
                NewIssue {
                    title: "created mid-listing".into(),
                    ..NewIssue::default()
                },
            );
        }),
    ));
    let (nodes, total) = api.all_issues("repo-0").await;
    let got = numbers(&nodes);
    assert_eq!(total, 349);
    assert_eq!(
        got.len(),
        350 - 1 + 1,
        "the listed one stays listed, the new one comes last"
    );
    assert!(got.contains(&listed));
    assert!(!got.contains(&unlisted));
    assert_eq!(nodes.last().unwrap()["title"], "created mid-listing");
    assert_eq!(
        got.iter().collect::<HashSet<_>>().len(),
        got.len(),
        "no duplicates"
    );
}

#[tokio::test]
async fn renames_and_transfers_keep_ids_and_old_names_redirect() {
    let (mut model, repo) = small_model();
    let other = model.add_installation("globex");
    let api = Api::start(model).await;
    let node_id = api.issues_page("repo-0", None).await["data"]["repository"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // A rename between two pages of one listing.
    api.sim.inject(Fault::nth(
        ops::REPOSITORY_ISSUES,
        3,
        FaultKind::mutate(move |m| {
            m.rename_repository(repo, "renamed");
        }),
    ));
    let (nodes, _) = api.all_issues("repo-0").await;
    assert_eq!(nodes.len(), 350, "the old name keeps resolving");
    let (_, body) = api.graphql(BY_ID, json!({"id": node_id})).await;
    assert_eq!(body["data"]["node"]["nameWithOwner"], "acme/renamed");
    let body = api.issues_page("repo-0", None).await;
    assert_eq!(body["data"]["repository"]["nameWithOwner"], "acme/renamed");
    let (_, body) = api
        .graphql(
            "query Strict { repository(owner: \"acme\", name: \"repo-0\", followRenames: false) { id } }",
            json!({}),
        )
        .await;
    assert_eq!(body["errors"][0]["type"], "NOT_FOUND");

    api.sim
        .model(|m| m.transfer_repository(repo, "globex", Some(other)));
    let (_, body) = api.graphql(BY_ID, json!({"id": node_id})).await;
    assert_eq!(body["data"]["node"]["nameWithOwner"], "globex/renamed");
    assert_eq!(body["data"]["node"]["owner"]["login"], "globex");
    assert_eq!(body["data"]["node"]["databaseId"], repo);

    api.sim.model(|m| m.delete_repository(repo));
    let (_, body) = api.graphql(BY_ID, json!({"id": node_id})).await;
    assert_eq!(body["data"]["node"], Json::Null);
    assert_eq!(body["errors"][0]["type"], "NOT_FOUND");
    assert_eq!(api.sim.calls(ops::REPOSITORY_BY_ID), 3);
}

fn app_jwt(iss: &str) -> String {
    let b64 = |v: Json| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let exp = time::OffsetDateTime::now_utc().unix_timestamp() + 600;
    format!(
        "{}.{}.c2ln",
        b64(json!({"alg": "RS256", "typ": "JWT"})),
        b64(json!({"iss": iss, "iat": exp - 660, "exp": exp}))
    )
}

#[tokio::test]
async fn rest_tokens_installation_listing_and_repository_by_id() {
    let mut model = Model::new();
    model.set_app_id("42");
    let inst = model.add_installation("acme");
    let other = model.add_installation("globex");
    let ids: Vec<u64> = (0..5)
        .map(|i| model.add_repository(Some(inst), "acme", &format!("r{i}")))
        .collect();
    let foreign = model.add_repository(Some(other), "globex", "theirs");
    let api = Api::start(model).await;
    let base = api.sim.base_url().to_owned();

    let r = api
        .http
        .post(format!("{base}/app/installations/{inst}/access_tokens"))
        .bearer_auth(app_jwt("41"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "wrong app id");
    let r = api
        .http
        .post(format!("{base}/app/installations/{inst}/access_tokens"))
        .bearer_auth(app_jwt("42"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let body: Json = r.json().await.unwrap();
    let token = body["token"].as_str().unwrap().to_owned();
    assert!(
        time::OffsetDateTime::parse(
            body["expires_at"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339
        )
        .is_ok()
    );

    let mut listed = Vec::new();
    let mut url = format!("{base}/installation/repositories?per_page=2&page=1");
    loop {
        let r = api.http.get(&url).bearer_auth(&token).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().contains_key("x-ratelimit-remaining"));
        let next = r
            .headers()
            .get("link")
            .and_then(|l| l.to_str().ok())
            .and_then(|l| {
                l.split(", ")
                    .find(|p| p.ends_with("rel=\"next\""))
                    .map(|p| p[1..p.find('>').unwrap()].to_owned())
            });
        let body: Json = r.json().await.unwrap();
        assert_eq!(body["total_count"], 5);
        for repo in body["repositories"].as_array().unwrap() {
            listed.push(repo["id"].as_u64().unwrap());
            assert!(repo["node_id"].is_string());
            assert_eq!(repo["owner"]["login"], "acme");
        }
        match next {
            Some(n) => url = n,
            None => break,
        }
    }
    assert_eq!(listed, ids);
    assert_eq!(api.sim.calls(ops::LIST_INSTALLATION_REPOSITORIES), 3);

    let get = |id: u64, tok: &str| {
        api.http
            .get(format!("{base}/repositories/{id}"))
            .bearer_auth(tok)
            .send()
    };
    let r = get(ids[1], &token).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Json>().await.unwrap()["full_name"], "acme/r1");
    assert_eq!(get(foreign, &token).await.unwrap().status(), 404);
    assert_eq!(get(foreign, PAT).await.unwrap().status(), 200);
    api.sim.model(|m| m.delete_repository(ids[1]));
    assert_eq!(get(ids[1], &token).await.unwrap().status(), 404);
    let r = get(ids[0], "ghs_unknown").await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Json>().await.unwrap()["message"],
        "Bad credentials"
    );

    // Expired installation tokens are refused.
    api.sim.model(|m| m.set_token_lifetime(Duration::ZERO));
    let r = api
        .http
        .post(format!("{base}/app/installations/{inst}/access_tokens"))
        .bearer_auth(app_jwt("42"))
        .send()
        .await
        .unwrap();
    let expired = r.json::<Json>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(get(ids[0], &expired).await.unwrap().status(), 401);
}

#[tokio::test]
async fn webhooks_are_signed_and_real_shaped() {
    use axum::extract::State;
    use hmac::{KeyInit as _, Mac as _};
    use std::sync::{Arc, Mutex};

    type Seen = Arc<Mutex<Vec<(axum::http::HeaderMap, axum::body::Bytes)>>>;
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route(
            "/hook",
            axum::routing::post(
                |State(seen): State<Seen>,
                 headers: axum::http::HeaderMap,
                 body: axum::body::Bytes| async move {
                    seen.lock().unwrap().push((headers, body));
                    axum::http::StatusCode::ACCEPTED
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let (model, repo) = small_model();
    let api = Api::start(model).await;
    let number = api
        .sim
        .model(|m| m.repository(repo).unwrap().issues().next().unwrap().number);
    let payload = api.sim.model(|m| {
        let r = m.repository(repo).unwrap();
        webhook::issues_payload(m, "opened", r, r.issue(number).unwrap())
    });
    let status = vendor_sim::github::send_webhook(&url, b"s3cret", "issues", &payload)
        .await
        .unwrap();
    assert_eq!(status, 202);

    api.sim.model(|m| m.rename_repository(repo, "renamed"));
    let payload = api.sim.model(|m| {
        webhook::repository_payload(
            m,
            "renamed",
            m.repository(repo).unwrap(),
            Some(webhook::renamed_changes("repo-0")),
        )
    });
    let delivery = webhook::Delivery::new("repository", &payload);
    delivery.send(&api.http, &url, b"s3cret").await.unwrap();
    delivery.send(&api.http, &url, b"s3cret").await.unwrap();

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    for (headers, body) in seen.iter() {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(body);
        let want = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(headers["x-hub-signature-256"], want.as_str());
        assert!(headers.contains_key("x-github-delivery"));
        assert_eq!(headers["x-github-hook-id"], "1");
    }
    let (headers, body) = &seen[0];
    assert_eq!(headers["x-github-event"], "issues");
    let body: Json = serde_json::from_slice(body).unwrap();
    assert_eq!(body["action"], "opened");
    assert_eq!(body["issue"]["number"], number);
    assert!(["open", "closed"].contains(&body["issue"]["state"].as_str().unwrap()));
    assert_eq!(body["repository"]["full_name"], "acme/repo-0");
    assert_eq!(body["repository"]["id"], repo);
    assert!(body["installation"]["id"].is_u64());
    assert!(body["sender"]["login"].is_string());
    assert_eq!(
        seen[1].0["x-github-delivery"], seen[2].0["x-github-delivery"],
        "a redelivery keeps its id"
    );
    let renamed: Json = serde_json::from_slice(&seen[1].1).unwrap();
    assert_eq!(renamed["changes"]["repository"]["name"]["from"], "repo-0");
    assert_eq!(renamed["repository"]["name"], "renamed");
}

#[test]
fn generation_is_deterministic() {
    let summary = |m: &Model| -> Vec<(String, u64, String, String)> {
        m.repositories()
            .flat_map(|r| {
                r.issues().map(move |i| {
                    (
                        r.name.clone(),
                        i.number,
                        i.title.clone(),
                        format!("{:?}{:?}", i.created_at, i.state),
                    )
                })
            })
            .collect()
    };
    let a = generate(&Scenario::default());
    let b = generate(&Scenario::default());
    assert_eq!(summary(&a.model), summary(&b.model));
    let c = generate(&Scenario {
        seed: 2,
        ..Scenario::default()
    });
    assert_ne!(summary(&a.model), summary(&c.model));
}

#[tokio::test]
async fn commit_checks_are_served_and_sent_like_github() {
    use vendor_sim::github::{CheckConclusion, NewPullRequest, StatusState};
    const CHECKS: &str = include_str!("../../github-client/queries/GetCommitCheckRuns.graphql");
    let (mut model, repo) = small_model();
    let pr = model
        .add_pull_request(repo, NewPullRequest::default())
        .unwrap();
    let sha = pr.head_ref_oid.clone();
    let suite = model.add_check_suite(repo, &sha, 7, "CI").unwrap();
    let build = model.add_check_run(repo, suite, "build").unwrap();
    let test = model.add_check_run(repo, suite, "test").unwrap();
    let at = vendor_sim::github::EPOCH + Duration::from_secs(60);
    model.complete_check_run(repo, build, CheckConclusion::Success, at);
    model.add_commit_status(repo, &sha, "lint", StatusState::Pending, at);
    let api = Api::start(model).await;
    let read = |oid: String| {
        let api = &api;
        async move {
            let (status, body) = api
                .graphql(
                    CHECKS,
                    json!({"owner": "acme", "name": "repo-0", "oid": oid}),
                )
                .await;
            assert_eq!(status, 200, "{body}");
            assert!(body.get("errors").is_none(), "{body}");
            body["data"]["repository"]["object"].clone()
        }
    };
    let commit = read(sha.clone()).await;
    assert_eq!(commit["oid"], sha.as_str());
    let rollup = &commit["statusCheckRollup"];
    assert_eq!(rollup["state"], "PENDING");
    assert_eq!(rollup["contexts"]["totalCount"], 3);
    let nodes = rollup["contexts"]["nodes"].as_array().unwrap();
    assert_eq!(nodes[0]["name"], "build");
    assert_eq!(nodes[0]["status"], "COMPLETED");
    assert_eq!(nodes[0]["conclusion"], "SUCCESS");
    assert_eq!(nodes[0]["completedAt"], "2024-01-01T00:01:00Z");
    assert_eq!(nodes[0]["checkSuite"]["app"]["databaseId"], 7);
    assert_eq!(nodes[1]["status"], "IN_PROGRESS");
    assert_eq!(nodes[2]["context"], "lint");
    assert_eq!(nodes[2]["state"], "PENDING");
    let suites = &commit["checkSuites"];
    assert_eq!(suites["totalCount"], 1);
    assert_eq!(suites["nodes"][0]["status"], "IN_PROGRESS");
    assert_eq!(suites["nodes"][0]["checkRuns"]["totalCount"], 2);

    api.sim.model(|m| {
        m.complete_check_run(repo, test, CheckConclusion::Failure, at);
        m.complete_check_suite(repo, suite, CheckConclusion::Failure);
        m.add_commit_status(repo, &sha, "lint", StatusState::Success, at);
    });
    let commit = read(sha.clone()).await;
    assert_eq!(commit["statusCheckRollup"]["state"], "FAILURE");
    assert_eq!(commit["statusCheckRollup"]["contexts"]["totalCount"], 3);
    assert_eq!(commit["checkSuites"]["nodes"][0]["conclusion"], "FAILURE");
    assert!(read("f".repeat(40)).await.is_null(), "an unknown commit");
    assert_eq!(api.sim.calls(ops::GET_COMMIT_CHECK_RUNS), 3);

    let (suite_hook, status_hook) = api.sim.model(|m| {
        let r = m.repository(repo).unwrap();
        let s = m.check_suite(repo, suite).unwrap();
        let status = m.commit_checks(repo, &sha).statuses[0].clone();
        (
            webhook::check_suite_payload(m, "completed", r, s),
            webhook::status_payload(m, r, &status),
        )
    });
    let cs = &suite_hook["check_suite"];
    assert_eq!(suite_hook["action"], "completed");
    assert_eq!(cs["head_sha"], sha.as_str());
    assert_eq!(cs["status"], "completed");
    assert_eq!(cs["conclusion"], "failure");
    assert_eq!(cs["app"]["id"], 7);
    assert_eq!(cs["pull_requests"][0]["number"], pr.number);
    assert!(status_hook.get("action").is_none());
    assert_eq!(status_hook["sha"], sha.as_str());
    assert_eq!(status_hook["state"], "success");
    assert_eq!(status_hook["context"], "lint");
    assert_eq!(status_hook["repository"]["id"], repo);
}

#[tokio::test]
async fn a_private_repository_is_invisible_to_another_users_token() {
    let (mut model, repo) = small_model();
    model.set_repository_private(repo, true);
    model.add_user_token("ghp_owner", "acme");
    model.add_user_token("ghp_stranger", "mallory");
    let api = Api::start(model).await;
    let lookup = |token: &'static str| {
        let api = &api;
        async move {
            let graphql: Json = api
                .http
                .post(api.sim.graphql_url())
                .bearer_auth(token)
                .json(&json!({"query": ISSUES, "variables":
                    {"owner": "acme", "name": "repo-0", "first": 1, "after": null}}))
                .send()
                .await
                .expect("sim answers")
                .json()
                .await
                .expect("json");
            let rest = api
                .http
                .get(format!("{}/repositories/{repo}", api.sim.base_url()))
                .bearer_auth(token)
                .send()
                .await
                .expect("sim answers")
                .status();
            (graphql, rest)
        }
    };
    let (graphql, rest) = lookup("ghp_owner").await;
    assert_eq!(graphql["data"]["repository"]["databaseId"], json!(repo));
    assert_eq!(rest, 200);
    let (graphql, rest) = lookup("ghp_stranger").await;
    assert_eq!(graphql["data"]["repository"], Json::Null, "{graphql}");
    assert_eq!(graphql["errors"][0]["type"], "NOT_FOUND", "{graphql}");
    assert_eq!(rest, 404);
    // Made public, everyone sees it.
    api.sim.model(|m| m.set_repository_private(repo, false));
    let (graphql, rest) = lookup("ghp_stranger").await;
    assert_eq!(graphql["data"]["repository"]["databaseId"], json!(repo));
    assert_eq!(rest, 200);
}
