//! A new credential dispatches at once, end to end over HTTP with real Postgres and JetStream:
//! a disconnected GitLab connection's refused token leaves its hook's fence waiting for a
//! credential; the workspace admin hands in a good token through control-api; with provider-
//! repair's schedule off, only the wake control-api sends can make it try again, and the hook
//! goes while the connection's own secrets stay deleted.

use std::time::Duration;

use anyhow::Result;
use control_api::Role;
use gitlab_client::{ClientConfig, GitlabClient, NewGroupHook};
use lifecycle_core::repair::FenceStatus;
use serde_json::json;
use store::repair::Repair;
use uuid::Uuid;
use vendor_sim::gitlab::{GitlabSim, Model};

const TOKEN: &str = "glpat-good";

async fn fence_when(
    pool: &sqlx::PgPool,
    conn: Uuid,
    done: impl Fn(&Repair) -> bool,
) -> Result<Repair> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let fences = store::repair::of_connection(pool, conn).await?;
        if let [fence] = fences.as_slice()
            && done(fence)
        {
            return Ok(fence.clone());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("the fence never got there: {fences:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_handed_in_for_a_disconnected_connection_removes_its_hook_at_once() -> Result<()> {
    let mut model = Model::default();
    model.add_token(TOKEN);
    let group = model.add_group(None, "acme");
    let sim = GitlabSim::start(model).await?;
    let env = testkit::TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();
    let instance = Uuid::now_v7();
    sqlx::query("INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)")
        .bind(instance)
        .bind(sim.base_url())
        .execute(&pool)
        .await?;
    // The connection holds a token GitLab refuses; its hook was created with a good one.
    let (ws, conn) = testkit::active_connection(
        &env.db.db,
        "gitlab",
        instance,
        json!({ "group": "acme" }),
        Some("glpat-revoked"),
    )
    .await?;
    let gitlab = GitlabClient::new(
        &ClientConfig::new(sim.base_url()).with_egress(env.common_args().egress),
        TOKEN,
    )?;
    let marker = Uuid::now_v7().to_string();
    let url = format!("https://hooks.example/webhooks/gitlab/connections/{conn}/k1/{marker}");
    let hook = gitlab
        .create_group_hook(
            group,
            &NewGroupHook {
                url: url.clone(),
                token: "route-credential".into(),
                issues_events: true,
                merge_requests_events: true,
                note_events: true,
                pipeline_events: true,
                project_events: true,
                subgroup_events: true,
                member_events: true,
                push_events: true,
                enable_ssl_verification: true,
            },
        )
        .await?;
    sqlx::query(
        "INSERT INTO provider_registration (id, connection_id, provider_instance_id,
             resource_kind, target, marker, url_hash, connection_version,
             lifecycle_generation, state, vendor_id)
         SELECT $1, c.id, $3, 'gitlab_group_hook', $4, $5, $6, c.version,
                c.lifecycle_generation, 'adopted', $7
           FROM connection c WHERE c.id = $2",
    )
    .bind(Uuid::now_v7())
    .bind(conn)
    .bind(instance)
    .bind(group.to_string())
    .bind(&marker)
    .bind(store::inbound::sha256_hex(url.as_bytes()))
    .bind(hook.id.to_string())
    .execute(&pool)
    .await?;

    let api = testkit::spawn(testkit::control_api_config(env.common_args())).await?;
    let keys = testkit::control_api_keys()?;
    // Only messages wake it: no schedule can pick the fence up.
    let repair_config: provider_repair::Config = testkit::config(
        env.common_args(),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            "--provider-repair-cron=off".to_owned(),
            "--provider-repair-request-timeout=1".to_owned(),
        ],
    )?;
    let repair = testkit::spawn(repair_config).await?;
    let http = reqwest::Client::new();
    let operator = testkit::token(&keys, Role::Admin, None)?;
    let res = http
        .post(format!(
            "{}/workspaces/{ws}/connections/{conn}/disconnect",
            api.url()
        ))
        .bearer_auth(&operator)
        .send()
        .await?;
    assert_eq!(res.status(), reqwest::StatusCode::OK);
    let waiting = fence_when(&pool, conn, |f| {
        f.fence.status() == FenceStatus::NeedsAuthorization
    })
    .await?;
    assert!(
        waiting.next_attempt_at.unwrap() > time::OffsetDateTime::now_utc(),
        "backing off"
    );

    let admin = testkit::token(&keys, Role::Admin, Some(ws))?;
    let res = http
        .put(format!(
            "{}/workspaces/{ws}/connections/{conn}/secrets",
            api.url()
        ))
        .bearer_auth(&admin)
        .json(&json!({ "secrets": { "token": TOKEN } }))
        .send()
        .await?;
    assert_eq!(res.status(), reqwest::StatusCode::OK);
    fence_when(&pool, conn, |f| f.fence.status() == FenceStatus::Resolved).await?;
    let hooks = gitlab.group_hooks_page(group, 1, 100).await?;
    assert!(hooks.hooks.is_empty(), "the hook is gone");
    let secrets: i64 =
        sqlx::query_scalar("SELECT count(*) FROM connection_secret WHERE connection_id = $1")
            .bind(conn)
            .fetch_one(&pool)
            .await?;
    assert_eq!(
        secrets, 0,
        "the disconnected connection's secrets stay deleted"
    );
    repair.stop().await?;
    api.stop().await?;
    Ok(())
}
