//! A world of two workspaces on one GitHub server (the simulator), each with a PAT connection,
//! webhook endpoint, monitors, repositories mirrored by github-sync's own INITIAL sync, a
//! fixture SCM cascade (issues, some tombstoned, pull requests with check runs, comments,
//! reviews, threads, review comments, item events, activity), webhooks received by the real
//! ingress, item events on the stream and dead messages; real Postgres and NATS throughout.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use bus::contracts::{ItemEvent, ItemRef};
use sea_orm::TransactionTrait as _;
use serde_json::{Value, json};
use sqlx::PgPool;
use testkit::TestEnv;
use uuid::Uuid;
use vendor_sim::github::{GithubSim, Scenario, generate};

/// The text every piece of fixture content carries, so a scan of logs can look for it.
pub const MARKER: &str = "fixture-secret";

/// The personal access token every tenant's connection reads the simulator with.
const PAT: &str = "eraser-world-pat";

/// Fails with the offending lines when `log` (named `source`) carries fixture content: logs hold
/// ids and counts, never titles, bodies or payloads.
pub fn assert_no_content(log: &str, source: &str) {
    let leaked: Vec<&str> = log.lines().filter(|l| l.contains(MARKER)).collect();
    assert!(
        leaked.is_empty(),
        "{source} carries third-party content in {} lines, first: {}",
        leaked.len(),
        leaked.first().copied().unwrap_or_default()
    );
}

/// One workspace with one GitHub connection and its webhook endpoint.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub workspace: Uuid,
    pub connection: Uuid,
    pub hook_id: String,
    pub secret: String,
}

/// A mirrored repository.
#[derive(Debug, Clone, Copy)]
pub struct Repo {
    pub id: Uuid,
    pub native_id: i64,
    pub name: &'static str,
}

pub struct World {
    pub env: TestEnv,
    pub pool: PgPool,
    pub http: reqwest::Client,
    pub api: String,
    pub token: String,
    pub ingress: testkit::Running,
    pub _control: testkit::Running,
    /// The GitHub every connection is for: `acme/repo-0` and `acme/repo-1`, for
    /// [`World::sync`] to mirror.
    pub sim: GithubSim,
    deliveries: std::sync::atomic::AtomicU64,
}

pub async fn count(pool: &PgPool, sql: &str) -> Result<i64> {
    Ok(
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(pool)
            .await?,
    )
}

impl World {
    /// control-api, ingress and the GitHub simulator running against a fresh database and
    /// namespace (the eraser is the test's to start).
    pub async fn start() -> Result<World> {
        let env = TestEnv::new().await?;
        let mut model = generate(&Scenario {
            repositories: 2,
            items: 40,
            ..Scenario::default()
        })
        .model;
        model.add_personal_access_token(PAT);
        let sim = GithubSim::start(model).await?;
        let control = testkit::spawn(testkit::control_api_config(env.common_args())).await?;
        let ingress = testkit::spawn(testkit::ingress_config(env.common_args())).await?;
        let token = testkit::token(
            &testkit::control_api_keys()?,
            control_api::Role::Admin,
            None,
        )?;
        let pool = env.db.db.get_postgres_connection_pool().clone();
        Ok(World {
            api: control.url(),
            env,
            pool,
            http: reqwest::Client::new(),
            token,
            ingress,
            _control: control,
            sim,
            deliveries: Default::default(),
        })
    }

    /// The eraser's config for this world.
    pub fn eraser_config(&self) -> eraser::Config {
        testkit::eraser_config(self.env.common_args())
    }

    /// An eraser over this world's database and streams, for calling its library directly.
    pub fn eraser(&self) -> eraser::Eraser {
        eraser::Eraser {
            db: self.env.db.db.clone(),
            bus: self.env.bus.clone(),
            holders: vendors::holders(),
        }
    }

    pub async fn call(&self, method: reqwest::Method, path: &str) -> Result<(u16, Value)> {
        let res = self
            .http
            .request(method, format!("{}{path}", self.api))
            .bearer_auth(&self.token)
            .send()
            .await?;
        Ok((
            res.status().as_u16(),
            res.json().await.unwrap_or(Value::Null),
        ))
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        let res = self
            .http
            .post(format!("{}{path}", self.api))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await?;
        let status = res.status();
        let body: Value = res.json().await.unwrap_or(Value::Null);
        ensure!(status.is_success(), "POST {path}: {status} {body}");
        Ok(body)
    }

    /// A workspace with an active GitHub PAT connection to the simulator and an operator
    /// endpoint.
    pub async fn tenant(&self, name: &str) -> Result<Tenant> {
        self.tenant_reading(name, &[]).await
    }

    /// Like [`World::tenant`], the connection naming `repositories` (`owner/name`) of the
    /// simulator, which its INITIAL job (see [`World::sync`]) mirrors.
    pub async fn tenant_reading(&self, name: &str, repositories: &[&str]) -> Result<Tenant> {
        let ws = self.post("/workspaces", json!({ "name": name })).await?;
        let workspace: Uuid = ws["id"].as_str().context("workspace id")?.parse()?;
        let conn = self
            .post(
                &format!("/workspaces/{workspace}/connections"),
                json!({
                    "kind": "github",
                    "server_url": self.sim.base_url(),
                    "settings": { "auth": "pat", "repositories": repositories },
                    "secrets": { "token": PAT },
                }),
            )
            .await?;
        let connection: Uuid = conn["id"].as_str().context("connection id")?.parse()?;
        self.post(
            &format!("/workspaces/{workspace}/connections/{connection}/activate"),
            Value::Null,
        )
        .await?;
        let hook_id = format!("hook-{name}");
        let secret = format!("{name}-webhook-secret-0123456789");
        self.post(
            &format!("/workspaces/{workspace}/connections/{connection}/endpoints"),
            json!({ "registration": "operator", "provider_ref": hook_id, "secret": secret }),
        )
        .await?;
        Ok(Tenant {
            workspace,
            connection,
            hook_id,
            secret,
        })
    }

    /// Runs github-sync until every connection's INITIAL job (queued by its activation) finished,
    /// then stops it: the repositories the tenants' connections name are mirrored by the sync's
    /// own writers, and nothing but the test consumes what follows.
    pub async fn sync(&self) -> Result<()> {
        let jobs = count(&self.pool, "SELECT count(*) FROM connection").await?;
        let sync = testkit::spawn(testkit::github_sync_config(self.env.common_args())).await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let finished = count(
                &self.pool,
                "SELECT count(*) FROM sync_job
                  WHERE job_type = 'INITIAL' AND finished_at IS NOT NULL",
            )
            .await?;
            if finished == jobs {
                break;
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "{finished} of {jobs} INITIAL jobs finished"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let failed: Vec<(String, Option<String>)> =
            sqlx::query_as("SELECT status, error FROM sync_job WHERE status <> 'succeeded'")
                .fetch_all(&self.pool)
                .await?;
        ensure!(
            failed.is_empty(),
            "INITIAL jobs did not succeed: {failed:?}"
        );
        sync.stop().await
    }

    /// The repository `acme/<name>` as [`World::sync`] mirrored it.
    pub async fn synced(&self, name: &'static str) -> Result<Repo> {
        let (id, native_id): (Uuid, i64) = sqlx::query_as(
            "SELECT id, native_id FROM repository WHERE owner = 'acme' AND name = $1",
        )
        .bind(name)
        .fetch_one(&self.pool)
        .await
        .with_context(|| format!("acme/{name} is not mirrored"))?;
        Ok(Repo {
            id,
            native_id,
            name,
        })
    }

    /// A repository `acme/<name>` mirrored with `items` issues and as many pull requests, each
    /// with its comments, reviews, threads, review comments and item events; every fifth issue
    /// is tombstoned.
    pub async fn repository(&self, native_id: i64, name: &'static str, items: i64) -> Result<Repo> {
        let id = Uuid::now_v7();
        // The simulator's, the only GitHub server with a URL of its own here.
        let instance: Uuid = sqlx::query_scalar(
            "SELECT id FROM provider_instance WHERE kind = 'github' AND server_url IS NOT NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        let content = format!("{MARKER} {name}");
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO repository (id, provider_instance_id, native_id, node_id, owner, name)
             VALUES ($1, $2, $3, 'R' || $3, 'acme', $4)",
        )
        .bind(id)
        .bind(instance)
        .bind(native_id)
        .bind(name)
        .execute(&mut *tx)
        .await?;
        for sql in [
            // Every fifth issue is a drift tombstone: content cleared, row kept.
            "INSERT INTO issue (id, repository_id, native_id, node_id, number, title, body, state,
                                upstream_created_at, upstream_updated_at, deleted_at)
             SELECT gen_random_uuid(), $1, g, 'I' || g, g,
                    CASE WHEN g % 5 = 0 THEN NULL ELSE $2 || ' issue ' || g END,
                    CASE WHEN g % 5 = 0 THEN NULL ELSE $2 || ' body' END, 'open', now(), now(),
                    CASE WHEN g % 5 = 0 THEN now() END
               FROM generate_series(1, $3::bigint) g",
            "INSERT INTO pull_request (id, repository_id, native_id, node_id, number, title, body,
                                       state, upstream_created_at, upstream_updated_at,
                                       head_sha, head_check_runs, head_check_state)
             SELECT gen_random_uuid(), $1, 100000 + g, 'P' || g, 100000 + g, $2 || ' pr ' || g,
                    $2 || ' pr body', 'open', now(), now(), 'abc',
                    '[{\"name\": \"ci\", \"state\": \"success\"}]'::jsonb, 'success'
               FROM generate_series(1, $3::bigint) g",
            "INSERT INTO comment (id, repository_id, issue_id, native_id, body,
                                  upstream_created_at, upstream_updated_at)
             SELECT gen_random_uuid(), $1, i.id, i.number, $2 || ' comment', now(), now()
               FROM issue i WHERE i.repository_id = $1 AND $3 > 0",
            "INSERT INTO review (id, pull_request_id, native_id, body, state, upstream_updated_at)
             SELECT gen_random_uuid(), p.id, p.number, $2 || ' review', 'APPROVED', now()
               FROM pull_request p WHERE p.repository_id = $1 AND $3 > 0",
            "INSERT INTO review_thread (id, pull_request_id, node_id, path, resolved)
             SELECT gen_random_uuid(), p.id, 'T' || p.number, 'src/lib.rs', false
               FROM pull_request p WHERE p.repository_id = $1 AND $3 > 0",
            "INSERT INTO review_comment (id, pull_request_id, thread_id, native_id, body,
                                         upstream_created_at, upstream_updated_at)
             SELECT gen_random_uuid(), t.pull_request_id, t.id, 1, $2 || ' review comment',
                    now(), now()
               FROM review_thread t JOIN pull_request p ON p.id = t.pull_request_id
              WHERE p.repository_id = $1 AND $3 > 0",
            "INSERT INTO item_event (id, issue_id, name, source_key, version, origin)
             SELECT gen_random_uuid(), i.id, 'scm.issue.opened', 'opened:' || i.number, now(),
                    'webhook'
               FROM issue i WHERE i.repository_id = $1 AND $3 > 0",
            "INSERT INTO integration_event (id, subject_kind, subject_id, item_kind, item_id,
                                            type, source_key)
             SELECT gen_random_uuid(), 'repository', $1, 'issue', i.id, 'scm.issue.opened',
                    'opened:' || i.number
               FROM issue i WHERE i.repository_id = $1 AND $3 > 0",
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .bind(&content)
                .bind(items)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(Repo {
            id,
            native_id,
            name,
        })
    }

    /// `tenant` monitors `repo` (bound to its native id), with its activity entries, a few item
    /// events on the stream, `webhooks` signed deliveries through ingress, and a dead message.
    pub async fn monitor(&self, tenant: &Tenant, repo: Repo, webhooks: usize) -> Result<()> {
        sqlx::query(
            "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name,
                                                native_id)
             VALUES ($1, $2, $3, 'acme', $4, $5)",
        )
        .bind(Uuid::now_v7())
        .bind(tenant.workspace)
        .bind(tenant.connection)
        .bind(repo.name)
        .bind(repo.native_id)
        .execute(&self.pool)
        .await?;
        sqlx::query(
            "INSERT INTO activity_event (id, workspace_id, issue_id, kind, source_key)
             SELECT gen_random_uuid(), $1, i.id, 'scm.issue.opened', 'opened:' || i.number
               FROM issue i WHERE i.repository_id = $2",
        )
        .bind(tenant.workspace)
        .bind(repo.id)
        .execute(&self.pool)
        .await?;
        let issues: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM issue WHERE repository_id = $1 ORDER BY number LIMIT 3",
        )
        .bind(repo.id)
        .fetch_all(&self.pool)
        .await?;
        let txn = self.env.db.db.begin().await?;
        for issue in issues {
            let event = ItemEvent {
                id: Uuid::now_v7(),
                event_type: "scm.issue.opened".into(),
                workspace_id: tenant.workspace,
                item: ItemRef {
                    kind: "issue".into(),
                    id: issue,
                },
                repository_id: repo.id,
                source_key: format!("opened:{issue}"),
                version: "2026-01-01T00:00:00Z".into(),
                occurred_at: None,
                origin: "webhook".into(),
            };
            store::outbox::enqueue_contract(&txn, &event).await?;
        }
        txn.commit().await?;
        for _ in 0..webhooks {
            let status = self.webhook(tenant, repo).await?;
            ensure!(status == 200, "webhook answered {status}");
        }
        sqlx::query(
            "INSERT INTO dead_message (id, stream, consumer, subject, headers, payload, reason,
                                       attempts)
             VALUES ($1, 'WEBHOOKS_GITHUB', 'github-sync-repository-events',
                     'github.acme.' || $2 || '.issues', $3, $4, 'fixture', 10)",
        )
        .bind(Uuid::now_v7())
        .bind(repo.name)
        .bind(json!({
            "Forgesync-Connection": tenant.connection.to_string(),
            "Forgesync-Workspace": tenant.workspace.to_string(),
        }))
        .bind(format!("{MARKER} dead {}", repo.name).into_bytes())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Sends one signed `issues` webhook for `repo` to `tenant`'s endpoint; returns the status.
    pub async fn webhook(&self, tenant: &Tenant, repo: Repo) -> Result<u16> {
        let n = self
            .deliveries
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let body = serde_json::to_vec(&json!({
            "action": "opened",
            "repository": { "id": repo.native_id, "name": repo.name, "owner": { "login": "acme" } },
            "issue": { "number": n, "title": format!("{MARKER} webhook {n}") },
        }))?;
        let signature = ingress::verify::sign_hex(tenant.secret.as_bytes(), &[&body]);
        let res = self
            .http
            .post(format!("{}/webhooks/github", self.ingress.url()))
            .header("X-GitHub-Event", "issues")
            .header("X-GitHub-Delivery", format!("delivery-{n}"))
            .header("X-GitHub-Hook-ID", &tenant.hook_id)
            .header("X-Hub-Signature-256", format!("sha256={signature}"))
            .header("User-Agent", "GitHub-Hookshot/abc")
            .body(body)
            .send()
            .await?;
        Ok(res.status().as_u16())
    }

    /// Waits until the stream ledger records `n` messages (every publish has been acked).
    pub async fn ledgered(&self, n: i64) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let got = count(
                &self.pool,
                "SELECT count(*) FROM stream_message WHERE stream IN ('WEBHOOKS_GITHUB', 'EVENTS')",
            )
            .await?;
            if got >= n {
                return Ok(());
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "the stream ledger holds {got} content messages, not {n}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every erasure of `workspace` is done (at least `records` of them). Stream
    /// deletes are one fsync each on the test server (`sync_interval: always`), hence the wait.
    pub async fn erased(&self, workspace: Uuid, records: usize) -> Result<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        loop {
            let (status, body) = self
                .call(
                    reqwest::Method::GET,
                    &format!("/workspaces/{workspace}/erasures"),
                )
                .await?;
            ensure!(status == 200, "erasures: {status} {body}");
            let list = body.as_array().cloned().unwrap_or_default();
            if list.len() >= records && list.iter().all(|r| r["status"] == "done") {
                return Ok(body);
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "erasures of {workspace} did not finish: {body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The erasure-completeness scan through control-api.
    pub async fn scan(&self, workspace: Uuid) -> Result<Value> {
        let (status, body) = self
            .call(
                reqwest::Method::GET,
                &format!("/workspaces/{workspace}/erasure-scan"),
            )
            .await?;
        ensure!(status == 200, "erasure-scan: {status} {body}");
        Ok(body)
    }

    /// Every row and stream message (subject, headers, payload) of `tenant`, and of `repos`, as
    /// text: equal snapshots mean byte-for-byte equal data.
    pub async fn snapshot(&self, tenant: &Tenant, repos: &[Repo]) -> Result<String> {
        let ids: Vec<Uuid> = repos.iter().map(|r| r.id).collect();
        let mut out = String::new();
        for (table, filter) in [
            ("repository", "id = ANY($3)"),
            ("issue", "repository_id = ANY($3)"),
            ("pull_request", "repository_id = ANY($3)"),
            ("comment", "repository_id = ANY($3)"),
            (
                "review",
                "pull_request_id IN (SELECT id FROM pull_request WHERE repository_id = ANY($3))",
            ),
            (
                "review_thread",
                "pull_request_id IN (SELECT id FROM pull_request WHERE repository_id = ANY($3))",
            ),
            (
                "review_comment",
                "pull_request_id IN (SELECT id FROM pull_request WHERE repository_id = ANY($3))",
            ),
            (
                "item_event",
                "issue_id IN (SELECT id FROM issue WHERE repository_id = ANY($3))",
            ),
            (
                "integration_event",
                "subject_kind = 'repository' AND subject_id = ANY($3)",
            ),
            ("activity_event", "workspace_id = $1"),
            ("repository_to_monitor", "workspace_id = $1"),
            ("inbound_message", "connection_id = $2"),
            ("inbound_message_body", "connection_id = $2"),
            (
                "dead_message",
                "headers ->> 'Forgesync-Connection' = $2::text",
            ),
            ("stream_message", "connection_id = $2 OR workspace_id = $1"),
        ] {
            let rows: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT coalesce(json_agg(t ORDER BY t::text), '[]'::json)::text FROM {table} t \
                 WHERE {filter}"
            )))
            .bind(tenant.workspace)
            .bind(tenant.connection)
            .bind(&ids)
            .fetch_one(&self.pool)
            .await?;
            out.push_str(&format!("{table}: {rows}\n"));
        }
        // The stream copies themselves, by the sequences the ledger names.
        for (stream, sequence) in self.ledgered_of(tenant).await? {
            let m = self
                .stored(&stream, sequence)
                .await?
                .with_context(|| format!("{stream} {sequence} is ledgered but not stored"))?;
            // Headers sorted by name: the map's own order is not stable.
            let mut headers: Vec<String> = m
                .headers
                .iter()
                .map(|(name, values)| {
                    let values: Vec<&str> = values.iter().map(|v| v.as_str()).collect();
                    format!("{name}={values:?}")
                })
                .collect();
            headers.sort();
            out.push_str(&format!(
                "{stream} {sequence} {} [{}]: {}\n",
                m.subject,
                headers.join(" "),
                String::from_utf8_lossy(&m.payload)
            ));
        }
        Ok(out)
    }

    /// The content messages (webhooks, item events) the stream ledger records for `tenant`'s
    /// connection or workspace: (stream, sequence).
    pub async fn ledgered_of(&self, tenant: &Tenant) -> Result<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT stream, sequence FROM stream_message
              WHERE (connection_id = $2 OR workspace_id = $1)
                AND stream IN ('WEBHOOKS_GITHUB', 'EVENTS')
              ORDER BY stream, sequence",
        )
        .bind(tenant.workspace)
        .bind(tenant.connection)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The message the JetStream server holds at `sequence` of `stream`, `None` when it holds
    /// none there (deleted, or never stored).
    pub async fn stored(
        &self,
        stream: &str,
        sequence: i64,
    ) -> Result<Option<async_nats::jetstream::message::StreamMessage>> {
        use async_nats::jetstream::stream::RawMessageErrorKind;
        let handle = self
            .env
            .bus
            .jetstream()
            .get_stream(self.env.bus.namespace().name(stream))
            .await?;
        match handle.get_raw_message(u64::try_from(sequence)?).await {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn exists(&self, repo: Repo) -> Result<bool> {
        Ok(
            sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM repository WHERE id = $1)")
                .bind(repo.id)
                .fetch_one(&self.pool)
                .await?,
        )
    }
}
