//! Reads of the SCM mirror (GitHub repositories; GitLab projects, merge requests, notes and
//! threads): a workspace sees only the repositories its monitors cover, on the provider instance
//! of a connection of the route's kind that authorises reads; real service, Postgres and NATS.

use anyhow::Result;
use control_api::Role;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use testkit::TestEnv;
use uuid::Uuid;

struct Fixture {
    _env: TestEnv,
    _api: testkit::Running,
    http: reqwest::Client,
    base: String,
    keys: control_api::Keys,
    admin: String,
    pool: PgPool,
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
            _env: env,
            _api: api,
        })
    }

    async fn call(&self, post: bool, path: &str, token: &str) -> Result<(StatusCode, Value)> {
        let url = format!("{}{path}", self.base);
        let req = if post {
            self.http.post(url).json(&json!({ "name": "acme" }))
        } else {
            self.http.get(url)
        };
        let res = req.bearer_auth(token).send().await?;
        Ok((res.status(), res.json().await.unwrap_or(Value::Null)))
    }

    /// A workspace with an active GitHub connection on `server_url`: (workspace, connection).
    async fn workspace(&self, server_url: &str) -> Result<(Uuid, Uuid)> {
        self.workspace_of("github", server_url).await
    }

    /// A workspace with an active connection of `kind` on `server_url`: (workspace, connection).
    async fn workspace_of(&self, kind: &str, server_url: &str) -> Result<(Uuid, Uuid)> {
        let (_, ws) = self.call(true, "/workspaces", &self.admin).await?;
        let ws: Uuid = ws["id"].as_str().unwrap().parse()?;
        let res = self
            .http
            .post(format!("{}/workspaces/{ws}/connections", self.base))
            .bearer_auth(&self.admin)
            .json(&json!({ "kind": kind, "server_url": server_url }))
            .send()
            .await?;
        let conn: Value = res.json().await?;
        let conn: Uuid = conn["id"].as_str().unwrap().parse()?;
        self.transition(ws, conn, "activate").await?;
        Ok((ws, conn))
    }

    async fn transition(&self, ws: Uuid, conn: Uuid, name: &str) -> Result<()> {
        let (status, body) = self
            .call(
                true,
                &format!("/workspaces/{ws}/connections/{conn}/{name}"),
                &self.admin,
            )
            .await?;
        assert_eq!(status, StatusCode::OK, "{body}");
        Ok(())
    }

    async fn instance_of(&self, conn: Uuid) -> Result<Uuid> {
        let (id,): (Uuid,) =
            sqlx::query_as("SELECT provider_instance_id FROM connection WHERE id = $1")
                .bind(conn)
                .fetch_one(&self.pool)
                .await?;
        Ok(id)
    }

    /// A mirrored repository, as github-sync writes it.
    async fn repository(&self, instance: Uuid, native_id: i64, name: &str) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO repository (id, provider_instance_id, native_id, node_id, owner, name) VALUES ($1, $2, $3, $4, 'acme', $5)")
            .bind(id).bind(instance).bind(native_id).bind(format!("R_{native_id}")).bind(name)
            .execute(&self.pool).await?;
        Ok(id)
    }

    async fn monitor(
        &self,
        ws: Uuid,
        conn: Uuid,
        name: &str,
        native_id: Option<i64>,
    ) -> Result<()> {
        sqlx::query("INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id) VALUES ($1, $2, $3, 'acme', $4, $5)")
            .bind(Uuid::now_v7()).bind(ws).bind(conn).bind(name).bind(native_id)
            .execute(&self.pool).await?;
        Ok(())
    }

    async fn issue(&self, repository: Uuid, number: i32) -> Result<()> {
        sqlx::query("INSERT INTO issue (id, repository_id, native_id, node_id, number, title, state, upstream_created_at, upstream_updated_at) VALUES ($1, $2, $3, $4, $5, $6, 'open', now(), now())")
            .bind(Uuid::now_v7()).bind(repository).bind(i64::from(number) + 5000).bind(format!("I_{number}")).bind(number).bind(format!("issue {number}"))
            .execute(&self.pool).await?;
        Ok(())
    }

    /// A mirrored merge request (a `pull_request` row), as gitlab-sync writes it.
    async fn merge_request(&self, repository: Uuid, number: i32) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO pull_request (id, repository_id, native_id, node_id, number, title, state, head_ref, base_ref, upstream_created_at, upstream_updated_at) VALUES ($1, $2, $3, $4, $5, $6, 'open', 'feature', 'main', now(), now())")
            .bind(id).bind(repository).bind(i64::from(number) + 9000).bind(format!("gid://gitlab/MergeRequest/{number}")).bind(number).bind(format!("mr {number}"))
            .execute(&self.pool).await?;
        Ok(id)
    }

    /// A note on the merge request itself.
    async fn note(&self, repository: Uuid, mr: Uuid, native_id: i64) -> Result<()> {
        sqlx::query("INSERT INTO comment (id, repository_id, pull_request_id, native_id, author, body, upstream_created_at, upstream_updated_at) VALUES ($1, $2, $3, $4, 'ada', $5, now(), now())")
            .bind(Uuid::now_v7()).bind(repository).bind(mr).bind(native_id).bind(format!("note {native_id}"))
            .execute(&self.pool).await?;
        Ok(())
    }

    /// A discussion on the diff.
    async fn thread(&self, mr: Uuid, discussion: &str) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO review_thread (id, pull_request_id, node_id, path, resolved) VALUES ($1, $2, $3, 'src/lib.rs', false)")
            .bind(id).bind(mr).bind(discussion)
            .execute(&self.pool).await?;
        Ok(id)
    }

    /// A diff note, in `thread` when given, replying to `reply_to` when given.
    async fn diff_note(
        &self,
        mr: Uuid,
        thread: Option<Uuid>,
        native_id: i64,
        reply_to: Option<i64>,
    ) -> Result<()> {
        sqlx::query("INSERT INTO review_comment (id, pull_request_id, thread_id, native_id, in_reply_to, path, line, author, body, upstream_created_at, upstream_updated_at) VALUES ($1, $2, $3, $4, $5, 'src/lib.rs', 7, 'ada', $6, now() + make_interval(secs => $4::float8), now())")
            .bind(Uuid::now_v7()).bind(mr).bind(thread).bind(native_id).bind(reply_to).bind(format!("diff note {native_id}"))
            .execute(&self.pool).await?;
        Ok(())
    }

    async fn get(&self, path: &str, token: &str) -> Result<(StatusCode, Value)> {
        self.call(false, path, token).await
    }

    /// Names of the repositories `token` sees in `ws`.
    async fn visible(&self, ws: Uuid, token: &str) -> Result<Vec<String>> {
        let (status, body) = self
            .call(
                false,
                &format!("/workspaces/{ws}/github/repositories"),
                token,
            )
            .await?;
        assert_eq!(status, StatusCode::OK, "{body}");
        Ok(body
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect())
    }

    async fn issues(&self, ws: Uuid, repo: Uuid, token: &str) -> Result<(StatusCode, Value)> {
        self.call(
            false,
            &format!("/workspaces/{ws}/github/repositories/{repo}/issues"),
            token,
        )
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_reads_only_what_its_monitors_cover_on_its_connections_instance() -> Result<()>
{
    let f = Fixture::start().await?;
    let (ws, conn) = f.workspace("https://github.example.com").await?;
    let (other_ws, other_conn) = f.workspace("https://ghe.other.example").await?;
    let ours = f.instance_of(conn).await?;
    let theirs = f.instance_of(other_conn).await?;

    let widgets = f.repository(ours, 1, "widgets").await?;
    f.monitor(ws, conn, "widgets", Some(1)).await?;
    f.issue(widgets, 1).await?;
    f.issue(widgets, 2).await?;
    // The monitor resolved `gadgets` to another repository (a reused name): not this one.
    let gadgets = f.repository(ours, 2, "gadgets").await?;
    f.monitor(ws, conn, "gadgets", Some(99)).await?;
    // A name alone covers nothing: only a monitor bound to a resolved native id grants reads.
    let pending = f.repository(ours, 4, "pending").await?;
    f.monitor(ws, conn, "pending", None).await?;
    // Same owner and name and id, but on the other workspace's GitHub server.
    let elsewhere = f.repository(theirs, 1, "widgets").await?;
    f.monitor(other_ws, other_conn, "widgets", Some(1)).await?;

    let viewer = testkit::token(&f.keys, Role::Viewer, Some(ws))?;
    assert_eq!(f.visible(ws, &viewer).await?, ["widgets"]);
    let (status, body) = f.issues(ws, widgets, &viewer).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    let numbers: Vec<i64> = body
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2]);
    for repo in [gadgets, pending, elsewhere] {
        let (status, body) = f.issues(ws, repo, &viewer).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
    assert_eq!(f.visible(other_ws, &f.admin).await?, ["widgets"]);
    let (status, body) = f.issues(other_ws, widgets, &f.admin).await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // A suspended connection still authorises reads, and so does a paused one (a pause keeps
    // the retained mirror); a disconnected one authorises none.
    f.transition(ws, conn, "suspend").await?;
    assert_eq!(f.visible(ws, &viewer).await?, ["widgets"]);
    f.transition(ws, conn, "resume").await?;
    f.transition(ws, conn, "pause").await?;
    assert_eq!(f.visible(ws, &viewer).await?, ["widgets"]);
    f.transition(ws, conn, "disconnect").await?;
    assert!(f.visible(ws, &viewer).await?.is_empty());
    let (status, _) = f.issues(ws, widgets, &viewer).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_workspaces_token_sees_nothing() -> Result<()> {
    let f = Fixture::start().await?;
    let (ws, conn) = f.workspace("https://github.example.com").await?;
    let (other_ws, _) = f.workspace("https://github.example.com").await?;
    let widgets = f
        .repository(f.instance_of(conn).await?, 1, "widgets")
        .await?;
    f.monitor(ws, conn, "widgets", Some(1)).await?;
    f.issue(widgets, 1).await?;

    let stranger = testkit::token(&f.keys, Role::Admin, Some(other_ws))?;
    let (status, body) = f
        .call(
            false,
            &format!("/workspaces/{ws}/github/repositories"),
            &stranger,
        )
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = f.issues(ws, widgets, &stranger).await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Its own workspace shares the GitHub server but monitors nothing.
    assert!(f.visible(other_ws, &stranger).await?.is_empty());
    let (status, _) = f.issues(other_ws, widgets, &stranger).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    Ok(())
}

/// Every GitLab read of the workspace `ws` that names `project` and `mr`.
fn gitlab_reads(ws: Uuid, project: Uuid, mr: Uuid) -> [String; 4] {
    [
        format!("/workspaces/{ws}/gitlab/projects"),
        format!("/workspaces/{ws}/gitlab/projects/{project}/issues"),
        format!("/workspaces/{ws}/gitlab/projects/{project}/merge-requests"),
        format!("/workspaces/{ws}/gitlab/projects/{project}/merge-requests/{mr}"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_reads_show_covered_projects_their_items_notes_and_threads() -> Result<()> {
    let f = Fixture::start().await?;
    let (ws, conn) = f
        .workspace_of("gitlab", "https://gitlab.example.com")
        .await?;
    let instance = f.instance_of(conn).await?;
    let widgets = f.repository(instance, 11, "widgets").await?;
    f.monitor(ws, conn, "widgets", Some(11)).await?;
    f.issue(widgets, 1).await?;
    let mr = f.merge_request(widgets, 3).await?;
    f.merge_request(widgets, 4).await?;
    f.note(widgets, mr, 501).await?;
    let thread = f.thread(mr, "d1").await?;
    f.diff_note(mr, Some(thread), 601, None).await?;
    f.diff_note(mr, Some(thread), 602, Some(601)).await?;
    f.diff_note(mr, None, 603, None).await?;
    // Another project on the same server, not monitored: its merge request is out of scope,
    // even asked for under the covered project.
    let gadgets = f.repository(instance, 12, "gadgets").await?;
    let foreign_mr = f.merge_request(gadgets, 1).await?;
    // A GitHub workspace's repository: the GitLab routes never serve it.
    let (gh_ws, gh_conn) = f.workspace("https://github.example.com").await?;
    let gh_repo = f
        .repository(f.instance_of(gh_conn).await?, 11, "widgets")
        .await?;
    f.monitor(gh_ws, gh_conn, "widgets", Some(11)).await?;

    let viewer = testkit::token(&f.keys, Role::Viewer, Some(ws))?;
    let [projects, issues, merge_requests, detail] = gitlab_reads(ws, widgets, mr);
    let (status, body) = f.get(&projects, &viewer).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body.as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body[0]["native_id"], 11);
    assert_eq!(body[0]["namespace"], "acme");
    assert_eq!(body[0]["path"], "widgets");
    let (status, body) = f.get(&issues, &viewer).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body[0]["number"], 1);
    let (status, body) = f.get(&merge_requests, &viewer).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    let numbers: Vec<i64> = body
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [3, 4]);
    let (status, body) = f.get(&format!("{merge_requests}?after=3"), &viewer).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body.as_array().unwrap().len(), 1, "{body}");

    let (status, body) = f.get(&detail, &viewer).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["number"], 3);
    assert_eq!(body["source_branch"], "feature");
    assert_eq!(body["notes"][0]["native_id"], 501);
    let threads = body["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1, "{body}");
    assert_eq!(threads[0]["discussion_id"], "d1");
    let thread_notes: Vec<i64> = threads[0]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["native_id"].as_i64().unwrap())
        .collect();
    assert_eq!(thread_notes, [601, 602]);
    assert_eq!(threads[0]["notes"][1]["in_reply_to"], 601);
    assert_eq!(body["unthreaded_notes"][0]["native_id"], 603);

    for path in [
        format!("/workspaces/{ws}/gitlab/projects/{widgets}/merge-requests/{foreign_mr}"),
        format!("/workspaces/{ws}/gitlab/projects/{gadgets}/merge-requests/{foreign_mr}"),
        format!("/workspaces/{ws}/gitlab/projects/{gadgets}/issues"),
        format!("/workspaces/{ws}/gitlab/projects/{gh_repo}/issues"),
        format!("/workspaces/{gh_ws}/gitlab/projects/{gh_repo}/issues"),
    ] {
        let (status, body) = f.get(&path, &f.admin).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(body["error"], "not_found", "{path}: {body}");
    }
    let (status, body) = f
        .get(&format!("/workspaces/{gh_ws}/gitlab/projects"), &f.admin)
        .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!([]));

    // A disconnected GitLab connection authorises no read.
    f.transition(ws, conn, "disconnect").await?;
    let (_, body) = f.get(&projects, &viewer).await?;
    assert_eq!(body, json!([]));
    for path in [issues, merge_requests, detail] {
        let (status, _) = f.get(&path, &viewer).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_workspaces_admin_reads_none_of_a_gitlab_mirror() -> Result<()> {
    let f = Fixture::start().await?;
    let (ws, conn) = f
        .workspace_of("gitlab", "https://gitlab.example.com")
        .await?;
    let (other_ws, other_conn) = f
        .workspace_of("gitlab", "https://gitlab.example.com")
        .await?;
    let widgets = f
        .repository(f.instance_of(conn).await?, 11, "widgets")
        .await?;
    f.monitor(ws, conn, "widgets", Some(11)).await?;
    let mr = f.merge_request(widgets, 1).await?;
    f.note(widgets, mr, 1).await?;
    // B monitors the same project by name only: a name never grants access.
    f.monitor(other_ws, other_conn, "widgets", None).await?;

    // A's own token reads every one of them.
    let owner = testkit::token(&f.keys, Role::Viewer, Some(ws))?;
    for path in gitlab_reads(ws, widgets, mr) {
        let (status, body) = f.get(&path, &owner).await?;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }
    let stranger = testkit::token(&f.keys, Role::Admin, Some(other_ws))?;
    for path in gitlab_reads(ws, widgets, mr) {
        let (status, body) = f.get(&path, &stranger).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
    // Through its own workspace B names A's project and merge request: nothing.
    let [projects, issues, merge_requests, detail] = gitlab_reads(other_ws, widgets, mr);
    let (_, body) = f.get(&projects, &stranger).await?;
    assert_eq!(body, json!([]));
    for path in [issues, merge_requests, detail] {
        let (status, body) = f.get(&path, &stranger).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_gitlab_read_parameters_answer_400_naming_them() -> Result<()> {
    let f = Fixture::start().await?;
    let (ws, _) = f
        .workspace_of("gitlab", "https://gitlab.example.com")
        .await?;
    let id = Uuid::now_v7();
    for (path, named) in [
        (
            format!("/workspaces/{ws}/gitlab/projects/not-a-uuid/issues"),
            "project",
        ),
        (
            format!("/workspaces/{ws}/gitlab/projects/{id}/merge-requests/42"),
            "merge_request",
        ),
        (
            format!("/workspaces/{ws}/gitlab/projects/{id}/merge-requests?limit=many"),
            "limit",
        ),
        (
            format!("/workspaces/{ws}/gitlab/projects/{id}/issues?after=x"),
            "after",
        ),
    ] {
        let (status, body) = f.get(&path, &f.admin).await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(
            body["message"].as_str().unwrap_or_default().contains(named),
            "{path}: {body}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitlab_merge_request_shows_its_approvals_and_decision_to_its_workspace_only()
-> Result<()> {
    let f = Fixture::start().await?;
    let (ws, conn) = f
        .workspace_of("gitlab", "https://gitlab.example.com")
        .await?;
    let (other_ws, _) = f
        .workspace_of("gitlab", "https://gitlab.example.com")
        .await?;
    let widgets = f
        .repository(f.instance_of(conn).await?, 11, "widgets")
        .await?;
    f.monitor(ws, conn, "widgets", Some(11)).await?;
    let approved = f.merge_request(widgets, 1).await?;
    let unknown = f.merge_request(widgets, 2).await?;
    for (user, at) in [
        ("cat", "2026-03-01T00:00:20Z"),
        ("bob", "2026-03-01T00:00:10Z"),
    ] {
        sqlx::query(
            "INSERT INTO merge_request_approval (pull_request_id, username, approved_at)
             VALUES ($1, $2, $3::timestamptz)",
        )
        .bind(approved)
        .bind(user)
        .bind(at)
        .execute(&f.pool)
        .await?;
    }
    sqlx::query("UPDATE pull_request SET review_decision = 'approved' WHERE id = $1")
        .bind(approved)
        .execute(&f.pool)
        .await?;
    sqlx::query(
        "UPDATE pull_request
            SET reviewers = '[{\"username\": \"bob\", \"state\": \"approved\"},
                             {\"username\": \"dan\", \"state\": null}]',
                reviewers_received_at = '2026-03-01T00:00:30Z', mergeable = true,
                merge_status = 'mergeable', approval_read_at = '2026-03-01T00:00:30Z',
                merge_commit_sha = 'abc123', merged_by = 'erin'
          WHERE id = $1",
    )
    .bind(approved)
    .execute(&f.pool)
    .await?;
    // An approval a read found without GitLab's date: its date is unknown.
    sqlx::query(
        "INSERT INTO merge_request_approval (pull_request_id, username, approved_at)
         VALUES ($1, 'dan', NULL)",
    )
    .bind(approved)
    .execute(&f.pool)
    .await?;

    let viewer = testkit::token(&f.keys, Role::Viewer, Some(ws))?;
    let [.., detail] = gitlab_reads(ws, widgets, approved);
    let (status, body) = f.get(&detail, &viewer).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["review_decision"], "approved");
    assert_eq!(
        body["approvals"],
        json!([
            {"username": "bob", "approved_at": "2026-03-01T00:00:10Z"},
            {"username": "cat", "approved_at": "2026-03-01T00:00:20Z"},
            {"username": "dan", "approved_at": null},
        ])
    );
    assert_eq!(
        body["reviewers"],
        json!([
            {"username": "bob", "state": "approved"},
            {"username": "dan", "state": null},
        ])
    );
    assert_eq!(body["mergeable"], true);
    assert_eq!(body["merge_status"], "mergeable");
    assert_eq!(body["approval_read_at"], "2026-03-01T00:00:30Z");
    assert_eq!(body["merge_commit_sha"], "abc123");
    assert_eq!(body["merged_by"], "erin");
    // Unknown is null, never a guess; no approval is an empty list.
    let [.., unknown_detail] = gitlab_reads(ws, widgets, unknown);
    let (status, body) = f.get(&unknown_detail, &viewer).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["review_decision"], Value::Null);
    assert_eq!(body["approvals"], json!([]));
    for field in [
        "reviewers",
        "mergeable",
        "merge_status",
        "approval_read_at",
        "merge_commit_sha",
        "merged_by",
    ] {
        assert_eq!(body[field], Value::Null, "{field}: {body}");
    }

    // Another workspace on the same GitLab server reads neither, under A's id or its own.
    let stranger = testkit::token(&f.keys, Role::Admin, Some(other_ws))?;
    for path in [detail, gitlab_reads(other_ws, widgets, approved)[3].clone()] {
        let (status, body) = f.get(&path, &stranger).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert!(body.get("approvals").is_none(), "{path}: {body}");
    }

    // The contract documents both.
    let (status, document) = f.get("/openapi.json", &viewer).await?;
    assert_eq!(status, StatusCode::OK);
    let schemas = &document["components"]["schemas"];
    // The detail flattens the merge request's view into its own properties (`allOf`).
    let detail = schemas["MergeRequestDetail"].to_string();
    assert!(detail.contains("\"review_decision\""), "{detail}");
    assert!(detail.contains("\"approvals\""), "{detail}");
    for field in [
        "reviewers",
        "mergeable",
        "merge_status",
        "approval_read_at",
        "merge_commit_sha",
        "merged_by",
    ] {
        assert!(
            detail.contains(&format!("\"{field}\"")),
            "{field}: {detail}"
        );
    }
    assert!(
        schemas["ReviewerView"]["properties"].get("state").is_some(),
        "{schemas}"
    );
    assert!(
        schemas["ApprovalView"]["properties"]
            .get("approved_at")
            .is_some(),
        "{schemas}"
    );
    Ok(())
}
