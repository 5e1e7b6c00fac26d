//! A GitLab group hook end to end: the simulated GitLab executes the hook registered for a
//! connection (its URL a route of ours, its token a route credential), ingress verifies and
//! stores it on `gitlab.?connection.<id>.<event>`, gitlab-sync's registered-hooks consumer
//! applies it to the mirror. The hook is registered directly in the simulator's model on an
//! endpoint made here (as activation would make it).

use std::time::Duration;

use anyhow::Result;
use lifecycle_core::gitlab::route_credential::{RouteBinding, mint};
use serde_json::json;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::NewEndpoint;
use store::secrets::Keyring;
use testkit::TestEnv;
use uuid::Uuid;
use vendor_sim::gitlab::{GitlabSim, Model, NewMergeRequest, NoteOn};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_request_and_its_note_reach_the_mirror_through_the_registered_group_hook()
-> Result<()> {
    through_the_registered_group_hook(false).await
}

/// The same hooks on an endpoint whose secret a tenant knows are claims: nothing of their
/// payloads is written; the merge request they name is read from GitLab and written as GitLab
/// has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_on_a_tenant_keyed_endpoint_are_confirmed_by_reading_gitlab() -> Result<()> {
    through_the_registered_group_hook(true).await
}

async fn through_the_registered_group_hook(tenant_keyed: bool) -> Result<()> {
    let env = TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();
    let mut model = Model::default();
    model.add_token("glpat-acme");
    let acme = model.add_group(None, "acme");
    let team = model.add_group(Some(acme), "team");
    // Created after discovery: its first hook admits it by route admission.
    let project = model.add_project(team, "api");
    let sim = GitlabSim::start(model).await?;

    let (workspace_id, connection_id, instance) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)")
        .bind(instance)
        .bind(sim.base_url())
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'acme')")
        .bind(workspace_id)
        .execute(&pool)
        .await?;
    sqlx::query(
        "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id, settings)
         VALUES ($1, $2, 'gitlab', 'active', $3, $4)",
    )
    .bind(connection_id)
    .bind(workspace_id)
    .bind(instance)
    .bind(json!({"group": "acme"}))
    .execute(&pool)
    .await?;
    let keyring = Keyring::parse(&testkit::secret_key())?;
    store::secrets::put(&env.db.db, &keyring, connection_id, "token", b"glpat-acme").await?;
    let route = store::inbound::create_endpoint(
        &env.db.db,
        &keyring,
        NewEndpoint {
            workspace_id,
            connection_id,
            kind: ConnectionKind::Gitlab,
            registration: Registration::Registered,
            provider_ref: Some("acme".into()),
            address_token: None,
            tenant_keyed,
        },
        Uuid::now_v7().as_bytes(),
    )
    .await?;

    let ingress = testkit::spawn(testkit::ingress_config(env.common_args())).await?;
    let sync_config: gitlab_sync::Config = testkit::config(
        env.common_args(),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            "--reconcile-cron=off".to_owned(),
            "--backfill-cron=off".to_owned(),
            "--filter-refresh-ms=200".to_owned(),
        ],
    )?;
    let sync = testkit::spawn(sync_config).await?;

    let (c, r) = (connection_id.to_string(), route.id.to_string());
    let credential = mint(
        testkit::ROUTING_KEY,
        &RouteBinding {
            connection_id: &c,
            key_id: "k1",
            route_id: &r,
            origin: sim.base_url(),
        },
    );
    let url = format!("{}/webhooks/gitlab/connections/{c}/k1/{r}", ingress.url());
    let hook = sim.model(|m| m.add_hook(acme, &url, &credential));

    // The consumer takes the connection's subjects before GitLab sends anything.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let iid = sim.model(|m| {
        let iid = m.add_merge_request(
            project,
            NewMergeRequest {
                title: "Add the API".into(),
                updated_at: time::OffsetDateTime::now_utc(),
            },
        );
        m.add_note(NoteOn::MergeRequest(project, iid), "ship it", false, None);
        iid
    });
    let attempts = sim.flush_hooks().await;
    let all = sim.hook_attempts();
    assert!(
        all.len() >= 2 && all.iter().all(|a| a.hook_id == hook && a.succeeded()),
        "ingress accepted both hooks: {attempts:?}"
    );

    if tenant_keyed {
        // Claims: the merge request is read from GitLab by number with the connection's token
        // and written as GitLab has it; the note is left to the notes reconciliation (a merge
        // request's note is written from its discussions listing).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let stored: Option<String> = sqlx::query_scalar(
                "SELECT p.title FROM pull_request p JOIN repository r ON r.id = p.repository_id
                  WHERE r.native_id = $1 AND p.number = $2",
            )
            .bind(project as i64)
            .bind(iid as i32)
            .fetch_optional(&pool)
            .await?;
            if stored.as_deref() == Some("Add the API") {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the claim was not confirmed: {stored:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(sim.calls("ProjectMergeRequest") >= 1, "GitLab was read");
        let comments: i64 = sqlx::query_scalar("SELECT count(*) FROM comment")
            .fetch_one(&pool)
            .await?;
        assert_eq!(comments, 0, "a claim's note was written");

        // A forged merge of it, dated 2099, on the same endpoint: read again, written as GitLab
        // has it (still open, no merge event).
        let genuine = all
            .iter()
            .find(|a| a.event == "Merge Request Hook")
            .expect("GitLab sent the merge request's hook");
        let mut forged: serde_json::Value = serde_json::from_slice(&genuine.body)?;
        forged["object_attributes"]["title"] = json!("merged by a forger");
        forged["object_attributes"]["state"] = json!("merged");
        forged["object_attributes"]["action"] = json!("merge");
        forged["object_attributes"]["updated_at"] = json!("2099-01-01 00:00:00 UTC");
        let reads = sim.calls("ProjectMergeRequest");
        let status = vendor_sim::gitlab::webhook::Delivery::new("Merge Request Hook", &forged)
            .send(
                &reqwest::Client::new(),
                &url,
                &credential,
                "forged",
                sim.base_url(),
            )
            .await?;
        assert_eq!(status.as_u16(), 200);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while sim.calls("ProjectMergeRequest") == reads {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the forged claim was not read back"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (title, state): (String, String) = sqlx::query_as(
            "SELECT p.title, p.state FROM pull_request p JOIN repository r ON r.id = p.repository_id
              WHERE r.native_id = $1 AND p.number = $2",
        )
        .bind(project as i64)
        .bind(iid as i32)
        .fetch_one(&pool)
        .await?;
        assert_eq!((title.as_str(), state.as_str()), ("Add the API", "open"));
        let merges: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM item_event WHERE name = 'scm.pull_request.merged'",
        )
        .fetch_one(&pool)
        .await?;
        assert_eq!(merges, 0, "a forged merge reached the events");
        sync.stop().await?;
        return ingress.stop().await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stored: Option<(String, i64)> = sqlx::query_as(
            "SELECT p.title, (SELECT count(*) FROM comment c WHERE c.pull_request_id = p.id)
               FROM pull_request p JOIN repository r ON r.id = p.repository_id
              WHERE r.native_id = $1 AND p.number = $2",
        )
        .bind(project as i64)
        .bind(iid as i32)
        .fetch_optional(&pool)
        .await?;
        if stored == Some(("Add the API".into(), 1)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hook did not reach the mirror: {stored:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let monitors: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM repository_to_monitor WHERE connection_id = $1 AND native_id = $2",
    )
    .bind(connection_id)
    .bind(project as i64)
    .fetch_one(&pool)
    .await?;
    assert_eq!(
        monitors, 1,
        "route admission bound one monitor to the project's id"
    );
    sync.stop().await?;
    ingress.stop().await
}
