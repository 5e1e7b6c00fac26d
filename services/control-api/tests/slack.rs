//! Slack channel routes end to end (real service, Postgres and NATS): a workspace sees only its
//! own channels and their kept messages; a channel command is checked against the channel's
//! status and committed with one audit row and one `lifecycle.slack.<connectionId>.channel`
//! message, and a refused one (another workspace's channel, a wrong state) writes nothing.

use std::time::Duration;

use anyhow::Result;
use bus::Stream;
use control_api::Role;
use lifecycle_core::slack::ChannelCommand;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use slack_mirror::command::ChannelCommandMessage;
use sqlx::PgPool;
use testkit::TestEnv;
use uuid::Uuid;

struct Fixture {
    env: TestEnv,
    _api: testkit::Running,
    http: reqwest::Client,
    base: String,
    keys: control_api::Keys,
    admin: String,
    pool: PgPool,
}

/// A workspace with one Slack connection and an admin token scoped to it.
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
        Ok(Fixture {
            http: reqwest::Client::new(),
            base: api.url(),
            admin: testkit::token(&keys, Role::Admin, None)?,
            keys,
            pool,
            env,
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

    async fn operator(&self, method: Method, path: &str, body: Value) -> Result<Value> {
        let res = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.admin)
            .json(&body)
            .send()
            .await?;
        assert!(res.status().is_success(), "{path}: {}", res.status());
        Ok(res.json().await?)
    }

    async fn tenant(&self, name: &str) -> Result<Tenant> {
        let ws = self
            .operator(Method::POST, "/workspaces", json!({ "name": name }))
            .await?;
        let ws: Uuid = ws["id"].as_str().unwrap().parse()?;
        let conn = self.slack_connection(ws).await?;
        Ok(Tenant {
            ws,
            conn,
            token: testkit::token(&self.keys, Role::Admin, Some(ws))?,
        })
    }

    async fn slack_connection(&self, ws: Uuid) -> Result<Uuid> {
        let conn = self
            .operator(
                Method::POST,
                &format!("/workspaces/{ws}/connections"),
                json!({ "kind": "slack", "settings": { "team_id": "T1" },
                        "secrets": { "token": "xoxb-test" } }),
            )
            .await?;
        Ok(conn["id"].as_str().unwrap().parse()?)
    }

    /// A channel as slack-ingest writes it.
    async fn channel(
        &self,
        t: &Tenant,
        slack_id: &str,
        status: &str,
        consent_ts: Option<&str>,
    ) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO slack_channel (id, connection_id, workspace_id, slack_id, name, is_private,
                                        status, reason, consent_ts, dropped)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::numeric, 3)",
        )
        .bind(id)
        .bind(t.conn)
        .bind(t.ws)
        .bind(slack_id)
        .bind(format!("chan-{slack_id}"))
        .bind(slack_id.starts_with('G'))
        .bind(status)
        .bind((status == "paused").then_some("paused by admin"))
        .bind(consent_ts)
        .execute(&self.pool)
        .await?;
        Ok(id)
    }

    /// A kept message as slack-ingest writes it.
    async fn message(&self, channel: Uuid, conn: Uuid, ts: &str, text: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO slack_message (id, channel_id, connection_id, ts, user_id, text)
             VALUES ($1, $2, $3, $4::numeric, 'U1', $5)",
        )
        .bind(Uuid::now_v7())
        .bind(channel)
        .bind(conn)
        .bind(ts)
        .bind(text)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn status_of(&self, channel: Uuid) -> Result<String> {
        let (status,): (String,) = sqlx::query_as("SELECT status FROM slack_channel WHERE id = $1")
            .bind(channel)
            .fetch_one(&self.pool)
            .await?;
        Ok(status)
    }

    async fn count(&self, sql: &'static str) -> Result<i64> {
        let (n,): (i64,) = sqlx::query_as(sql).fetch_one(&self.pool).await?;
        Ok(n)
    }

    /// Channel commands that went through the outbox to the stream, once the relay emptied it.
    async fn commands(&self, filter: &str) -> Result<Vec<testkit::StoredMessage>> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.count("SELECT count(*) FROM outbox").await? > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the relay did not empty the outbox"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        testkit::read_stream(&self.env.bus, Stream::Lifecycle, filter, 0, Duration::ZERO).await
    }

    /// What a refused command must not have written: channel commands published and audit rows.
    async fn footprint(&self) -> Result<(usize, i64)> {
        Ok((
            self.commands("lifecycle.slack.*.channel").await?.len(),
            self.count("SELECT count(*) FROM connection_audit").await?,
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_shows_only_the_callers_channels() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("a").await?;
    let b = f.tenant("b").await?;
    let general = f
        .channel(&a, "C1", "active", Some("1700000000.000100"))
        .await?;
    let secret = f.channel(&a, "G2", "paused", Some("1700000000")).await?;
    let theirs = f.channel(&b, "C9", "none", None).await?;

    let (s, list) = f
        .call(
            Method::GET,
            &format!("/workspaces/{}/slack/channels", a.ws),
            Some(&a.token),
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{list}");
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [general.to_string(), secret.to_string()]);
    let c = &list[0];
    assert_eq!(c["connection_id"], a.conn.to_string());
    assert_eq!(c["slack_id"], "C1");
    assert_eq!(c["name"], "chan-C1");
    assert_eq!(c["is_private"], false);
    assert_eq!(c["status"], "active");
    assert_eq!(c["reason"], Value::Null);
    assert_eq!(c["consent_ts"], "1700000000.000100");
    assert!(
        time::OffsetDateTime::parse(
            c["status_at"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339
        )
        .is_ok(),
        "{c}"
    );
    assert_eq!(c["last_replay_at"], Value::Null);
    assert_eq!(c["dropped"], 3);
    assert_eq!(list[1]["status"], "paused");
    assert_eq!(list[1]["reason"], "paused by admin");
    assert_eq!(list[1]["is_private"], true);
    assert_eq!(list[1]["consent_ts"], "1700000000.000000");

    // B's token sees B's channel only, and A's workspace not at all.
    let (s, list) = f
        .call(
            Method::GET,
            &format!("/workspaces/{}/slack/channels", b.ws),
            Some(&b.token),
        )
        .await?;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], theirs.to_string());
    let (s, _) = f
        .call(
            Method::GET,
            &format!("/workspaces/{}/slack/channels", a.ws),
            Some(&b.token),
        )
        .await?;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // No token, no answer.
    let (s, body) = f
        .call(
            Method::GET,
            &format!("/workspaces/{}/slack/channels", a.ws),
            None,
        )
        .await?;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "unauthorized");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_page_oldest_first_after_a_ts() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("a").await?;
    let channel = f.channel(&a, "C1", "active", Some("100")).await?;
    let other = f.channel(&a, "C2", "active", Some("100")).await?;
    // Inserted out of order: the page orders by ts.
    for ts in ["100.000300", "100.000100", "101", "100.000200", "102.5"] {
        f.message(channel, a.conn, ts, &format!("at {ts}")).await?;
    }
    f.message(other, a.conn, "100.000150", "elsewhere").await?;
    sqlx::query(
        "UPDATE slack_message SET thread_ts = 100.000100, subtype = 'thread_broadcast',
                edited_ts = 100.5,
                files = '[{\"id\": \"F1\", \"name\": \"a.png\", \"mimetype\": \"image/png\"}]'
          WHERE channel_id = $1 AND ts = 100.000200",
    )
    .bind(channel)
    .execute(&f.pool)
    .await?;
    sqlx::query(
        "UPDATE slack_message SET text = NULL, deleted_at = now()
          WHERE channel_id = $1 AND ts = 101",
    )
    .bind(channel)
    .execute(&f.pool)
    .await?;
    let path = |query: &str| {
        format!(
            "/workspaces/{}/slack/channels/{channel}/messages{query}",
            a.ws
        )
    };
    let ts = |page: &Value| -> Vec<String> {
        page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["ts"].as_str().unwrap().to_owned())
            .collect()
    };

    // The default page holds them all, so it is the last.
    let (s, page) = f.call(Method::GET, &path(""), Some(&a.token)).await?;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert_eq!(
        ts(&page),
        [
            "100.000100",
            "100.000200",
            "100.000300",
            "101.000000",
            "102.500000"
        ]
    );
    assert_eq!(page["next_after"], Value::Null);
    let reply = &page["messages"][1];
    assert_eq!(reply["thread_ts"], "100.000100");
    assert_eq!(reply["user"], "U1");
    assert_eq!(reply["subtype"], "thread_broadcast");
    assert_eq!(reply["text"], "at 100.000200");
    assert_eq!(
        reply["files"],
        json!([{ "id": "F1", "name": "a.png", "mimetype": "image/png" }])
    );
    assert_eq!(reply["edited_ts"], "100.500000");
    assert_eq!(reply["deleted_at"], Value::Null);
    let deleted = &page["messages"][3];
    assert_eq!(deleted["text"], Value::Null);
    assert_eq!(deleted["files"], json!([]));
    assert!(deleted["deleted_at"].is_string(), "{deleted}");

    // Full pages name where the next one starts; the last one does not.
    let (_, first) = f
        .call(Method::GET, &path("?limit=2"), Some(&a.token))
        .await?;
    assert_eq!(ts(&first), ["100.000100", "100.000200"]);
    assert_eq!(first["next_after"], "100.000200");
    let (_, second) = f
        .call(
            Method::GET,
            &path("?limit=2&after=100.000200"),
            Some(&a.token),
        )
        .await?;
    assert_eq!(ts(&second), ["100.000300", "101.000000"]);
    assert_eq!(second["next_after"], "101.000000");
    let (_, last) = f
        .call(Method::GET, &path("?limit=2&after=101"), Some(&a.token))
        .await?;
    assert_eq!(ts(&last), ["102.500000"]);
    assert_eq!(last["next_after"], Value::Null);
    let (_, empty) = f
        .call(Method::GET, &path("?after=102.5"), Some(&a.token))
        .await?;
    assert_eq!(ts(&empty), Vec::<String>::new());
    assert_eq!(empty["next_after"], Value::Null);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_after_or_limit_is_400_and_no_token_is_401() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("a").await?;
    let channel = f.channel(&a, "C1", "active", Some("100")).await?;
    let path = format!("/workspaces/{}/slack/channels/{channel}/messages", a.ws);
    for query in [
        "after=abc",
        "after=1.1234567",
        "after=-1",
        "after=1.",
        "after=.5",
        "after=1e5",
        "after=",
        "limit=0",
        "limit=501",
        "limit=-1",
        "limit=ten",
    ] {
        let (s, body) = f
            .call(Method::GET, &format!("{path}?{query}"), Some(&a.token))
            .await?;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["error"], "bad_request", "{query}: {body}");
    }
    for query in ["limit=1", "limit=500", "after=0", "after=1700000000.123456"] {
        let (s, body) = f
            .call(Method::GET, &format!("{path}?{query}"), Some(&a.token))
            .await?;
        assert_eq!(s, StatusCode::OK, "{query}: {body}");
    }

    let before = f.footprint().await?;
    let base = format!("/workspaces/{}/slack/channels/{channel}", a.ws);
    for (method, path) in [
        (Method::GET, format!("{base}/messages")),
        (Method::POST, format!("{base}/consent")),
        (Method::POST, format!("{base}/pause")),
        (Method::POST, format!("{base}/resume")),
        (Method::DELETE, format!("{base}/consent")),
    ] {
        let (s, body) = f.call(method.clone(), &path, None).await?;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {path}: {body}");
    }
    // Commands need the admin role.
    let viewer = testkit::token(&f.keys, Role::Viewer, Some(a.ws))?;
    let (s, body) = f
        .call(Method::POST, &format!("{base}/pause"), Some(&viewer))
        .await?;
    assert_eq!(s, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(f.footprint().await?, before);
    assert_eq!(f.status_of(channel).await?, "active");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_workspaces_channel_is_not_found_on_every_route_and_writes_nothing() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("a").await?;
    let b = f.tenant("b").await?;
    // States from which every command would apply, were the caller A.
    let paused = f.channel(&a, "C1", "paused", Some("100")).await?;
    let active = f.channel(&a, "C2", "active", Some("100")).await?;
    let none = f.channel(&a, "C3", "none", None).await?;
    f.message(active, a.conn, "100.5", "private to A").await?;
    let before = f.footprint().await?;

    // A's channel id under A's workspace (B's token does not reach it), under B's workspace
    // (no such channel there), and an id that exists nowhere, answer the same.
    let (_, expected) = f
        .call(
            Method::GET,
            &format!(
                "/workspaces/{}/slack/channels/{}/messages",
                a.ws,
                Uuid::now_v7()
            ),
            Some(&a.token),
        )
        .await?;
    assert_eq!(expected["error"], "not_found", "{expected}");
    for ws in [a.ws, b.ws] {
        for (method, channel, action) in [
            (Method::GET, active, "messages"),
            (Method::POST, none, "consent"),
            (Method::POST, active, "pause"),
            (Method::POST, paused, "resume"),
            (Method::DELETE, active, "consent"),
        ] {
            let path = format!("/workspaces/{ws}/slack/channels/{channel}/{action}");
            let (s, body) = f.call(method.clone(), &path, Some(&b.token)).await?;
            assert_eq!(s, StatusCode::NOT_FOUND, "{method} {path}: {body}");
            assert_eq!(body, expected, "{method} {path}");
        }
    }
    assert_eq!(f.footprint().await?, before, "nothing enqueued or audited");
    for (channel, status) in [(paused, "paused"), (active, "active"), (none, "none")] {
        assert_eq!(f.status_of(channel).await?, status);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_from_the_wrong_state_is_409_and_writes_nothing() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("a").await?;
    let none = f.channel(&a, "C1", "none", None).await?;
    let active = f.channel(&a, "C2", "active", Some("100")).await?;
    let before = f.footprint().await?;
    for (method, channel, action, message) in [
        (
            Method::POST,
            none,
            "pause",
            "cannot pause a channel that is none",
        ),
        (
            Method::POST,
            active,
            "consent",
            "cannot consent a channel that is active",
        ),
        (
            Method::POST,
            active,
            "resume",
            "cannot resume a channel that is active",
        ),
        (
            Method::DELETE,
            none,
            "consent",
            "cannot withdraw a channel that is none",
        ),
    ] {
        let path = format!("/workspaces/{}/slack/channels/{channel}/{action}", a.ws);
        let (s, body) = f.call(method.clone(), &path, Some(&a.token)).await?;
        assert_eq!(s, StatusCode::CONFLICT, "{method} {path}: {body}");
        assert_eq!(body["error"], "wrong_channel_state");
        assert_eq!(body["message"], message);
    }
    assert_eq!(f.footprint().await?, before);

    // A disconnected connection's channels take no command.
    let gone = f.slack_connection(a.ws).await?;
    f.operator(
        Method::POST,
        &format!("/workspaces/{}/connections/{gone}/disconnect", a.ws),
        json!({}),
    )
    .await?;
    let orphan = f
        .channel(
            &Tenant {
                ws: a.ws,
                conn: gone,
                token: String::new(),
            },
            "C3",
            "none",
            None,
        )
        .await?;
    let before = f.footprint().await?;
    let (s, body) = f
        .call(
            Method::POST,
            &format!("/workspaces/{}/slack/channels/{orphan}/consent", a.ws),
            Some(&a.token),
        )
        .await?;
    assert_eq!(s, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "connection_disconnected");
    assert_eq!(f.footprint().await?, before);
    assert_eq!(f.status_of(none).await?, "none");
    assert_eq!(f.status_of(active).await?, "active");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_command_enqueues_one_message_and_one_audit_row() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("a").await?;
    let none = f.channel(&a, "C1", "none", None).await?;
    let active = f.channel(&a, "C2", "active", Some("100")).await?;
    let (_, audits) = f.footprint().await?;

    let (s, body) = f
        .call(
            Method::POST,
            &format!("/workspaces/{}/slack/channels/{none}/consent", a.ws),
            Some(&a.token),
        )
        .await?;
    assert_eq!(s, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["channel_id"], none.to_string());
    assert_eq!(body["command"], "consent");
    let request_id: Uuid = body["request_id"].as_str().unwrap().parse()?;

    let subject = format!("lifecycle.slack.{}.channel", a.conn);
    let published = f.commands(&subject).await?;
    assert_eq!(published.len(), 1, "one message for one command");
    assert_eq!(published[0].subject, subject);
    assert_eq!(
        published[0].msg_id.as_deref(),
        Some(format!("slack-channel-command:{request_id}").as_str())
    );
    let message: ChannelCommandMessage = serde_json::from_slice(&published[0].payload)?;
    assert_eq!(message.id, request_id);
    assert_eq!(message.connection_id, a.conn);
    assert_eq!(message.workspace_id, a.ws);
    assert_eq!(message.channel_id, none);
    assert_eq!(message.command, ChannelCommand::Consent);
    assert_eq!(message.actor, "admin");
    assert!(
        time::OffsetDateTime::parse(&message.at, &time::format_description::well_known::Rfc3339)
            .is_ok(),
        "{}",
        message.at
    );

    let (s, audit) = f
        .call(
            Method::GET,
            &format!("/workspaces/{}/connections/{}/audit", a.ws, a.conn),
            Some(&a.token),
        )
        .await?;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(f.footprint().await?.1, audits + 1, "one audit row");
    assert_eq!(audit[0]["actor"], "admin");
    assert_eq!(audit[0]["action"], format!("slack_channel_consent:{none}"));
    // slack-ingest carries the command out: control-api leaves the status alone.
    assert_eq!(f.status_of(none).await?, "none");

    // A withdrawal answers with its own command, on the same subject.
    let (s, body) = f
        .call(
            Method::DELETE,
            &format!("/workspaces/{}/slack/channels/{active}/consent", a.ws),
            Some(&a.token),
        )
        .await?;
    assert_eq!(s, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["command"], "withdraw");
    let published = f.commands(&subject).await?;
    assert_eq!(published.len(), 2);
    let message: ChannelCommandMessage = serde_json::from_slice(&published[1].payload)?;
    assert_eq!(message.command, ChannelCommand::Withdraw);
    assert_eq!(message.channel_id, active);
    assert_eq!(f.footprint().await?.1, audits + 2);
    assert_eq!(f.status_of(active).await?, "active");
    Ok(())
}
