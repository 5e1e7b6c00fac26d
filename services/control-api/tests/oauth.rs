//! Slack authorization over HTTP end to end (real service, Postgres and NATS, the Slack
//! simulator): the state is bound before the redirect and spent once; unknown, reused, expired
//! and stale states store nothing and send nothing to Slack; another workspace cannot start an
//! authorization of a connection it does not hold; an exchange whose answer was lost is kept
//! for an admin and never becomes the connection's credential; Slack's refusal leaves nothing.

use anyhow::{Context as _, Result};
use control_api::Role;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use testkit::TestEnv;
use uuid::Uuid;
use vendor_sim::slack::{Fault, Model, SlackFault, SlackSim, methods};

const CALLBACK: &str = "https://forgesync.example/oauth/callback";

struct Fixture {
    _env: TestEnv,
    _api: testkit::Running,
    sim: SlackSim,
    team: String,
    http: reqwest::Client,
    base: String,
    keys: control_api::Keys,
    operator: String,
    pool: PgPool,
}

struct Tenant {
    ws: Uuid,
    conn: Uuid,
    admin: String,
}

impl Fixture {
    async fn start() -> Result<Fixture> {
        runtime::install_crypto_provider();
        let mut model = Model::default();
        let team = model.add_team("acme");
        let sim = SlackSim::start(model).await?;
        let env = TestEnv::new().await?;
        let mut config = testkit::control_api_config(env.common_args());
        config.slack_client_id = Some("sim-client-id".into());
        config.slack_client_secret = Some("sim-client-secret".into());
        config.slack_authorize_url = format!("{}/oauth/v2/authorize", sim.base_url());
        config.slack_api_url = sim.api_url();
        config.oauth_callback_url = Some(CALLBACK.into());
        let api = testkit::spawn(config).await?;
        let keys = testkit::control_api_keys()?;
        Ok(Fixture {
            pool: env.db.db.get_postgres_connection_pool().clone(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
            base: api.url(),
            operator: testkit::token(&keys, Role::Admin, None)?,
            keys,
            sim,
            team,
            _env: env,
            _api: api,
        })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
    ) -> Result<(StatusCode, Value)> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let res = req.send().await?;
        Ok((res.status(), res.json().await.unwrap_or(Value::Null)))
    }

    /// A workspace with a pending Slack connection of `team` (no token yet).
    async fn tenant(&self, team: &str) -> Result<Tenant> {
        let ws = self
            .http
            .post(format!("{}/workspaces", self.base))
            .bearer_auth(&self.operator)
            .json(&json!({"name": "w"}))
            .send()
            .await?
            .json::<Value>()
            .await?;
        let ws: Uuid = ws["id"].as_str().context("workspace id")?.parse()?;
        let conn = self
            .http
            .post(format!("{}/workspaces/{ws}/connections", self.base))
            .bearer_auth(&self.operator)
            .json(&json!({"kind": "slack", "settings": {"team_id": team}}))
            .send()
            .await?;
        assert_eq!(conn.status(), StatusCode::CREATED);
        let conn: Uuid = conn.json::<Value>().await?["id"]
            .as_str()
            .context("connection id")?
            .parse()?;
        Ok(Tenant {
            ws,
            conn,
            admin: testkit::token(&self.keys, Role::Admin, Some(ws))?,
        })
    }

    /// Starts the authorization as the tenant's admin; the authorization page's URL.
    async fn authorize(&self, t: &Tenant) -> Result<String> {
        let (status, body) = self
            .call(
                Method::POST,
                &format!("/workspaces/{}/connections/{}/authorize", t.ws, t.conn),
                Some(&t.admin),
            )
            .await?;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        Ok(body["authorize_url"]
            .as_str()
            .context("authorize_url")?
            .to_owned())
    }

    /// The person approves at Slack: the callback's query string Slack redirects to.
    async fn approve(&self, authorize_url: &str) -> Result<String> {
        let res = self.http.get(authorize_url).send().await?;
        assert_eq!(res.status(), StatusCode::FOUND);
        let location = res
            .headers()
            .get("location")
            .context("location")?
            .to_str()?
            .to_owned();
        let query = location
            .strip_prefix(&format!("{CALLBACK}?"))
            .context("Slack sends the browser to the registered callback")?;
        Ok(query.to_owned())
    }

    async fn callback(&self, query: &str) -> Result<(StatusCode, Value)> {
        self.call(Method::GET, &format!("/oauth/callback?{query}"), None)
            .await
    }

    async fn count(&self, sql: &'static str, conn: Uuid) -> Result<i64> {
        Ok(sqlx::query_scalar(sql)
            .bind(conn)
            .fetch_one(&self.pool)
            .await?)
    }

    async fn secrets(&self, conn: Uuid) -> Result<i64> {
        self.count(
            "SELECT count(*) FROM connection_secret WHERE connection_id = $1",
            conn,
        )
        .await
    }

    async fn exchanges(&self, conn: Uuid) -> Result<Vec<(String, Option<String>)>> {
        Ok(
            sqlx::query_as("SELECT status, team_id FROM slack_exchange WHERE connection_id = $1")
                .bind(conn)
                .fetch_all(&self.pool)
                .await?,
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorization_stores_the_checked_token_once_and_its_state_is_spent() -> Result<()> {
    let f = Fixture::start().await?;
    let t = f.tenant(&f.team).await?;
    let url = f.authorize(&t).await?;
    assert!(url.contains("client_id=sim-client-id"), "{url}");
    let query = f.approve(&url).await?;

    let (status, body) = f.callback(&query).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["team_id"], f.team.as_str());
    let bot_user = f.sim.model(|m| m.team(&f.team).unwrap().bot_user.clone());
    assert_eq!(body["bot_user_id"], bot_user.as_str());
    assert_eq!(f.sim.calls(methods::OAUTH_V2_ACCESS), 1);
    assert_eq!(
        f.sim.calls(methods::AUTH_TEST),
        1,
        "the token is checked before it is kept"
    );

    // The token Slack issued is the connection's credential, kept for its removal, and the
    // exchange is gone with its adoption.
    let keyring = store::secrets::Keyring::parse(&testkit::secret_key())?;
    let token = store::secrets::get(&f._env.db.db, &keyring, t.conn, "token")
        .await?
        .context("the token is stored")?;
    let who = slack_client::SlackClient::new(
        &slack_client::Settings {
            base_url: f.sim.api_url(),
            ..Default::default()
        },
        std::str::from_utf8(&token)?,
    )?
    .auth_test()
    .await?;
    assert_eq!(who.team_id, f.team);
    let kept: Vec<(String, String)> = sqlx::query_as(
        "SELECT resource_kind, state FROM provider_registration WHERE connection_id = $1",
    )
    .bind(t.conn)
    .fetch_all(&f.pool)
    .await?;
    assert_eq!(kept, [("slack_bot_token".to_owned(), "adopted".to_owned())]);
    assert!(f.exchanges(t.conn).await?.is_empty());

    // The same callback again (a reload, a replay): refused, nothing sent, nothing changed.
    let (status, body) = f.callback(&query).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "oauth_state_reused");
    assert_eq!(f.sim.calls(methods::OAUTH_V2_ACCESS), 1);
    assert_eq!(f.secrets(t.conn).await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_expired_and_stale_states_store_nothing_and_send_nothing() -> Result<()> {
    let f = Fixture::start().await?;
    let t = f.tenant(&f.team).await?;

    // A state we never handed out (a forged callback), and none at all.
    let (status, body) = f.callback("code=sim-code-forged&state=forged").await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("oauth_state_unknown"))
    );
    let (status, _) = f.callback("code=sim-code-forged").await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Expired.
    let query = f.approve(&f.authorize(&t).await?).await?;
    sqlx::query("UPDATE oauth_state SET expires_at = now() - interval '1 second'")
        .execute(&f.pool)
        .await?;
    let (status, body) = f.callback(&query).await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("oauth_state_expired"))
    );

    // Stale: the connection moved on (activated) after the redirect.
    let query = f.approve(&f.authorize(&t).await?).await?;
    let (status, body) = f
        .call(
            Method::POST,
            &format!("/workspaces/{}/connections/{}/activate", t.ws, t.conn),
            Some(&t.admin),
        )
        .await?;
    assert!(status.is_success(), "{body}");
    let (status, body) = f.callback(&query).await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("oauth_state_stale"))
    );

    assert_eq!(
        f.sim.calls(methods::OAUTH_V2_ACCESS),
        0,
        "no code was ever sent"
    );
    assert_eq!(f.secrets(t.conn).await?, 0);
    assert!(f.exchanges(t.conn).await?.is_empty());
    let used: i64 =
        sqlx::query_scalar("SELECT count(*) FROM oauth_state WHERE used_at IS NOT NULL")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(used, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_workspace_cannot_authorize_a_connection_it_does_not_hold() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant(&f.team).await?;
    let b = f.tenant(&f.team).await?;
    let path = format!("/workspaces/{}/connections/{}/authorize", a.ws, a.conn);
    let (status, _) = f.call(Method::POST, &path, Some(&b.admin)).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // B's admin naming its own workspace with A's connection.
    let (status, _) = f
        .call(
            Method::POST,
            &format!("/workspaces/{}/connections/{}/authorize", b.ws, a.conn),
            Some(&b.admin),
        )
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let viewer = testkit::token(&f.keys, Role::Viewer, Some(a.ws))?;
    let (status, _) = f.call(Method::POST, &path, Some(&viewer)).await?;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = f.call(Method::POST, &path, None).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let states: i64 = sqlx::query_scalar("SELECT count(*) FROM oauth_state")
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(states, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_exchange_is_kept_for_an_admin_and_a_refused_one_leaves_nothing() -> Result<()> {
    let f = Fixture::start().await?;
    let t = f.tenant(&f.team).await?;

    // Slack issued a token but its answer was lost: the outcome is unknown.
    f.sim.inject(Fault::nth(
        methods::OAUTH_V2_ACCESS,
        1,
        SlackFault::Lost(504),
    ));
    let query = f.approve(&f.authorize(&t).await?).await?;
    let (status, body) = f.callback(&query).await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_GATEWAY, Some("oauth_uncertain"))
    );
    assert_eq!(f.exchanges(t.conn).await?, [("uncertain".to_owned(), None)]);
    assert_eq!(
        f.secrets(t.conn).await?,
        0,
        "an unknown outcome is never the credential"
    );

    // Listed for an instance admin, never for a workspace's.
    let (status, listed) = f
        .call(Method::GET, "/slack-exchanges", Some(&f.operator))
        .await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["connection_id"], t.conn.to_string());
    let (status, _) = f
        .call(Method::GET, "/slack-exchanges", Some(&t.admin))
        .await?;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Slack refuses a code for certain: nothing is kept.
    f.sim.clear_faults();
    f.sim.inject(Fault::nth(
        methods::OAUTH_V2_ACCESS,
        1,
        SlackFault::error("invalid_code"),
    ));
    let query = f.approve(&f.authorize(&t).await?).await?;
    let (status, body) = f.callback(&query).await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("oauth_refused"))
    );
    assert_eq!(
        f.exchanges(t.conn).await?.len(),
        1,
        "only the lost one stays"
    );
    assert_eq!(f.secrets(t.conn).await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_of_another_team_is_never_the_connections_credential() -> Result<()> {
    let f = Fixture::start().await?;
    // The connection names another team than the one the person installs in.
    let t = f.tenant("T0OTHERTEAM").await?;
    let query = f.approve(&f.authorize(&t).await?).await?;
    let (status, body) = f.callback(&query).await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("team_mismatch"))
    );
    assert_eq!(f.secrets(t.conn).await?, 0);
    assert_eq!(
        f.exchanges(t.conn).await?,
        [("exchanged".to_owned(), Some(f.team.clone()))],
        "the issued token's exchange is kept, with what Slack returned"
    );
    Ok(())
}
