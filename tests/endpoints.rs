//! Webhook endpoints through control-api, checked against a running ingress: rotation window,
//! explicit replay, and disconnect disabling the endpoints.

use std::time::Duration;

use anyhow::Result;
use bus::Stream;
use control_api::Role;
use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::TestEnv;

struct Stack {
    http: reqwest::Client,
    api: String,
    ingress: String,
    admin: String,
    keys: control_api::Keys,
}

impl Stack {
    async fn call(&self, path: &str, token: &str, body: Value) -> Result<(StatusCode, Value)> {
        let res = self
            .http
            .post(format!("{}{path}", self.api))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await?;
        let status = res.status();
        Ok((status, res.json().await.unwrap_or(Value::Null)))
    }

    /// A signed GitHub push to hook `hook`.
    async fn push(&self, hook: &str, delivery: &str, secret: &str) -> Result<(StatusCode, Value)> {
        let body = serde_json::to_vec(&json!({"ref": "refs/heads/main", "after": delivery,
            "repository": {"name": "api", "owner": {"login": "acme"}}}))?;
        let sig = ingress::verify::sign_hex(secret.as_bytes(), &[&body]);
        let res = self
            .http
            .post(format!("{}/webhooks/github", self.ingress))
            .header("X-GitHub-Event", "push")
            .header("X-GitHub-Delivery", delivery)
            .header("X-GitHub-Hook-ID", hook)
            .header("X-Hub-Signature-256", format!("sha256={sig}"))
            .body(body)
            .send()
            .await?;
        let status = res.status();
        Ok((status, res.json().await.unwrap_or(Value::Null)))
    }
}

async fn start(env: &TestEnv) -> Result<(Stack, testkit::Running, testkit::Running)> {
    let (api, keys) = (
        testkit::spawn(testkit::control_api_config(env.common_args())).await?,
        testkit::control_api_keys()?,
    );
    let ingress = testkit::spawn(testkit::ingress_config(env.common_args())).await?;
    let stack = Stack {
        http: reqwest::Client::new(),
        api: api.url(),
        ingress: ingress.url(),
        admin: testkit::token(&keys, Role::Admin, None)?,
        keys,
    };
    Ok((stack, api, ingress))
}

/// A workspace with an active GitHub connection and an endpoint for hook `hook`.
async fn github_endpoint(s: &Stack, hook: &str, secret: &str) -> Result<(String, String, String)> {
    let (st, ws) = s
        .call("/workspaces", &s.admin, json!({"name": "acme"}))
        .await?;
    assert_eq!(st, StatusCode::CREATED, "{ws}");
    let ws = ws["id"].as_str().unwrap().to_owned();
    let (st, conn) = s
        .call(
            &format!("/workspaces/{ws}/connections"),
            &s.admin,
            json!({"kind": "github"}),
        )
        .await?;
    assert_eq!(st, StatusCode::CREATED, "{conn}");
    let conn = conn["id"].as_str().unwrap().to_owned();
    let (st, _) = s
        .call(
            &format!("/workspaces/{ws}/connections/{conn}/activate"),
            &s.admin,
            json!({}),
        )
        .await?;
    assert_eq!(st, StatusCode::OK);
    let (st, ep) = s
        .call(
            &format!("/workspaces/{ws}/connections/{conn}/endpoints"),
            &s.admin,
            json!({"registration": "operator", "provider_ref": hook, "secret": secret}),
        )
        .await?;
    assert_eq!(st, StatusCode::CREATED, "{ep}");
    assert!(ep.get("secret").is_some());
    Ok((ws, conn, ep["id"].as_str().unwrap().to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_secret_keeps_the_old_one_for_its_window_only() -> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (ws, conn, ep) = github_endpoint(&s, "901", "old-secret-0123456789").await?;
    let path = format!("/workspaces/{ws}/connections/{conn}/endpoints/{ep}/rotate-secret");

    // Another workspace's token does not see the endpoint.
    let stranger = testkit::token(&s.keys, Role::Admin, Some(uuid::Uuid::now_v7()))?;
    assert_eq!(
        s.call(&path, &stranger, json!({})).await?.0,
        StatusCode::NOT_FOUND
    );

    let (st, rotated) = s
        .call(
            &path,
            &s.admin,
            json!({"secret": "new-secret-0123456789", "window_secs": 2}),
        )
        .await?;
    assert_eq!(st, StatusCode::OK, "{rotated}");
    assert_eq!(rotated["status"], "rotating");
    assert_eq!(
        s.push("901", "a", "old-secret-0123456789").await?.0,
        StatusCode::OK
    );
    assert_eq!(
        s.push("901", "b", "new-secret-0123456789").await?.0,
        StatusCode::OK
    );

    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        s.push("901", "c", "old-secret-0123456789").await?.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        s.push("901", "d", "new-secret-0123456789").await?.0,
        StatusCode::OK
    );

    // A generated secret is returned once.
    let (st, again) = s.call(&path, &s.admin, json!({})).await?;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(again["secret"].as_str().map(str::len), Some(64));
    ingress.stop().await?;
    api.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_bypasses_dedup_and_records_its_origin() -> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (ws, _conn, _ep) = github_endpoint(&s, "902", "hook-secret-0123456789").await?;
    let (st, first) = s.push("902", "r-1", "hook-secret-0123456789").await?;
    assert_eq!(st, StatusCode::OK);
    let original = first["message_id"].as_str().unwrap().to_owned();

    let path = format!("/workspaces/{ws}/inbound-messages/{original}/replay");
    let stranger = testkit::token(&s.keys, Role::Admin, Some(uuid::Uuid::now_v7()))?;
    assert_eq!(
        s.call(&path, &stranger, json!({})).await?.0,
        StatusCode::NOT_FOUND
    );
    let (st, replay) = s.call(&path, &s.admin, json!({})).await?;
    assert_eq!(st, StatusCode::ACCEPTED, "{replay}");
    assert_eq!(replay["replay_of"], original.as_str());

    // A vendor redelivery is still a duplicate; the replay is a second message on the subject.
    let (_, dup) = s.push("902", "r-1", "hook-secret-0123456789").await?;
    assert_eq!(dup["status"], "duplicate");
    let got = testkit::read_stream(
        &env.bus,
        Stream::WebhooksGithub,
        "github.acme.api.push",
        2,
        Duration::from_secs(5),
    )
    .await?;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].payload, got[1].payload);
    assert_eq!(
        got[1].msg_id.as_deref(),
        Some(format!("replay:{}", replay["message_id"].as_str().unwrap()).as_str())
    );
    ingress.stop().await?;
    api.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_disables_endpoints_and_deliveries_get_410() -> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (ws, conn, _ep) = github_endpoint(&s, "903", "hook-secret-0123456789").await?;
    assert_eq!(
        s.push("903", "x-1", "hook-secret-0123456789").await?.0,
        StatusCode::OK
    );
    let (st, _) = s
        .call(
            &format!("/workspaces/{ws}/connections/{conn}/disconnect"),
            &s.admin,
            json!({}),
        )
        .await?;
    assert_eq!(st, StatusCode::OK);
    let (st, body) = s.push("903", "x-2", "hook-secret-0123456789").await?;
    assert_eq!(st, StatusCode::GONE, "{body}");
    // History stays.
    let (st, _) = s.push("903", "x-1", "hook-secret-0123456789").await?;
    assert_eq!(st, StatusCode::GONE);
    use sea_orm::ConnectionTrait as _;
    let row = env
        .db
        .db
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT count(*) FILTER (WHERE status = 'disabled'), (SELECT count(*) FROM inbound_message) FROM inbound_endpoint",
        ))
        .await?
        .unwrap();
    assert_eq!(
        (
            row.try_get_by_index::<i64>(0)?,
            row.try_get_by_index::<i64>(1)?
        ),
        (1, 1)
    );
    ingress.stop().await?;
    api.stop().await
}

/// A workspace (created by the operator) with an active connection of `kind`.
async fn workspace_with(s: &Stack, name: &str, kind: &str) -> Result<(String, String)> {
    let (st, ws) = s
        .call("/workspaces", &s.admin, json!({ "name": name }))
        .await?;
    assert_eq!(st, StatusCode::CREATED, "{ws}");
    let ws = ws["id"].as_str().unwrap().to_owned();
    let (st, conn) = s
        .call(
            &format!("/workspaces/{ws}/connections"),
            &s.admin,
            json!({ "kind": kind }),
        )
        .await?;
    assert_eq!(st, StatusCode::CREATED, "{conn}");
    let conn = conn["id"].as_str().unwrap().to_owned();
    let (st, body) = s
        .call(
            &format!("/workspaces/{ws}/connections/{conn}/activate"),
            &s.admin,
            json!({}),
        )
        .await?;
    assert_eq!(st, StatusCode::OK, "{body}");
    Ok((ws, conn))
}

/// Endpoints of one workspace, by a direct read.
async fn endpoints_of(
    env: &TestEnv,
    ws: &str,
) -> Result<Vec<store::entity::inbound_endpoint::Model>> {
    use sea_orm::{ColumnTrait as _, EntityTrait as _, QueryFilter as _};
    use store::entity::inbound_endpoint;
    Ok(inbound_endpoint::Entity::find()
        .filter(inbound_endpoint::Column::WorkspaceId.eq(uuid::Uuid::parse_str(ws)?))
        .all(&env.db.db)
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_claim_of_a_provider_ref_is_409_and_the_first_endpoint_still_receives()
-> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (ws_a, _conn_a, ep_a) = github_endpoint(&s, "1001", "a-secret-0123456789").await?;
    let (ws_b, conn_b) = workspace_with(&s, "bravo", "github").await?;
    let (ws_a_slack, conn_a_slack) = workspace_with(&s, "alpha-slack", "slack").await?;
    let (ws_b_slack_ws, conn_b_slack) = workspace_with(&s, "bravo-slack", "slack").await?;
    let (st, body) = s
        .call(
            &format!("/workspaces/{ws_a_slack}/connections/{conn_a_slack}/endpoints"),
            &s.admin,
            json!({"registration": "operator", "provider_ref": "T0ALPHA"}),
        )
        .await?;
    assert_eq!(st, StatusCode::CREATED, "{body}");

    // B's connection claims A's GitHub hook id and A's Slack team id.
    let (st, body) = s
        .call(
            &format!("/workspaces/{ws_b}/connections/{conn_b}/endpoints"),
            &s.admin,
            json!({"registration": "operator", "provider_ref": "1001", "secret": "b-secret-0123456789"}),
        )
        .await?;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "provider_ref_taken", "{body}");
    let b_endpoints = endpoints_of(&env, &ws_b).await?;
    assert!(b_endpoints.is_empty(), "nothing created: {b_endpoints:?}");
    let slack_path = format!("/workspaces/{ws_b_slack_ws}/connections/{conn_b_slack}/endpoints");
    let (st, body) = s
        .call(
            &slack_path,
            &s.admin,
            json!({"registration": "operator", "provider_ref": "T0ALPHA"}),
        )
        .await?;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");

    // A's hook still delivers into A.
    let (st, got) = s.push("1001", "a-1", "a-secret-0123456789").await?;
    assert_eq!(st, StatusCode::OK, "{got}");
    let (st, _) = s.push("1001", "b-1", "b-secret-0123456789").await?;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "B's secret verifies nothing");
    let a = endpoints_of(&env, &ws_a).await?;
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].id.to_string(), ep_a);
    assert_eq!(
        a[0].status,
        store::entity::inbound_endpoint::EndpointStatus::Active
    );

    // Two claims racing for a fresh id: the index lets exactly one through.
    let claim = |ws: String, conn: String| {
        let s = &s;
        async move {
            s.call(
                &format!("/workspaces/{ws}/connections/{conn}/endpoints"),
                &s.admin,
                json!({"registration": "operator", "provider_ref": "2002"}),
            )
            .await
        }
    };
    let (ws_c, conn_c) = workspace_with(&s, "charlie", "github").await?;
    let (x, y) = tokio::join!(
        claim(ws_b.clone(), conn_b.clone()),
        claim(ws_c.clone(), conn_c.clone())
    );
    let mut statuses = [x?.0, y?.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::CREATED, StatusCode::CONFLICT]);
    ingress.stop().await?;
    api.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_token_cannot_create_endpoints_that_shared_routes_select() -> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (_ws_a, _conn_a, _ep_a) = github_endpoint(&s, "3003", "a-secret-0123456789").await?;
    let (ws_b, conn_b) = workspace_with(&s, "bravo", "github").await?;
    let (ws_b2, conn_b_gitlab) = workspace_with(&s, "bravo-gitlab", "gitlab").await?;
    let b_admin = testkit::token(&s.keys, Role::Admin, Some(uuid::Uuid::parse_str(&ws_b)?))?;
    let b2_admin = testkit::token(&s.keys, Role::Admin, Some(uuid::Uuid::parse_str(&ws_b2)?))?;
    let path = format!("/workspaces/{ws_b}/connections/{conn_b}/endpoints");
    for body in [
        json!({"registration": "app"}),
        json!({"registration": "app", "address": true}),
        json!({"registration": "operator", "provider_ref": "3003"}),
        json!({"registration": "operator", "provider_ref": "4004", "address": true}),
    ] {
        let (st, answer) = s.call(&path, &b_admin, body.clone()).await?;
        assert_eq!(st, StatusCode::FORBIDDEN, "{body}: {answer}");
    }
    // An operator-created GitLab hook is found by its token on the shared route.
    let (st, answer) = s
        .call(
            &format!("/workspaces/{ws_b2}/connections/{conn_b_gitlab}/endpoints"),
            &b2_admin,
            json!({"registration": "operator", "secret": "gl-secret-0123456789"}),
        )
        .await?;
    assert_eq!(st, StatusCode::FORBIDDEN, "{answer}");
    assert!(
        endpoints_of(&env, &ws_b).await?.is_empty(),
        "nothing created"
    );
    assert!(
        endpoints_of(&env, &ws_b2).await?.is_empty(),
        "nothing created"
    );

    // A's hook still delivers to A; B may still make an endpoint of its own address.
    assert_eq!(
        s.push("3003", "a-1", "a-secret-0123456789").await?.0,
        StatusCode::OK
    );
    let (st, own) = s
        .call(
            &path,
            &b_admin,
            json!({"registration": "operator", "address": true}),
        )
        .await?;
    assert_eq!(st, StatusCode::CREATED, "{own}");
    assert!(own["address_token"].is_string());
    ingress.stop().await?;
    api.stop().await
}

/// Who knows a secret decides what its deliveries prove. An endpoint a workspace token made (or
/// re-keyed) is tenant-keyed: what it receives is a claim. A workspace token cannot re-key an
/// endpoint only an operator could create, and an operator's rotation leaves the secret it
/// replaced tenant-keyed for as long as it still verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_a_tenant_chose_or_saw_sign_claims_and_only_operators_rekey_shared_endpoints()
-> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (ws, conn, shared) = github_endpoint(&s, "5005", "operator-secret-0123456789").await?;
    let admin = testkit::token(&s.keys, Role::Admin, Some(uuid::Uuid::parse_str(&ws)?))?;
    let endpoints = format!("/workspaces/{ws}/connections/{conn}/endpoints");
    let (st, own) = s
        .call(
            &endpoints,
            &admin,
            json!({"registration": "operator", "address": true}),
        )
        .await?;
    assert_eq!(st, StatusCode::CREATED, "{own}");
    let own = own["id"].as_str().unwrap().to_owned();
    let keyed = |id: String| {
        let env = &env;
        let ws = ws.clone();
        async move {
            let row = endpoints_of(env, &ws)
                .await?
                .into_iter()
                .find(|e| e.id.to_string() == id)
                .expect("endpoint exists");
            anyhow::Ok((row.tenant_keyed, row.previous_tenant_keyed))
        }
    };
    assert_eq!(
        keyed(shared.clone()).await?,
        (false, false),
        "the operator's"
    );
    assert_eq!(keyed(own.clone()).await?, (true, true), "the workspace's");

    // The workspace cannot re-key the shared endpoint; nothing changes.
    let rotate = |id: &str| format!("{endpoints}/{id}/rotate-secret");
    let (st, answer) = s.call(&rotate(&shared), &admin, json!({})).await?;
    assert_eq!(st, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(keyed(shared.clone()).await?, (false, false));
    assert_eq!(
        s.push("5005", "still-the-operators", "operator-secret-0123456789")
            .await?
            .0,
        StatusCode::OK
    );

    // An operator re-keys the workspace's endpoint: the new secret is the operator's, the old one
    // stays a claim while it verifies.
    let (st, answer) = s.call(&rotate(&own), &s.admin, json!({})).await?;
    assert_eq!(st, StatusCode::OK, "{answer}");
    assert_eq!(keyed(own.clone()).await?, (false, true));
    // The workspace re-keys it back: claims again.
    let (st, answer) = s.call(&rotate(&own), &admin, json!({})).await?;
    assert_eq!(st, StatusCode::OK, "{answer}");
    assert_eq!(keyed(own).await?, (true, false));
    ingress.stop().await?;
    api.stop().await
}

/// Outline subscription ids belong to their workspace: B cannot take the id A's subscription
/// carries first and so refuse A its endpoint (each workspace binds its own), an Outline endpoint
/// must name its subscription, and one workspace cannot bind one id twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outline_subscription_ids_are_required_and_scoped_to_the_workspace() -> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (ws_a, conn_a) = workspace_with(&s, "alpha", "outline").await?;
    let (ws_b, conn_b) = workspace_with(&s, "bravo", "outline").await?;
    let a_admin = testkit::token(&s.keys, Role::Admin, Some(uuid::Uuid::parse_str(&ws_a)?))?;
    let b_admin = testkit::token(&s.keys, Role::Admin, Some(uuid::Uuid::parse_str(&ws_b)?))?;
    let a_path = format!("/workspaces/{ws_a}/connections/{conn_a}/endpoints");
    let b_path = format!("/workspaces/{ws_b}/connections/{conn_b}/endpoints");
    let bound = json!({"registration": "registered", "provider_ref": "sub-x", "address": true});
    // B claims the id first; A still binds its own subscription.
    let (st, body) = s.call(&b_path, &b_admin, bound.clone()).await?;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let (st, body) = s.call(&a_path, &a_admin, bound.clone()).await?;
    assert_eq!(
        st,
        StatusCode::CREATED,
        "A was refused the id B took first: {body}"
    );
    // Within one workspace the id is bound once.
    let (st, body) = s.call(&a_path, &a_admin, bound).await?;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "provider_ref_taken");
    // An endpoint bound to no subscription would take every subscription's deliveries.
    let before = endpoints_of(&env, &ws_a).await?.len();
    let (st, body) = s
        .call(
            &a_path,
            &a_admin,
            json!({"registration": "registered", "address": true}),
        )
        .await?;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"], "provider_ref_required");
    assert_eq!(endpoints_of(&env, &ws_a).await?.len(), before);
    ingress.stop().await?;
    api.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_into_a_closed_connection_is_409_and_publishes_nothing() -> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (ws, conn, _ep) = github_endpoint(&s, "5005", "hook-secret-0123456789").await?;
    let (st, first) = s.push("5005", "r-1", "hook-secret-0123456789").await?;
    assert_eq!(st, StatusCode::OK, "{first}");
    let original = first["message_id"].as_str().unwrap().to_owned();
    let (st, _) = s
        .call(
            &format!("/workspaces/{ws}/connections/{conn}/disconnect"),
            &s.admin,
            json!({}),
        )
        .await?;
    assert_eq!(st, StatusCode::OK);

    let (st, body) = s
        .call(
            &format!("/workspaces/{ws}/inbound-messages/{original}/replay"),
            &s.admin,
            json!({}),
        )
        .await?;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "replay_closed", "{body}");

    // A dead message of a paused connection is not replayed either.
    let (ws_p, conn_p) = workspace_with(&s, "paused", "github").await?;
    let (st, _) = s
        .call(
            &format!("/workspaces/{ws_p}/connections/{conn_p}/pause"),
            &s.admin,
            json!({}),
        )
        .await?;
    assert_eq!(st, StatusCode::OK);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(store::headers::CONNECTION, conn_p.as_str());
    headers.insert(store::headers::WORKSPACE, ws_p.as_str());
    let dead = bus::dead::record(
        &env.db.db,
        bus::dead::DeadMessage {
            stream: "WEBHOOKS_GITHUB".into(),
            consumer: "github-sync".into(),
            subject: "github.acme.api.push".into(),
            headers: Some(headers),
            payload: b"{}".to_vec(),
            reason: "handler failed".into(),
            attempts: 5,
        },
    )
    .await?;
    let (st, body) = s
        .call(
            &format!("/dead-messages/{dead}/replay"),
            &s.admin,
            json!({}),
        )
        .await?;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");

    // Nothing was written or published: one message (the original), no webhook in the outbox
    // (the lifecycle announcements of the disconnect and the pause may still wait there).
    use sea_orm::ConnectionTrait as _;
    let row = env
        .db
        .db
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT (SELECT count(*) FROM inbound_message), (SELECT count(*) FROM outbox WHERE subject LIKE 'github.%'), \
             (SELECT sum(replay_count)::bigint FROM dead_message)",
        ))
        .await?
        .unwrap();
    assert_eq!(
        (
            row.try_get_by_index::<i64>(0)?,
            row.try_get_by_index::<i64>(1)?,
            row.try_get_by_index::<i64>(2)?
        ),
        (1, 0, 0)
    );
    let got = testkit::read_stream(
        &env.bus,
        Stream::WebhooksGithub,
        "github.acme.api.push",
        2,
        Duration::from_secs(2),
    )
    .await?;
    assert_eq!(got.len(), 1, "only the original delivery is on the stream");
    ingress.stop().await?;
    api.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_rotation_window_is_422_and_changes_nothing() -> Result<()> {
    let env = TestEnv::new().await?;
    let (s, api, ingress) = start(&env).await?;
    let (ws, conn, ep) = github_endpoint(&s, "6006", "old-secret-0123456789").await?;
    let path = format!("/workspaces/{ws}/connections/{conn}/endpoints/{ep}/rotate-secret");
    let before = endpoints_of(&env, &ws).await?;
    for window in [7 * 24 * 3600 + 1, u64::MAX] {
        let (st, body) = s
            .call(
                &path,
                &s.admin,
                json!({"secret": "new-secret-0123456789", "window_secs": window}),
            )
            .await?;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(body["error"], "rotation_window_too_long", "{body}");
    }
    // A body over the size limit answers the API's JSON error, as the contract documents.
    let huge = json!({ "secret": "x".repeat(2 * 1024 * 1024) });
    let (st, body) = s.call(&path, &s.admin, huge).await?;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error"], "payload_too_large", "{body}");
    assert_eq!(
        endpoints_of(&env, &ws).await?,
        before,
        "the endpoint is unchanged"
    );
    assert_eq!(
        s.push("6006", "o-1", "old-secret-0123456789").await?.0,
        StatusCode::OK
    );
    assert_eq!(
        s.push("6006", "n-1", "new-secret-0123456789").await?.0,
        StatusCode::UNAUTHORIZED
    );

    // The store adds a window checked: past the calendar is an error, not a panic.
    let key = store::secrets::Keyring::parse(&testkit::secret_key())?;
    let txn = sea_orm::TransactionTrait::begin(&env.db.db).await?;
    let res = store::inbound::rotate_secret(
        &txn,
        &key,
        before[0].clone(),
        b"new-secret-0123456789",
        Duration::from_secs(u64::MAX),
        false,
    )
    .await;
    assert!(res.is_err(), "a window past the calendar is refused");
    drop(txn);

    // So is a configured window above the cap: control-api does not start.
    let mut config = testkit::control_api_config(env.common_args());
    config.rotation_window_secs = u64::MAX;
    let started = testkit::spawn(config).await;
    assert!(
        started.is_err(),
        "an oversize FORGESYNC_WEBHOOK_ROTATION_WINDOW stops startup"
    );
    ingress.stop().await?;
    api.stop().await
}
