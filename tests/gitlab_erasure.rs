//! A GitLab connection's disconnect, end to end: control-api activates a GitLab connection on a
//! small group (gitlab-sync discovers it, registers its group hook and mirrors INITIAL), a hook
//! delivery reaches the mirror through ingress, then the operator disconnects it and the eraser
//! runs. Nothing of its content stays anywhere the erasure scan looks; what it created at GitLab
//! stays recorded for provider repair, beside its jobs and audit. Real Postgres and NATS, the
//! GitLab simulator over HTTP.

use anyhow::Result;
use forgesync_e2e::{GitlabStack, eventually};
use serde_json::{Value, json};
use testkit::TestEnv;
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::gitlab::{GitlabSim, NoteOn};

const TOKEN: &str = "glpat-erasure";

fn place(scan: &Value, name: &str) -> i64 {
    scan["places"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["place"] == name)
        .and_then(|p| p["count"].as_i64())
        .unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gitlab_disconnect_leaves_no_content_and_keeps_its_registrations_for_repair() -> Result<()>
{
    let env = TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();
    let generated = vendor_sim::gitlab::generate(&vendor_sim::gitlab::Scenario {
        group: "acme".into(),
        token: TOKEN.into(),
        items: 120,
        first_update: OffsetDateTime::now_utc() - time::Duration::days(3),
    });
    let project = generated.projects[0];
    // The organization tier: members of the group and of a subgroup, listed at activation.
    let mut model = generated.model;
    let acme = model.group_by_path("acme").expect("the group");
    let platform = model.group_by_path("acme/platform").expect("a subgroup");
    model.add_member(acme, "owner-1", 50);
    model.add_member(platform, "developer-1", 30);
    let sim = GitlabSim::start(model).await?;

    let stack = GitlabStack::start(&env).await?;
    let eraser = testkit::spawn(testkit::eraser_config(env.common_args())).await?;
    let get = |path: String| {
        let stack = &stack;
        async move { stack.get(&path).await }
    };
    let post = |path: String, body: Value| {
        let stack = &stack;
        async move { stack.post(&path, body).await }
    };
    let (ws, conn) = stack.connect("acme", sim.base_url(), "acme", TOKEN).await?;

    let (job_status,): (String,) = eventually("INITIAL did not finish", || {
        let pool = &pool;
        async move {
            Ok(sqlx::query_as(
                "SELECT status FROM sync_job WHERE job_type = 'INITIAL' AND finished_at IS NOT NULL",
            )
            .fetch_optional(pool)
            .await?)
        }
    })
    .await?;
    assert_eq!(job_status, "succeeded");

    // A hook delivery through ingress, so raw copies and stream messages exist too.
    let iid = sim.model(|m| {
        m.merge_requests
            .values()
            .find(|mr| mr.project == project)
            .map(|mr| mr.iid)
            .expect("the project has a merge request")
    });
    let added = sim.model(|m| {
        m.add_note(
            NoteOn::MergeRequest(project, iid),
            "a note the hook carries",
            false,
            None,
        )
    });
    sim.flush_hooks().await;
    let _: i64 = eventually("the hook's note did not reach the mirror", || {
        let pool = &pool;
        async move {
            Ok(
                sqlx::query_scalar("SELECT 1::bigint FROM comment WHERE native_id = $1")
                    .bind(added as i64)
                    .fetch_optional(pool)
                    .await?,
            )
        }
    })
    .await?;

    // An approval through its hook: the standing approval is the connection's content too.
    let open_iid = sim.model(|m| {
        m.merge_requests
            .values()
            .find(|mr| mr.project == project && mr.state == "opened")
            .map(|mr| mr.iid)
            .expect("the project has an open merge request")
    });
    assert!(sim.model(|m| m.approve_merge_request(project, open_iid, "reviewer-1")));
    sim.flush_hooks().await;
    let _: i64 = eventually("the approval did not reach the mirror", || {
        let pool = &pool;
        async move {
            Ok(
                sqlx::query_scalar("SELECT 1::bigint FROM merge_request_approval LIMIT 1")
                    .fetch_optional(pool)
                    .await?,
            )
        }
    })
    .await?;

    // A request for changes (GitLab's system note, through its Note Hook) by another reviewer.
    assert!(
        sim.model(|m| m.request_changes(project, open_iid, "reviewer-2"))
            .is_some()
    );
    sim.flush_hooks().await;
    let _: i64 = eventually("the request for changes did not reach the mirror", || {
        let pool = &pool;
        async move {
            Ok(
                sqlx::query_scalar("SELECT 1::bigint FROM merge_request_requested_change LIMIT 1")
                    .fetch_optional(pool)
                    .await?,
            )
        }
    })
    .await?;

    // Before: the scan finds the connection's content, its own GitLab rows included.
    let scan = |ws: String| {
        let get = &get;
        async move {
            let (status, body) = get(format!("/workspaces/{ws}/erasure-scan")).await?;
            anyhow::ensure!(status == 200, "erasure-scan: {status} {body}");
            anyhow::Ok(body)
        }
    };
    let before = scan(ws.clone()).await?;
    for table in [
        "table:issue",
        "table:pull_request",
        "table:comment",
        "table:merge_request_approval",
        "table:merge_request_requested_change",
        "table:gitlab_activation",
        "table:listing_state",
        "table:inbound_message",
    ] {
        assert!(place(&before, table) > 0, "{table}: {before}");
    }
    assert!(place(&before, "stream:WEBHOOKS_GITLAB") > 0, "{before}");
    // The organization tier (the scan does not look there): the members of the group and of
    // its subgroup, held for the organization the connection binds.
    let organization: Uuid = sqlx::query_scalar(
        "SELECT organization_id FROM organization_binding WHERE connection_id = $1::uuid",
    )
    .bind(&conn)
    .fetch_one(&pool)
    .await?;
    let tier = |pool: sqlx::PgPool| async move {
        let count = |sql: &'static str| {
            sqlx::query_scalar::<_, i64>(sql)
                .bind(organization)
                .fetch_one(&pool)
        };
        anyhow::Ok([
            count("SELECT count(*) FROM organization_membership WHERE organization_id = $1")
                .await?,
            count(
                "SELECT count(*) FROM team_membership
                  WHERE team_id IN (SELECT id FROM team WHERE organization_id = $1)",
            )
            .await?,
        ])
    };
    let [members, team_members] = tier(pool.clone()).await?;
    assert!(members > 0 && team_members > 0, "{members} {team_members}");
    let registrations = |pool: sqlx::PgPool, conn: String| async move {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM provider_registration WHERE connection_id = $1::uuid",
        )
        .bind(conn)
        .fetch_one(&pool)
        .await
    };
    let registered = registrations(pool.clone(), conn.clone()).await?;
    assert!(registered > 0, "the group hook is recorded");

    let (status, body) = post(
        format!("/workspaces/{ws}/connections/{conn}/disconnect"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    let records: Value = eventually("the erasure did not finish", || {
        let get = &get;
        let ws = ws.clone();
        async move {
            let (status, body) = get(format!("/workspaces/{ws}/erasures")).await?;
            anyhow::ensure!(status == 200, "erasures: {status} {body}");
            let done = body
                .as_array()
                .is_some_and(|l| !l.is_empty() && l.iter().all(|r| r["status"] == "done"));
            Ok(done.then_some(body))
        }
    })
    .await?;
    assert_eq!(records[0]["trigger"], "disconnect", "{records}");

    // After: zero everywhere, the connection's own subjects included. The organization tier
    // goes with it (no other live workspace binds `acme`); the organization row is global.
    let after = scan(ws.clone()).await?;
    assert_eq!(after["total"], 0, "{after}");
    assert_eq!(place(&after, "table:merge_request_requested_change"), 0);
    let requested: i64 = sqlx::query_scalar("SELECT count(*) FROM merge_request_requested_change")
        .fetch_one(&pool)
        .await?;
    assert_eq!(requested, 0);
    assert_eq!(tier(pool.clone()).await?, [0, 0]);
    let organizations: i64 = sqlx::query_scalar("SELECT count(*) FROM organization WHERE id = $1")
        .bind(organization)
        .fetch_one(&pool)
        .await?;
    assert_eq!(organizations, 1, "the organization row is kept");
    assert!(
        after["places"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["place"]
                .as_str()
                .is_some_and(|s| s.starts_with("subject:") && s.contains(&conn))),
        "the connection's own subjects are scanned: {after}"
    );
    // Retained, each for its reason: what we created at GitLab (provider repair removes it),
    // the jobs and the audit.
    assert_eq!(registrations(pool.clone(), conn.clone()).await?, registered);
    for table in ["sync_job", "connection_audit"] {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE connection_id = $1::uuid"
        )))
        .bind(&conn)
        .fetch_one(&pool)
        .await?;
        assert!(n > 0, "{table} keeps the connection's rows");
    }
    eraser.stop().await
}
