//! Vendor signals drive the connection: an App installation deleted, suspended or unsuspended
//! moves the connection through the one checked transition (version, audit row, lifecycle
//! message), only when delivered through the connection's App endpoint for the installation it
//! verified; a forged one changes nothing.

use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use uuid::Uuid;
use vendor_sim::github::Scenario;
use vendor_sim::github::webhook::{installation_payload, installation_target_payload};

use crate::repos::{open_issue, wait_for_filter};
use crate::support::{LiveStack, Tenant};

/// A hook of the connection registered on the repositories, not the App's.
const REPO_HOOK: u64 = 5;
const REPO_SECRET: &str = "a-repository-hook-secret";

async fn stack() -> Result<LiveStack> {
    LiveStack::start(Scenario {
        repositories: 1,
        items: 1,
        ..Scenario::default()
    })
    .await
}

fn installation(stack: &LiveStack) -> u64 {
    stack
        .sim
        .model(|m| m.installations().next().map(|i| i.id))
        .expect("the scenario has an installation")
}

/// Delivers `installation.<action>` through the App endpoint and waits until it is handled.
async fn signal(stack: &LiveStack, action: &str) -> Result<()> {
    let id = installation(stack);
    let payload = stack.sim.model(|m| installation_payload(m, action, id));
    stack.deliver("installation", &payload).await?;
    stack.settle().await
}

/// The connection's (status, version).
async fn state(stack: &LiveStack) -> Result<(String, i64)> {
    Ok(
        sqlx::query_as("SELECT status, version FROM connection WHERE id = $1")
            .bind(stack.conn.parse::<Uuid>()?)
            .fetch_one(&stack.pool)
            .await?,
    )
}

/// The connection's audit rows written by the vendor's signals: (action, before, after).
async fn vendor_audit(stack: &LiveStack) -> Result<Vec<(String, Option<String>, Option<String>)>> {
    Ok(sqlx::query_as(
        "SELECT action, before_status, after_status FROM connection_audit
          WHERE connection_id = $1 AND actor = 'github' ORDER BY version",
    )
    .bind(stack.conn.parse::<Uuid>()?)
    .fetch_all(&stack.pool)
    .await?)
}

/// The transitions announced on `lifecycle.github.<connection>.*`, in order.
async fn announced(stack: &LiveStack, min: usize) -> Result<Vec<String>> {
    let messages = testkit::read_stream(
        &stack.env.bus,
        bus::Stream::Lifecycle,
        &format!("lifecycle.github.{}.>", stack.conn),
        min,
        Duration::from_secs(10),
    )
    .await?;
    Ok(messages
        .iter()
        .filter_map(|m| m.subject.rsplit('.').next().map(str::to_owned))
        .collect())
}

fn audit(action: &str, before: &str, after: &str) -> (String, Option<String>, Option<String>) {
    (
        format!("github_installation_{action}"),
        Some(before.into()),
        Some(after.into()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn installation_deleted_uninstalls_the_connection() -> Result<()> {
    let stack = stack().await?;
    let (_, version) = state(&stack).await?;
    signal(&stack, "deleted").await?;

    assert_eq!(state(&stack).await?, ("uninstalled".into(), version + 1));
    assert_eq!(
        vendor_audit(&stack).await?,
        vec![audit("deleted", "active", "uninstalled")]
    );
    assert_eq!(
        announced(&stack, 2).await?,
        vec!["activated".to_owned(), "uninstalled".to_owned()]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn installation_suspended_and_unsuspended_suspend_and_resume_the_connection() -> Result<()> {
    let stack = stack().await?;
    let (_, version) = state(&stack).await?;
    signal(&stack, "suspend").await?;
    assert_eq!(state(&stack).await?, ("suspended".into(), version + 1));
    signal(&stack, "unsuspend").await?;
    assert_eq!(state(&stack).await?, ("active".into(), version + 2));
    assert_eq!(
        vendor_audit(&stack).await?,
        vec![
            audit("suspend", "active", "suspended"),
            audit("unsuspend", "suspended", "active"),
        ]
    );
    assert_eq!(
        announced(&stack, 3).await?,
        vec![
            "activated".to_owned(),
            "suspended".to_owned(),
            "resumed".to_owned()
        ]
    );

    // An operator's pause is not the vendor's to lift.
    let (status, body) = stack
        .post(
            &format!("/workspaces/{}/connections/{}/pause", stack.ws, stack.conn),
            json!({}),
        )
        .await?;
    assert_eq!(status, 200, "{body}");
    let paused = state(&stack).await?;
    signal(&stack, "unsuspend").await?;
    assert_eq!(state(&stack).await?, paused);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_installation_signals_change_nothing() -> Result<()> {
    let stack = stack().await?;
    let own = Tenant {
        ws: stack.ws.clone(),
        conn: stack.conn.clone(),
        installation: installation(&stack),
        repository: stack.repositories[0],
    };
    stack
        .endpoint(&own, "registered", REPO_HOOK, REPO_SECRET)
        .await?;
    let before = state(&stack).await?;
    let deleted = stack
        .sim
        .model(|m| installation_payload(m, "deleted", own.installation));
    // Through the connection's own repository hook: not the App's.
    stack
        .deliver_as(REPO_HOOK, REPO_SECRET, "installation", &deleted)
        .await?;
    // Through the App endpoint, for an installation the connection never verified.
    let other = stack.sim.model(|m| m.add_installation("globex"));
    let suspended = stack
        .sim
        .model(|m| installation_payload(m, "suspend", other));
    stack.deliver("installation", &suspended).await?;
    // An account rename through the repository hook.
    let renamed = stack.sim.model(|m| {
        m.rename_account("acme", "acme-corp");
        installation_target_payload(m, own.installation, "acme")
    });
    stack
        .deliver_as(REPO_HOOK, REPO_SECRET, "installation_target", &renamed)
        .await?;
    stack.settle().await?;

    assert_eq!(state(&stack).await?, before);
    assert!(vendor_audit(&stack).await?.is_empty());
    assert_eq!(owners(&stack).await?, vec!["acme".to_owned()]);
    assert_eq!(stack.out_of_scope().await?, 3);
    Ok(())
}

/// The distinct owners of the mirrored repositories and of the monitors.
async fn owners(stack: &LiveStack) -> Result<Vec<String>> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT owner FROM repository UNION SELECT owner FROM repository_to_monitor ORDER BY 1",
    )
    .fetch_all(&stack.pool)
    .await?;
    Ok(rows.into_iter().map(|(o,)| o).collect())
}

/// A rename GitHub does not confirm (the App's own endpoint signs it, but the installation's
/// repositories are still the old login's) re-keys nothing: a claim is not a fact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_installation_rename_github_does_not_confirm_rekeys_nothing() -> Result<()> {
    let stack = stack().await?;
    let id = installation(&stack);
    let payload = stack.sim.model(|m| {
        m.rename_account("acme", "acme-corp");
        let payload = installation_target_payload(m, id, "acme");
        m.rename_account("acme-corp", "acme");
        payload
    });
    stack.deliver("installation_target", &payload).await?;
    stack.settle().await?;
    assert_eq!(owners(&stack).await?, vec!["acme".to_owned()]);
    let (unconfirmed,): (i64,) = sqlx::query_as(
        "SELECT (detail->>'unconfirmed')::bigint FROM connection_activity
          WHERE activity = 'github_installation_target_renamed'",
    )
    .fetch_one(&stack.pool)
    .await?;
    assert_eq!(unconfirmed, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renamed_installation_account_rekeys_its_repositories_and_monitors() -> Result<()> {
    let stack = stack().await?;
    let id = installation(&stack);
    let repo = stack.repositories[0];
    let payload = stack.sim.model(|m| {
        m.rename_account("acme", "acme-corp");
        installation_target_payload(m, id, "acme")
    });
    stack.deliver("installation_target", &payload).await?;
    stack.settle().await?;

    assert_eq!(owners(&stack).await?, vec!["acme-corp".to_owned()]);
    let bound: Vec<(String, Option<i64>)> = sqlx::query_as(
        "SELECT owner || '/' || name, native_id FROM repository_to_monitor ORDER BY 1",
    )
    .fetch_all(&stack.pool)
    .await?;
    assert_eq!(
        bound,
        vec![("acme-corp/repo-0".into(), Some(i64::try_from(repo)?))]
    );
    // The consumer follows the new owner: an issue opened afterwards is applied.
    wait_for_filter(&stack, "acme-corp", "repo-0").await?;
    let (issue, payload) = open_issue(&stack, repo, "after the account rename");
    stack.deliver("issues", &payload).await?;
    stack.settle().await?;
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM issue WHERE native_id = {issue}"
            ))
            .await?,
        1
    );
    Ok(())
}
