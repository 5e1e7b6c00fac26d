//! Provider repairs over HTTP (real service, Postgres and JetStream), written as attacks: only an
//! operator token lists, shows, confirms or releases a fence; a confirmation settles only an
//! uncertain attempt; every refusal (403, 404, 409, 400/422) leaves every row as it was; a
//! disconnected connection's new token goes into its repairs only, never back into
//! `connection_secret`, and makes a fence waiting for a credential due at once.

use std::time::Duration;

use anyhow::Result;
use control_api::Role;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use store::secrets::Keyring;
use testkit::TestEnv;
use uuid::Uuid;

const GROUP: &str = "7";

struct Fixture {
    env: TestEnv,
    _api: testkit::Running,
    http: reqwest::Client,
    base: String,
    keys: control_api::Keys,
    /// An operator admin token.
    operator: String,
    pool: PgPool,
    ring: Keyring,
    instance: Uuid,
}

/// A workspace with one GitLab connection holding one group hook, and its own admin token.
struct Tenant {
    ws: Uuid,
    conn: Uuid,
    token: String,
}

impl Fixture {
    async fn start() -> Result<Fixture> {
        let env = TestEnv::new().await?;
        let (api, keys) = (
            testkit::spawn(testkit::control_api_config(env.common_args())).await?,
            testkit::control_api_keys()?,
        );
        let pool = env.db.db.get_postgres_connection_pool().clone();
        let instance = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)",
        )
        .bind(instance)
        .bind(format!("https://gitlab-{instance}.example"))
        .execute(&pool)
        .await?;
        Ok(Fixture {
            http: reqwest::Client::new(),
            base: api.url(),
            operator: testkit::token(&keys, Role::Admin, None)?,
            keys,
            pool,
            ring: Keyring::parse(&testkit::secret_key())?,
            instance,
            env,
            _api: api,
        })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, Value)> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let res = req.send().await?;
        Ok((res.status(), res.json().await.unwrap_or(Value::Null)))
    }

    async fn get(&self, path: &str) -> Result<Value> {
        let (status, body) = self.call(Method::GET, path, &self.operator, None).await?;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        Ok(body)
    }

    /// An active GitLab connection with its token and one adopted group hook `hook`.
    async fn tenant(&self, hook: &str) -> Result<Tenant> {
        let (ws, conn) = testkit::active_connection(
            &self.env.db.db,
            "gitlab",
            self.instance,
            json!({ "group": GROUP }),
            Some("glpat-old"),
        )
        .await?;
        sqlx::query(
            "INSERT INTO provider_registration (id, connection_id, provider_instance_id,
                 resource_kind, target, marker, url_hash, connection_version,
                 lifecycle_generation, state, vendor_id)
             VALUES ($1, $2, $3, 'gitlab_group_hook', $4, $1::text, 'hash', 1, 0, 'adopted', $5)",
        )
        .bind(Uuid::now_v7())
        .bind(conn)
        .bind(self.instance)
        .bind(GROUP)
        .bind(hook)
        .execute(&self.pool)
        .await?;
        Ok(Tenant {
            ws,
            conn,
            token: testkit::token(&self.keys, Role::Admin, Some(ws))?,
        })
    }

    /// Disconnects `t` over the API (which captures its hook) and returns the hook's fence.
    async fn disconnect(&self, t: &Tenant) -> Result<Uuid> {
        let path = format!("/workspaces/{}/connections/{}/disconnect", t.ws, t.conn);
        let (status, body) = self.call(Method::POST, &path, &self.operator, None).await?;
        assert_eq!(status, StatusCode::OK, "{body}");
        Ok(sqlx::query_scalar(
            "SELECT repair_id FROM connection_provider_repair WHERE connection_id = $1",
        )
        .bind(t.conn)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Puts fence `id` where the dispatcher would have left it.
    async fn set_fence(
        &self,
        id: Uuid,
        status: &str,
        attempts: i64,
        uncertain: &[i64],
    ) -> Result<()> {
        sqlx::query(
            "UPDATE provider_resource_repair
                SET status = $2, attempts = $3, uncertain = $4, failures = 3,
                    next_attempt_at = CASE WHEN $2 = 'awaiting_admin' THEN NULL
                                           ELSE now() + interval '1 hour' END
              WHERE id = $1",
        )
        .bind(id)
        .bind(status)
        .bind(attempts)
        .bind(uncertain)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn scalar<T>(&self, sql: &'static str, id: Uuid) -> Result<T>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        Ok(sqlx::query_scalar(sql)
            .bind(id)
            .fetch_one(&self.pool)
            .await?)
    }

    /// Every row a refused request could have touched, as text.
    async fn rows(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for sql in [
            "SELECT coalesce(string_agg(f::text, '|' ORDER BY id), '') FROM provider_resource_repair f",
            "SELECT coalesce(string_agg(p::text, '|' ORDER BY id), '') FROM connection_provider_repair p",
            "SELECT coalesce(string_agg(a::text, '|' ORDER BY id), '') FROM provider_repair_audit a",
            "SELECT coalesce(string_agg(s::text, '|' ORDER BY connection_id, name), '') FROM connection_secret s",
            "SELECT coalesce(string_agg(r.state, '|' ORDER BY id), '') FROM provider_registration r",
            "SELECT coalesce(string_agg(c::text, '|' ORDER BY id), '') FROM connection c",
            "SELECT count(*)::text FROM connection_audit",
        ] {
            out.push(sqlx::query_scalar(sql).fetch_one(&self.pool).await?);
        }
        Ok(out)
    }

    async fn secrets(&self, conn: Uuid) -> Result<i64> {
        self.scalar(
            "SELECT count(*) FROM connection_secret WHERE connection_id = $1",
            conn,
        )
        .await
    }
}

fn confirm(id: Uuid) -> String {
    format!("/provider-repairs/{id}/confirm")
}

fn release(id: Uuid) -> String {
    format!("/provider-repairs/{id}/release")
}

fn secrets_path(t: &Tenant) -> String {
    format!("/workspaces/{}/connections/{}/secrets", t.ws, t.conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_and_viewer_tokens_cannot_list_see_or_settle_repairs() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("11").await?;
    let fence = f.disconnect(&a).await?;
    f.set_fence(fence, "awaiting_admin", 1, &[0]).await?;
    let before = f.rows().await?;
    let workspace_viewer = testkit::token(&f.keys, Role::Viewer, Some(a.ws))?;
    let operator_viewer = testkit::token(&f.keys, Role::Viewer, None)?;
    let settle = json!({ "attempt": 0, "reason": "gone by hand" });
    for token in [&a.token, &workspace_viewer] {
        for (method, path, body) in [
            (Method::GET, "/provider-repairs".to_owned(), None),
            (Method::GET, format!("/provider-repairs/{fence}"), None),
            (Method::POST, confirm(fence), Some(settle.clone())),
            (Method::POST, release(fence), Some(settle.clone())),
        ] {
            let (status, body) = f.call(method, &path, token, body).await?;
            assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        }
    }
    // An operator's viewer token reads, but does not settle.
    f.get(&format!("/provider-repairs/{fence}")).await?;
    let (status, _) = f
        .call(Method::GET, "/provider-repairs", &operator_viewer, None)
        .await?;
    assert_eq!(status, StatusCode::OK);
    for path in [confirm(fence), release(fence)] {
        let (status, body) = f
            .call(Method::POST, &path, &operator_viewer, Some(settle.clone()))
            .await?;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
    }
    assert_eq!(f.rows().await?, before, "a refused request changed nothing");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_settlements_change_nothing() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("11").await?;
    let fence = f.disconnect(&a).await?;
    f.set_fence(fence, "awaiting_admin", 2, &[1]).await?;
    let before = f.rows().await?;
    let unknown = Uuid::now_v7();
    let ok = json!({ "attempt": 1, "reason": "checked by hand" });
    for (path, body, want, code) in [
        (
            confirm(unknown),
            ok.clone(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            release(unknown),
            json!({ "reason": "x" }),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        // Attempt 0 was certain (refused, or receipted): only an uncertain one is confirmed.
        (
            confirm(fence),
            json!({ "attempt": 0, "reason": "x" }),
            StatusCode::CONFLICT,
            "attempt_not_uncertain",
        ),
        (
            confirm(fence),
            json!({ "attempt": 7, "reason": "x" }),
            StatusCode::CONFLICT,
            "attempt_not_uncertain",
        ),
        (
            confirm(fence),
            json!({ "attempt": "one", "reason": "x" }),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            confirm(fence),
            json!({ "attempt": -1, "reason": "x" }),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            confirm(fence),
            json!({ "attempt": 1 }),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            release(fence),
            json!({ "reason": "x", "force": true }),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            confirm(fence),
            json!({ "attempt": 1, "reason": "  " }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "reason_required",
        ),
        (
            release(fence),
            json!({ "reason": "" }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "reason_required",
        ),
    ] {
        let (status, answer) = f
            .call(Method::POST, &path, &f.operator, Some(body.clone()))
            .await?;
        assert_eq!(status, want, "{path} {body}: {answer}");
        assert_eq!(answer["error"], code, "{path} {body}: {answer}");
        assert!(!answer["message"].as_str().unwrap_or("").is_empty());
    }
    let (status, _) = f
        .call(
            Method::GET,
            &format!("/provider-repairs/{unknown}"),
            &f.operator,
            None,
        )
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        f.rows().await?,
        before,
        "a refused settlement changed nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmation_resolves_only_uncertain_attempts_and_clears_the_credential() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("11").await?;
    let fence = f.disconnect(&a).await?;
    f.set_fence(fence, "awaiting_admin", 2, &[0, 1]).await?;
    let captured: String = f
        .scalar(
            "SELECT state FROM provider_registration WHERE connection_id = $1",
            a.conn,
        )
        .await?;

    let (status, body) = f
        .call(
            Method::POST,
            &confirm(fence),
            &f.operator,
            Some(json!({ "attempt": 0, "reason": "hook gone, checked in GitLab" })),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Attempt 1 may still land: the fence stands, with its credential and registration.
    assert_eq!(body["status"], "awaiting_admin");
    assert_eq!(body["uncertain_attempts"], json!([1]));
    assert_eq!(body["references"][0]["holds_credential"], true);
    let registration: String = f
        .scalar(
            "SELECT state FROM provider_registration WHERE connection_id = $1",
            a.conn,
        )
        .await?;
    assert_eq!(registration, captured);

    let again = f.rows().await?;
    let (status, body) = f
        .call(
            Method::POST,
            &confirm(fence),
            &f.operator,
            Some(json!({ "attempt": 0, "reason": "twice" })),
        )
        .await?;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "attempt_not_uncertain");
    assert_eq!(f.rows().await?, again);

    let (status, body) = f
        .call(
            Method::POST,
            &confirm(fence),
            &f.operator,
            Some(json!({ "attempt": 1, "reason": "hook gone, checked in GitLab" })),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "resolved");
    assert_eq!(body["uncertain_attempts"], json!([]));
    assert!(body["settled_at"].is_string());
    assert_eq!(body["next_attempt_at"], Value::Null);
    assert_eq!(body["references"][0]["connection_id"], a.conn.to_string());
    assert_eq!(body["references"][0]["workspace_id"], a.ws.to_string());
    assert_eq!(body["references"][0]["holds_credential"], false);
    let audit = body["audit"].as_array().unwrap();
    assert_eq!(audit.len(), 2, "{body}");
    assert_eq!(audit[1]["action"], "confirm");
    assert_eq!(audit[1]["attempt"], 1);
    assert_eq!(audit[1]["reason"], "hook gone, checked in GitLab");
    assert_eq!(audit[1]["before_status"], "awaiting_admin");
    assert_eq!(audit[1]["after_status"], "resolved");
    assert!(!audit[1]["actor"].as_str().unwrap().is_empty());
    // A resolved fence: the credential is gone from the reference, the registration removed.
    let sealed: i64 = f
        .scalar(
            "SELECT count(*) FROM connection_provider_repair
              WHERE repair_id = $1 AND credential_ciphertext IS NOT NULL",
            fence,
        )
        .await?;
    assert_eq!(sealed, 0);
    let registration: String = f
        .scalar(
            "SELECT state FROM provider_registration WHERE connection_id = $1",
            a.conn,
        )
        .await?;
    assert_eq!(registration, "removed");

    // Settled: neither a confirmation nor a release moves it again.
    let settled = f.rows().await?;
    for (path, body) in [
        (confirm(fence), json!({ "attempt": 1, "reason": "again" })),
        (release(fence), json!({ "reason": "again" })),
    ] {
        let (status, answer) = f.call(Method::POST, &path, &f.operator, Some(body)).await?;
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
        assert_eq!(answer["error"], "repair_settled");
    }
    assert_eq!(f.rows().await?, settled);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_gives_up_an_awaiting_admin_fence_without_claiming_removal() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("11").await?;
    let fence = f.disconnect(&a).await?;
    f.set_fence(fence, "awaiting_admin", 1, &[0]).await?;
    let captured: String = f
        .scalar(
            "SELECT state FROM provider_registration WHERE connection_id = $1",
            a.conn,
        )
        .await?;
    let (status, body) = f
        .call(
            Method::POST,
            &release(fence),
            &f.operator,
            Some(json!({ "reason": "customer removed the group" })),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "released");
    assert_eq!(body["references"][0]["holds_credential"], false);
    assert_eq!(body["audit"][0]["action"], "release");
    assert_eq!(body["audit"][0]["attempt"], Value::Null);
    // Released is not removed: the registration keeps its state.
    let registration: String = f
        .scalar(
            "SELECT state FROM provider_registration WHERE connection_id = $1",
            a.conn,
        )
        .await?;
    assert_eq!(registration, captured);
    assert_ne!(registration, "removed");
    let epoch: i64 = f
        .scalar(
            "SELECT epoch FROM provider_resource_repair WHERE id = $1",
            fence,
        )
        .await?;
    assert!(epoch > 0, "older inspections are fenced out");
    let released = f.rows().await?;
    let (status, answer) = f
        .call(
            Method::POST,
            &release(fence),
            &f.operator,
            Some(json!({ "reason": "again" })),
        )
        .await?;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["error"], "repair_settled");
    assert_eq!(f.rows().await?, released);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_filters_by_status_provider_and_connection_and_pages_by_keyset() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("11").await?;
    let b = f.tenant("12").await?;
    let fa = f.disconnect(&a).await?;
    let fb = f.disconnect(&b).await?;
    f.set_fence(fa, "awaiting_admin", 1, &[0]).await?;

    let all = f.get("/provider-repairs").await?;
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0]["id"], fa.to_string());
    assert_eq!(all[0]["provider"], "gitlab");
    assert_eq!(all[0]["kind"], "gitlab_group_hook");
    assert_eq!(all[0]["vendor_id"], "11");
    assert_eq!(all[0]["status"], "awaiting_admin");
    assert_eq!(all[0]["attempts"], 1);
    assert_eq!(all[0]["uncertain_attempts"], json!([0]));
    assert_eq!(all[1]["status"], "pending");

    let ids = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        ids(f.get("/provider-repairs?status=awaiting_admin").await?),
        [fa.to_string()]
    );
    assert_eq!(
        ids(f
            .get(&format!("/provider-repairs?connection_id={}", b.conn))
            .await?),
        [fb.to_string()]
    );
    assert!(ids(f.get("/provider-repairs?provider=slack").await?).is_empty());
    assert_eq!(
        ids(f.get("/provider-repairs?limit=1").await?),
        [fa.to_string()]
    );
    assert_eq!(
        ids(f
            .get(&format!("/provider-repairs?limit=1&after={fa}"))
            .await?),
        [fb.to_string()]
    );
    for bad in ["status=gone", "provider=bitbucket", "connection_id=nope"] {
        let (status, body) = f
            .call(
                Method::GET,
                &format!("/provider-repairs?{bad}"),
                &f.operator,
                None,
            )
            .await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }

    let shown = f.get(&format!("/provider-repairs/{fb}")).await?;
    assert_eq!(shown["target"], GROUP);
    assert_eq!(shown["captured_with_receipt"], true);
    assert_eq!(shown["settings_url"], Value::Null, "only GitHub has one");
    assert_eq!(shown["references"][0]["workspace_id"], b.ws.to_string());
    assert_eq!(shown["references"][0]["transition"], "disconnected");
    assert_eq!(shown["audit"], json!([]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnected_connections_token_goes_only_into_its_repairs_and_wakes_them() -> Result<()>
{
    let f = Fixture::start().await?;
    let a = f.tenant("11").await?;
    let fence = f.disconnect(&a).await?;
    assert_eq!(
        f.secrets(a.conn).await?,
        0,
        "disconnection deleted the secrets"
    );
    f.set_fence(fence, "needs_authorization", 1, &[]).await?;

    let (status, body) = f
        .call(
            Method::PUT,
            &secrets_path(&a),
            &a.token,
            Some(json!({ "secrets": { "token": "glpat-new" } })),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "disconnected");
    // Erasure's deletion holds: the credential lives only in the repair's reference.
    assert_eq!(f.secrets(a.conn).await?, 0);
    let sealed = store::repair::credential(&f.pool, fence)
        .await?
        .expect("the reference holds the credential");
    assert_eq!(sealed.open(&f.ring)?, b"glpat-new");
    // Due at once, without waiting for the backoff.
    let status: String = f
        .scalar(
            "SELECT status FROM provider_resource_repair WHERE id = $1",
            fence,
        )
        .await?;
    assert_eq!(status, "pending");
    let due: bool = f
        .scalar(
            "SELECT next_attempt_at <= now() FROM provider_resource_repair WHERE id = $1",
            fence,
        )
        .await?;
    assert!(due);
    let audited: i64 = f
        .scalar(
            "SELECT count(*) FROM connection_audit
              WHERE connection_id = $1 AND action = 'repair_credential'",
            a.conn,
        )
        .await?;
    assert_eq!(audited, 1);
    // provider-repair is woken on a subject it consumes.
    let subject = lifecycle_core::subject::lifecycle(
        "gitlab",
        &a.conn.to_string(),
        store::repair_admin::CREDENTIAL_WAKE,
    );
    let woken = testkit::read_stream(
        &f.env.bus,
        bus::Stream::Lifecycle,
        &subject,
        1,
        Duration::from_secs(10),
    )
    .await?;
    assert_eq!(woken.len(), 1, "{subject}");
    assert_eq!(woken[0].json()["connection_id"], a.conn.to_string());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_waits_with_202_while_an_attempts_outcome_is_unrecorded() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("11").await?;
    let fence = f.disconnect(&a).await?;
    // A permit was taken and nothing recorded since.
    f.set_fence(fence, "pending", 1, &[0]).await?;
    let (status, body) = f
        .call(
            Method::PUT,
            &secrets_path(&a),
            &a.token,
            Some(json!({ "secrets": { "token": "glpat-new" } })),
        )
        .await?;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(f.secrets(a.conn).await?, 0);
    let sealed = store::repair::credential(&f.pool, fence).await?.unwrap();
    assert_eq!(sealed.open(&f.ring)?, b"glpat-new");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_change_nothing() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("11").await?;
    let b = f.tenant("12").await?;
    let fence = f.disconnect(&a).await?;
    f.set_fence(fence, "needs_authorization", 1, &[]).await?;
    let before = f.rows().await?;
    let token = json!({ "secrets": { "token": "glpat-evil" } });
    // Another workspace's admin cannot reach the connection: it does not exist for them.
    let (status, body) = f
        .call(
            Method::PUT,
            &secrets_path(&a),
            &b.token,
            Some(token.clone()),
        )
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let viewer = testkit::token(&f.keys, Role::Viewer, Some(a.ws))?;
    let (status, _) = f
        .call(Method::PUT, &secrets_path(&a), &viewer, Some(token.clone()))
        .await?;
    assert_eq!(status, StatusCode::FORBIDDEN);
    for (body, code) in [
        (json!({ "secrets": { "token": "" } }), "empty_secret"),
        (json!({ "secrets": { "token": "   " } }), "empty_secret"),
        (
            json!({ "secrets": { "password": "x" } }),
            "unknown_secret_name",
        ),
        (
            json!({ "secrets": { "token": "x", "other": "y" } }),
            "unknown_secret_name",
        ),
    ] {
        let (status, answer) = f
            .call(Method::PUT, &secrets_path(&a), &a.token, Some(body.clone()))
            .await?;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert_eq!(answer["error"], code, "{body}: {answer}");
    }
    assert_eq!(
        f.rows().await?,
        before,
        "a refused credential changed nothing"
    );

    // Once nothing of it is unsettled, a disconnected connection takes no credential at all.
    let (status, _) = f
        .call(
            Method::POST,
            &release(fence),
            &f.operator,
            Some(json!({ "reason": "given up" })),
        )
        .await?;
    assert_eq!(status, StatusCode::OK);
    let released = f.rows().await?;
    let (status, answer) = f
        .call(Method::PUT, &secrets_path(&a), &a.token, Some(token))
        .await?;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["error"], "connection_disconnected");
    assert_eq!(f.rows().await?, released);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_connections_new_token_reaches_its_repairs_too() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("11").await?;
    let path = format!("/workspaces/{}/connections/{}/suspend", a.ws, a.conn);
    let (status, body) = f.call(Method::POST, &path, &f.operator, None).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    let fence: Uuid = f
        .scalar(
            "SELECT repair_id FROM connection_provider_repair WHERE connection_id = $1",
            a.conn,
        )
        .await?;
    f.set_fence(fence, "needs_authorization", 1, &[]).await?;
    let (status, body) = f
        .call(
            Method::PUT,
            &secrets_path(&a),
            &a.token,
            Some(json!({ "secrets": { "token": "glpat-new" } })),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A suspended connection keeps its secrets; the repair's reference gets the same token.
    let own = store::secrets::get(&f.env.db.db, &f.ring, a.conn, "token").await?;
    assert_eq!(own.as_deref(), Some(&b"glpat-new"[..]));
    let sealed = store::repair::credential(&f.pool, fence).await?.unwrap();
    assert_eq!(sealed.open(&f.ring)?, b"glpat-new");
    let due: bool = f
        .scalar(
            "SELECT status = 'pending' AND next_attempt_at <= now()
               FROM provider_resource_repair WHERE id = $1",
            fence,
        )
        .await?;
    assert!(due, "the fence waiting for a credential is due at once");
    let subject = lifecycle_core::subject::lifecycle(
        "gitlab",
        &a.conn.to_string(),
        store::repair_admin::CREDENTIAL_WAKE,
    );
    let woken = testkit::read_stream(
        &f.env.bus,
        bus::Stream::Lifecycle,
        &subject,
        1,
        Duration::from_secs(10),
    )
    .await?;
    assert_eq!(woken.len(), 1, "{subject}");
    Ok(())
}
