//! Reads follow verified access, written as the attacks: workspace A mirrors `victim/repo-0`, a
//! private repository, through its owner's PAT; workspace B's admin tries to reach that mirror by
//! naming it (a PAT that cannot see it), by a legacy name-only monitor row, and by waiting for A's
//! syncs to bind that row. control-api, github-sync, the GitHub simulator over HTTP, real
//! Postgres and NATS.

use anyhow::Result;
use control_api::Role;
use forgesync_e2e::{eventually, send_json};
use serde_json::{Value, json};
use sqlx::PgPool;
use testkit::TestEnv;
use uuid::Uuid;
use vendor_sim::github::{Fault, FaultKind, GithubSim, Scenario, generate, ops};

const VICTIM_TOKEN: &str = "ghp_victim";
const MALLORY_TOKEN: &str = "ghp_mallory";
const PRIVATE: &str = "victim/repo-0";

struct Stack {
    _env: TestEnv,
    sim: GithubSim,
    http: reqwest::Client,
    api: String,
    keys: control_api::Keys,
    admin: String,
    pool: PgPool,
    _control: testkit::Running,
    _sync: testkit::Running,
    /// `victim/repo-0` (private) and `victim/repo-1` (public).
    repositories: Vec<u64>,
}

impl Stack {
    async fn start() -> Result<Stack> {
        let env = TestEnv::new().await?;
        let generated = generate(&Scenario {
            owner: "victim".into(),
            repositories: 2,
            items: 40,
            ..Scenario::default()
        });
        let mut model = generated.model;
        model.set_repository_private(generated.repositories[0], true);
        model.add_user_token(VICTIM_TOKEN, "victim");
        model.add_user_token(MALLORY_TOKEN, "mallory");
        let sim = GithubSim::start(model).await?;
        let (control, keys) = (
            testkit::spawn(testkit::control_api_config(env.common_args())).await?,
            testkit::control_api_keys()?,
        );
        let sync = testkit::spawn(testkit::github_sync_config(env.common_args())).await?;
        Ok(Stack {
            pool: env.db.db.get_postgres_connection_pool().clone(),
            admin: testkit::token(&keys, Role::Admin, None)?,
            keys,
            http: reqwest::Client::new(),
            api: control.url(),
            sim,
            _env: env,
            _control: control,
            _sync: sync,
            repositories: generated.repositories,
        })
    }

    async fn call(&self, post: Option<Value>, path: &str, token: &str) -> Result<(u16, Value)> {
        let url = format!("{}{path}", self.api);
        let req = match post {
            Some(body) => self.http.post(url).json(&body),
            None => self.http.get(url),
        };
        send_json(req.bearer_auth(token)).await
    }

    async fn workspace(&self, name: &str) -> Result<Uuid> {
        let (status, ws) = self
            .call(Some(json!({ "name": name })), "/workspaces", &self.admin)
            .await?;
        assert_eq!(status, 201, "{ws}");
        Ok(ws["id"].as_str().unwrap().parse()?)
    }

    /// Asks `token` (an operator's) to create a PAT connection naming `repositories`.
    async fn create_pat(
        &self,
        ws: Uuid,
        token: &str,
        pat: &str,
        repositories: &[&str],
    ) -> Result<(u16, Value)> {
        self.call(
            Some(json!({
                "kind": "github",
                "server_url": self.sim.base_url(),
                "settings": { "auth": "pat", "repositories": repositories },
                "secrets": { "token": pat },
            })),
            &format!("/workspaces/{ws}/connections"),
            token,
        )
        .await
    }

    /// A PAT connection that must be created, activated, and its INITIAL job finished.
    async fn connected(
        &self,
        ws: Uuid,
        token: &str,
        pat: &str,
        repositories: &[&str],
    ) -> Result<Uuid> {
        let (status, conn) = self.create_pat(ws, token, pat, repositories).await?;
        assert_eq!(status, 201, "{conn}");
        let conn: Uuid = conn["id"].as_str().unwrap().parse()?;
        let (status, body) = self
            .call(
                Some(json!({})),
                &format!("/workspaces/{ws}/connections/{conn}/activate"),
                token,
            )
            .await?;
        assert_eq!(status, 200, "{body}");
        self.finished_jobs(conn, 1).await?;
        Ok(conn)
    }

    async fn reconcile(&self, ws: Uuid, conn: Uuid, finished_before: usize) -> Result<Job> {
        let (status, body) = self
            .call(
                Some(json!({"type": "RECONCILIATION"})),
                &format!("/workspaces/{ws}/connections/{conn}/sync"),
                &self.admin,
            )
            .await?;
        assert_eq!(status, 202, "{body}");
        let jobs = self.finished_jobs(conn, finished_before + 1).await?;
        Ok(jobs.last().cloned().unwrap())
    }

    /// The connection's finished jobs, once there are `count`: (status, error).
    async fn finished_jobs(&self, conn: Uuid, count: usize) -> Result<Vec<Job>> {
        let pool = &self.pool;
        eventually("the connection's job did not finish", || async move {
            let rows: Vec<Job> = sqlx::query_as(
                "SELECT status, error FROM sync_job
                  WHERE connection_id = $1 AND finished_at IS NOT NULL ORDER BY created_at",
            )
            .bind(conn)
            .fetch_all(pool)
            .await?;
            Ok((rows.len() >= count).then_some(rows))
        })
        .await
    }

    /// The monitors of a connection: (owner/name, native id).
    async fn monitors(&self, conn: Uuid) -> Result<Vec<(String, Option<i64>)>> {
        Ok(sqlx::query_as(
            "SELECT owner || '/' || name, native_id FROM repository_to_monitor
              WHERE connection_id = $1 ORDER BY 1",
        )
        .bind(conn)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The mirrored row of a simulator repository.
    async fn mirrored(&self, native_id: u64) -> Result<Uuid> {
        let (id,): (Uuid,) = sqlx::query_as("SELECT id FROM repository WHERE native_id = $1")
            .bind(i64::try_from(native_id)?)
            .fetch_one(&self.pool)
            .await?;
        Ok(id)
    }

    /// Names of the repositories `token` reads in `ws`.
    async fn visible(&self, ws: Uuid, token: &str) -> Result<Vec<String>> {
        let (status, body) = self
            .call(
                None,
                &format!("/workspaces/{ws}/github/repositories"),
                token,
            )
            .await?;
        assert_eq!(status, 200, "{body}");
        Ok(body
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{}/{}",
                    r["owner"].as_str().unwrap(),
                    r["name"].as_str().unwrap()
                )
            })
            .collect())
    }

    /// `GET .../repositories/{repo}/issues`: (status, issue count).
    async fn issues(&self, ws: Uuid, repo: Uuid, token: &str) -> Result<(u16, usize)> {
        let (status, body) = self
            .call(
                None,
                &format!("/workspaces/{ws}/github/repositories/{repo}/issues"),
                token,
            )
            .await?;
        Ok((status, body.as_array().map_or(0, Vec::len)))
    }

    async fn count(&self, sql: &str, id: Uuid) -> Result<i64> {
        let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned()))
            .bind(id)
            .fetch_one(&self.pool)
            .await?;
        Ok(n)
    }
}

type Job = (String, Option<String>);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_workspace_cannot_read_a_private_mirror_by_naming_it() -> Result<()> {
    let s = Stack::start().await?;
    let private_id = i64::try_from(s.repositories[0])?;

    // A: the owner's PAT resolves its private repository; the first sync binds and mirrors it.
    let a = s.workspace("victim-co").await?;
    let a_admin = testkit::token(&s.keys, Role::Admin, Some(a))?;
    let a_conn = s.connected(a, &a_admin, VICTIM_TOKEN, &[PRIVATE]).await?;
    assert_eq!(
        s.monitors(a_conn).await?,
        [(PRIVATE.to_owned(), Some(private_id))]
    );
    let mirror = s.mirrored(s.repositories[0]).await?;
    assert_eq!(s.visible(a, &a_admin).await?, [PRIVATE]);
    let (status, a_issues) = s.issues(a, mirror, &a_admin).await?;
    assert_eq!(status, 200);
    assert!(a_issues > 0, "A's issues are mirrored");

    // B names A's private repository with a token that cannot see it: refused, nothing stored.
    let b = s.workspace("mallory-co").await?;
    let b_admin = testkit::token(&s.keys, Role::Admin, Some(b))?;
    let (status, body) = s
        .create_pat(b, &b_admin, MALLORY_TOKEN, &["victim/repo-1", PRIVATE])
        .await?;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"], "repository_not_accessible", "{body}");
    assert!(body.to_string().contains(PRIVATE), "{body}");
    // A token GitHub refuses, and GitHub failing, are told apart from "not found".
    let (status, body) = s
        .create_pat(b, &b_admin, "ghp_nobody", &["victim/repo-1"])
        .await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (422, Some("credentials_refused")),
        "{body}"
    );
    s.sim.inject(Fault::always(
        ops::REPOSITORY_BY_NAME,
        FaultKind::Status(502),
    ));
    let (status, body) = s
        .create_pat(b, &b_admin, MALLORY_TOKEN, &["victim/repo-1"])
        .await?;
    s.sim.clear_faults();
    assert_eq!(
        (status, body["error"].as_str()),
        (502, Some("github_unavailable")),
        "{body}"
    );
    for table in ["connection", "connection_audit"] {
        let n = s
            .count(
                &format!("SELECT count(*) FROM {table} WHERE workspace_id = $1"),
                b,
            )
            .await?;
        assert_eq!(
            n, 0,
            "nothing of B's refused connections is stored in {table}"
        );
    }

    // B's own connection (a public repository its token sees), plus a legacy name-only monitor
    // of A's repository inserted behind the API's back.
    let b_conn = s
        .connected(b, &b_admin, MALLORY_TOKEN, &["victim/repo-1"])
        .await?;
    sqlx::query(
        "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name)
         VALUES ($1, $2, $3, 'victim', 'repo-0')",
    )
    .bind(Uuid::now_v7())
    .bind(b)
    .bind(b_conn)
    .execute(&s.pool)
    .await?;
    let b_reads_nothing_of_a = |label: &'static str| {
        let s = &s;
        let b_admin = &b_admin;
        async move {
            assert_eq!(s.visible(b, b_admin).await?, ["victim/repo-1"], "{label}");
            assert_eq!(s.issues(b, mirror, b_admin).await?.0, 404, "{label}");
            anyhow::Ok(())
        }
    };
    b_reads_nothing_of_a("a name-only monitor grants nothing").await?;

    // A's sync does not bind B's name to the id (A's proof is not B's).
    let a_job = s.reconcile(a, a_conn, 1).await?;
    assert_eq!(a_job, ("succeeded".to_owned(), None));
    b_reads_nothing_of_a("after A's sync").await?;
    assert!(
        s.monitors(b_conn)
            .await?
            .contains(&(PRIVATE.to_owned(), None)),
        "B's legacy monitor stays unbound"
    );
    // B's own sync cannot resolve it with B's token: a PAT keeps only what it resolves.
    s.reconcile(b, b_conn, 1).await?;
    b_reads_nothing_of_a("after B's sync").await?;
    assert_eq!(
        s.monitors(b_conn).await?,
        [(
            "victim/repo-1".to_owned(),
            Some(i64::try_from(s.repositories[1])?)
        )]
    );

    // A still reads its repository.
    assert_eq!(s.visible(a, &a_admin).await?, [PRIVATE]);
    assert_eq!(s.issues(a, mirror, &a_admin).await?, (200, a_issues));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_name_the_token_no_longer_resolves_loses_its_monitor_and_fails_the_pass() -> Result<()> {
    let s = Stack::start().await?;
    let a = s.workspace("victim-co").await?;
    let a_admin = testkit::token(&s.keys, Role::Admin, Some(a))?;
    let conn = s
        .connected(a, &a_admin, VICTIM_TOKEN, &[PRIVATE, "victim/repo-1"])
        .await?;
    assert_eq!(
        s.monitors(conn).await?,
        [
            (PRIVATE.to_owned(), Some(i64::try_from(s.repositories[0])?)),
            (
                "victim/repo-1".to_owned(),
                Some(i64::try_from(s.repositories[1])?)
            ),
        ]
    );
    // Renamed upstream: the configured name still resolves (GitHub follows it) to the same id.
    s.sim
        .model(|m| m.rename_repository(s.repositories[0], "renamed-0"));
    let job = s.reconcile(a, conn, 1).await?;
    assert_eq!(job, ("succeeded".to_owned(), None));
    assert!(s.monitors(conn).await?.contains(&(
        "victim/renamed-0".to_owned(),
        Some(i64::try_from(s.repositories[0])?)
    )));
    // The token now belongs to someone who cannot see the private repository: the monitor goes,
    // whatever name it carries now.
    s.sim
        .model(|m| m.add_user_token(VICTIM_TOKEN, "someone-else"));
    let job = s.reconcile(a, conn, 2).await?;
    assert_eq!(job.0, "failed");
    assert!(
        job.1.as_deref().is_some_and(|e| e.contains(PRIVATE)),
        "the failure names the repository: {job:?}"
    );
    assert_eq!(
        s.monitors(conn).await?,
        [(
            "victim/repo-1".to_owned(),
            Some(i64::try_from(s.repositories[1])?)
        )]
    );
    assert_eq!(s.visible(a, &a_admin).await?, ["victim/repo-1"]);
    let recorded = s
        .count(
            "SELECT count(*) FROM connection_activity
              WHERE connection_id = $1 AND activity = 'repositories_unresolved'
                AND detail->'repositories' ? 'victim/repo-0'",
            conn,
        )
        .await?;
    assert_eq!(recorded, 1);
    Ok(())
}
