//! A repository leaving the App installation, end to end with the eraser running: GitHub's
//! signed `installation_repositories` delivery through ingress, github-sync's owner-event
//! consumer removing the monitors and releasing the repositories, and the eraser's orphan guard
//! deleting the one nobody else monitors while keeping the one another workspace still does.

use anyhow::Result;
use forgesync_e2e::eventually;
use serde_json::json;
use uuid::Uuid;
use vendor_sim::github::Scenario;
use vendor_sim::github::webhook::installation_repositories_payload;

use crate::support::LiveStack;

/// The mirrored repository row of a native id, if there is one.
async fn repository_row(stack: &LiveStack, native_id: u64) -> Result<Option<Uuid>> {
    Ok(
        sqlx::query_scalar("SELECT id FROM repository WHERE native_id = $1")
            .bind(i64::try_from(native_id)?)
            .fetch_optional(&stack.pool)
            .await?,
    )
}

/// Waits until the eraser's consumer of released repositories has nothing left to handle.
async fn releases_handled(stack: &LiveStack) -> Result<()> {
    let ns = stack.env.bus.namespace();
    let bus = &stack.env.bus;
    eventually("the eraser did not handle the releases", || async move {
        let mut stream = bus
            .jetstream()
            .get_stream(ns.name(bus::Stream::Lifecycle.name()))
            .await?;
        let stored = stream.info().await?.state.messages;
        let Ok(info) = stream.consumer_info(ns.name("eraser-releases")).await else {
            return Ok(None);
        };
        let idle = stored > 0 && info.num_pending == 0 && info.num_ack_pending == 0;
        Ok(idle.then_some(()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repository_removed_from_the_installation_goes_only_when_orphaned() -> Result<()> {
    let stack = LiveStack::start(Scenario {
        repositories: 3,
        items: 10,
        ..Scenario::default()
    })
    .await?;
    let eraser = testkit::spawn(testkit::eraser_config(stack.env.common_args())).await?;
    let (shared, orphan) = (stack.repositories[0], stack.repositories[1]);
    let installation = stack
        .sim
        .model(|m| m.installations().next().map(|i| i.id))
        .expect("the scenario has an installation");

    // A second workspace monitors the shared repository through a PAT connection of its own.
    stack
        .sim
        .model(|m| m.add_personal_access_token("globex-pat"));
    let (status, ws) = stack.post("/workspaces", json!({"name": "globex"})).await?;
    assert_eq!(status, 201, "{ws}");
    let ws = ws["id"].as_str().expect("workspace created").to_owned();
    let (status, conn) = stack
        .post(
            &format!("/workspaces/{ws}/connections"),
            json!({
                "kind": "github",
                "server_url": stack.sim.base_url(),
                "settings": { "auth": "pat", "repositories": ["acme/repo-0"] },
                "secrets": { "token": "globex-pat" },
            }),
        )
        .await?;
    assert_eq!(status, 201, "{conn}");
    let conn = conn["id"].as_str().expect("connection created").to_owned();
    let (status, body) = stack
        .post(
            &format!("/workspaces/{ws}/connections/{conn}/activate"),
            json!({}),
        )
        .await?;
    assert_eq!(status, 200, "{body}");
    stack.finished_jobs("INITIAL", 2).await?;

    // Both repositories are mirrored, by the syncs, with their work.
    let shared_row = repository_row(&stack, shared).await?.expect("mirrored");
    let orphan_row = repository_row(&stack, orphan).await?.expect("mirrored");
    let issues_of = |row: Uuid| format!("SELECT count(*) FROM issue WHERE repository_id = '{row}'");
    let shared_issues = stack.count(&issues_of(shared_row)).await?;
    assert!(shared_issues > 0 && stack.count(&issues_of(orphan_row)).await? > 0);

    // GitHub reports both removed from the installation.
    let removed = stack.sim.model(|m| {
        let payload =
            installation_repositories_payload(m, "removed", installation, &[shared, orphan]);
        m.set_repository_installation(shared, None);
        m.set_repository_installation(orphan, None);
        payload
    });
    stack.deliver("installation_repositories", &removed).await?;
    stack.settle().await?;

    // The orphan goes with everything under it ...
    eventually("the orphaned repository was not deleted", || async {
        Ok(repository_row(&stack, orphan)
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    assert_eq!(stack.count(&issues_of(orphan_row)).await?, 0);
    // ... the shared one stays, whole, for the workspace that still monitors it.
    releases_handled(&stack).await?;
    assert_eq!(repository_row(&stack, shared).await?, Some(shared_row));
    assert_eq!(stack.count(&issues_of(shared_row)).await?, shared_issues);
    let monitors = |connection: &str| {
        format!(
            "SELECT count(*) FROM repository_to_monitor
              WHERE connection_id = '{connection}' AND native_id = {shared}"
        )
    };
    assert_eq!(stack.count(&monitors(&stack.conn)).await?, 0);
    assert_eq!(stack.count(&monitors(&conn)).await?, 1);
    // The third repository never left the installation.
    assert!(
        repository_row(&stack, stack.repositories[2])
            .await?
            .is_some()
    );
    eraser.stop().await
}
