//! Write admission, written as the attacks: workspace A (`acme`) monitors its installation's
//! repositories; workspace B (`globex`) has its own App connection and endpoints whose secrets B
//! chose. B signs deliveries about A's repositories and installation; A's mirror and monitors stay
//! as they were, and each delivery is counted out of scope. A's own deliveries still apply, and
//! a destructive one applies only once GitHub confirms it to A's credentials.

use anyhow::Result;
use serde_json::Value;
use uuid::Uuid;
use vendor_sim::github::webhook::{
    installation_payload, installation_repositories_payload, issues_payload, renamed_changes,
    repository_payload,
};
use vendor_sim::github::{Fault, FaultKind, Scenario, ops};

use crate::support::{LiveStack, Tenant};

/// B's hook, registered through B's own connection with B's secret.
const B_HOOK: u64 = 2;
const B_SECRET: &str = "globex-chose-this-secret";
/// An App endpoint of B's connection (as if the operator had configured it for B).
const B_APP_HOOK: u64 = 3;
const B_APP_SECRET: &str = "globex-app-endpoint-secret";

fn scenario() -> Scenario {
    Scenario {
        repositories: 3,
        items: 2,
        ..Scenario::default()
    }
}

async fn with_b(stack: &LiveStack) -> Result<Tenant> {
    let b = stack.second_tenant().await?;
    stack.endpoint(&b, "registered", B_HOOK, B_SECRET).await?;
    Ok(b)
}

/// Everything of A's mirror a forged delivery could touch, as one comparable value.
async fn a_footprint(stack: &LiveStack) -> Result<Vec<(String, i64)>> {
    let mut out = Vec::new();
    for (label, sql) in [
        (
            "repositories",
            "SELECT count(*) FROM repository WHERE owner = 'acme'",
        ),
        (
            "a monitors",
            "SELECT count(*) FROM repository_to_monitor WHERE owner = 'acme'",
        ),
        ("issues", "SELECT count(*) FROM issue"),
        (
            "live issues",
            "SELECT count(*) FROM issue WHERE deleted_at IS NULL",
        ),
        ("item events", "SELECT count(*) FROM item_event"),
        (
            "issue versions",
            "SELECT coalesce(sum(extract(epoch FROM upstream_updated_at))::bigint, 0) FROM issue",
        ),
    ] {
        out.push((label.to_owned(), stack.count(sql).await?));
    }
    Ok(out)
}

async fn monitors_of(stack: &LiveStack, conn: &str) -> Result<Vec<(String, Option<i64>)>> {
    Ok(sqlx::query_as(
        "SELECT owner || '/' || name, native_id FROM repository_to_monitor
          WHERE connection_id = $1 ORDER BY 1",
    )
    .bind(conn.parse::<Uuid>()?)
    .fetch_all(&stack.pool)
    .await?)
}

/// The first issue of A's `repo` upstream: (number, native id).
fn first_issue(stack: &LiveStack, repo: u64) -> (u64, u64) {
    stack.sim.model(|m| {
        let issue = m
            .repository(repo)
            .expect("repository exists")
            .issues()
            .next()
            .expect("the scenario gives each repository issues");
        (issue.number, issue.database_id)
    })
}

async fn issue_row(stack: &LiveStack, native_id: u64) -> Result<(Uuid, Option<String>, String)> {
    Ok(sqlx::query_as(
        "SELECT repository_id, title, upstream_updated_at::text FROM issue WHERE native_id = $1",
    )
    .bind(i64::try_from(native_id)?)
    .fetch_one(&stack.pool)
    .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forged_repository_deleted_from_another_tenant_changes_nothing() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let b = with_b(&stack).await?;
    let target = stack.repositories[0];
    let before = a_footprint(&stack).await?;
    let a_monitors = monitors_of(&stack, &stack.conn).await?;

    // B signs A's repository's deletion (and a rename) with B's own secret.
    let (deleted, renamed) = stack.sim.model(|m| {
        let r = m.repository(target).expect("repository exists");
        (
            repository_payload(m, "deleted", r, None),
            repository_payload(m, "renamed", r, Some(renamed_changes("repo-0"))),
        )
    });
    stack
        .deliver_as(B_HOOK, B_SECRET, "repository", &deleted)
        .await?;
    let mut renamed = renamed;
    renamed["repository"]["name"] = Value::from("hijacked");
    stack
        .deliver_as(B_HOOK, B_SECRET, "repository", &renamed)
        .await?;
    stack.settle().await?;

    assert_eq!(a_footprint(&stack).await?, before, "A's mirror changed");
    assert_eq!(monitors_of(&stack, &stack.conn).await?, a_monitors);
    assert_eq!(
        stack
            .count("SELECT count(*) FROM repository WHERE name = 'hijacked'")
            .await?,
        0
    );
    assert_eq!(stack.out_of_scope().await?, 2);
    // B's own repository is untouched too: B covers only it.
    assert_eq!(monitors_of(&stack, &b.conn).await?.len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forged_far_future_edit_from_another_tenant_neither_writes_nor_freezes_the_row()
-> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let b = with_b(&stack).await?;
    let target = stack.repositories[0];
    let (number, native) = first_issue(&stack, target);
    let before = a_footprint(&stack).await?;
    let row_before = issue_row(&stack, native).await?;

    // B's forged edit of A's issue, dated far in the future so forward-only writes would then
    // refuse every genuine update.
    let mut forged = stack.sim.model(|m| {
        let r = m.repository(target).expect("repository exists");
        let issue = r.issue(number).expect("issue exists");
        issues_payload(m, "edited", r, issue)
    });
    forged["issue"]["title"] = Value::from("defaced by B");
    forged["issue"]["updated_at"] = Value::from("2099-01-01T00:00:00Z");
    stack
        .deliver_as(B_HOOK, B_SECRET, "issues", &forged)
        .await?;
    // The same issue claimed under B's own repository: moving it there would hand it to B.
    let mut pulled = forged.clone();
    let own = stack.sim.model(|m| {
        let r = m.repository(b.repository).expect("B's repository exists");
        repository_payload(m, "edited", r, None)["repository"].clone()
    });
    pulled["repository"] = own;
    stack
        .deliver_as(B_HOOK, B_SECRET, "issues", &pulled)
        .await?;
    stack.settle().await?;

    assert_eq!(
        issue_row(&stack, native).await?,
        row_before,
        "A's issue changed"
    );
    assert_eq!(a_footprint(&stack).await?, before);
    // Both refused before any writer ran: dated past their receipt, they never reach admission
    // (which would have refused them as out of scope). A refusal retried after a transient
    // failure (a loaded machine) is counted once it settles.
    forgesync_e2e::eventually("both forged deliveries were not refused", || async {
        let refused = stack.out_of_scope().await? + stack.rejected("future_time").await?;
        anyhow::ensure!(refused <= 2, "{refused} refusals of two deliveries");
        Ok((refused == 2).then_some(()))
    })
    .await?;

    // A genuine update still applies: the row was never frozen.
    let genuine = stack.sim.model(|m| {
        m.update_issue(target, number, |i| {
            i.title = "edited by A".into();
            i.updated_at += time::Duration::HOUR;
        });
        let r = m.repository(target).expect("repository exists");
        issues_payload(m, "edited", r, r.issue(number).expect("issue exists"))
    });
    stack.deliver("issues", &genuine).await?;
    stack.settle().await?;
    let (_, title, _) = issue_row(&stack, native).await?;
    assert_eq!(title.as_deref(), Some("edited by A"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_installation_events_naming_anothers_repositories_create_no_monitor() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let b = with_b(&stack).await?;
    stack.endpoint(&b, "app", B_APP_HOOK, B_APP_SECRET).await?;
    let b_monitors = monitors_of(&stack, &b.conn).await?;
    let a_monitors = monitors_of(&stack, &stack.conn).await?;
    let a_installation = stack.sim.model(|m| {
        m.repository(stack.repositories[0])
            .expect("repository exists")
            .installation
            .expect("A's repositories are installed")
    });
    let (created, added) = stack.sim.model(|m| {
        (
            installation_payload(m, "created", a_installation),
            installation_repositories_payload(m, "added", a_installation, &stack.repositories),
        )
    });

    // Through B's own (non-App) endpoint: never trusted for installation events.
    stack
        .deliver_as(B_HOOK, B_SECRET, "installation", &created)
        .await?;
    stack
        .deliver_as(B_HOOK, B_SECRET, "installation_repositories", &added)
        .await?;
    // Through B's App endpoint, naming A's installation: B never verified it.
    stack
        .deliver_as(B_APP_HOOK, B_APP_SECRET, "installation", &created)
        .await?;
    stack
        .deliver_as(
            B_APP_HOOK,
            B_APP_SECRET,
            "installation_repositories",
            &added,
        )
        .await?;
    // Through B's App endpoint, naming B's own installation but listing A's repositories: B's
    // installation token does not reach them, so none becomes a monitor.
    let mut own_added = added.clone();
    own_added["installation"]["id"] = Value::from(b.installation);
    stack
        .deliver_as(
            B_APP_HOOK,
            B_APP_SECRET,
            "installation_repositories",
            &own_added,
        )
        .await?;
    stack.settle().await?;

    assert_eq!(monitors_of(&stack, &b.conn).await?, b_monitors);
    assert_eq!(monitors_of(&stack, &stack.conn).await?, a_monitors);
    assert_eq!(stack.out_of_scope().await?, 4);
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM connection_activity WHERE connection_id = '{}'
                  AND activity = 'github_installation_repositories_added'
                  AND jsonb_array_length(detail->'unconfirmed') = {}",
                b.conn,
                stack.repositories.len()
            ))
            .await?,
        1,
        "the unreachable repositories are recorded"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_genuine_deletion_applies_once_github_confirms_it_and_an_unconfirmed_one_changes_nothing()
-> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let (kept, gone) = (stack.repositories[0], stack.repositories[1]);

    // GitHub still shows `kept`: its deletion is recorded as unconfirmed and changes nothing.
    let before = a_footprint(&stack).await?;
    let unconfirmed = stack.sim.model(|m| {
        let r = m.repository(kept).expect("repository exists");
        repository_payload(m, "deleted", r, None)
    });
    stack.deliver("repository", &unconfirmed).await?;
    // A rename GitHub does not report either.
    let mut renamed = stack.sim.model(|m| {
        let r = m.repository(kept).expect("repository exists");
        repository_payload(m, "renamed", r, Some(renamed_changes("repo-0")))
    });
    renamed["repository"]["name"] = Value::from("not-renamed");
    stack.deliver("repository", &renamed).await?;
    stack.settle().await?;
    assert_eq!(a_footprint(&stack).await?, before);
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM connection_activity WHERE connection_id = '{}'
                  AND activity = 'github_repository_event_unconfirmed'",
                stack.conn
            ))
            .await?,
        2
    );

    // `unread` is deleted upstream, but GitHub cannot be read: nothing changes either.
    let unread = stack.repositories[2];
    let deleted = stack.sim.model(|m| {
        let r = m.repository(unread).expect("repository exists").clone();
        let payload = repository_payload(m, "deleted", &r, None);
        m.delete_repository(unread);
        payload
    });
    stack.sim.inject(Fault::always(
        ops::GET_REPOSITORY_BY_ID,
        FaultKind::Status(403),
    ));
    stack.deliver("repository", &deleted).await?;
    stack.settle().await?;
    assert_eq!(a_footprint(&stack).await?, before);
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM connection_activity WHERE connection_id = '{}'
                  AND activity = 'github_repository_event_unconfirmed'
                  AND detail->>'reason' LIKE 'reading the repository failed%'",
                stack.conn
            ))
            .await?,
        1
    );
    stack.sim.clear_faults();

    // `gone` is deleted upstream: confirmed by a 404 to A's credentials, its mirror goes.
    let deleted = stack.sim.model(|m| {
        let r = m.repository(gone).expect("repository exists").clone();
        let payload = repository_payload(m, "deleted", &r, None);
        m.delete_repository(gone);
        payload
    });
    stack.deliver("repository", &deleted).await?;
    stack.settle().await?;
    let native = i64::try_from(gone)?;
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM repository WHERE native_id = {native}"
            ))
            .await?,
        0
    );
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM repository_to_monitor WHERE native_id = {native}"
            ))
            .await?,
        0
    );
    assert_eq!(stack.out_of_scope().await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_connections_404_never_removes_a_mirror_another_connection_monitors() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let b = with_b(&stack).await?;
    let shared = stack.repositories[0];
    let native = i64::try_from(shared)?;
    // B's connection also covers the repository (as its own listing would have bound it).
    sqlx::query(
        "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id)
         VALUES ($1, $2, $3, 'acme', 'repo-0', $4)",
    )
    .bind(Uuid::now_v7())
    .bind(b.ws.parse::<Uuid>()?)
    .bind(b.conn.parse::<Uuid>()?)
    .bind(native)
    .execute(&stack.pool)
    .await?;

    // A loses access (the repository leaves A's installation): A's credentials get a 404.
    let deleted = stack.sim.model(|m| {
        let payload = repository_payload(
            m,
            "deleted",
            m.repository(shared).expect("repository exists"),
            None,
        );
        m.set_repository_installation(shared, None);
        payload
    });
    stack.deliver("repository", &deleted).await?;
    stack.settle().await?;

    // A's monitor goes; the shared row and B's monitor stay for B's own reconcile to decide.
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM repository_to_monitor
                  WHERE native_id = {native} AND connection_id = '{}'",
                stack.conn
            ))
            .await?,
        0
    );
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM repository_to_monitor
                  WHERE native_id = {native} AND connection_id = '{}'",
                b.conn
            ))
            .await?,
        1
    );
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM repository WHERE native_id = {native}"
            ))
            .await?,
        1
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_genuine_rename_binds_no_other_connections_name_only_monitor() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let b = with_b(&stack).await?;
    let repo = stack.repositories[0];
    // B names A's repository in a monitor of its own, never resolved with B's credentials.
    sqlx::query(
        "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name)
         VALUES ($1, $2, $3, 'acme', 'repo-0')",
    )
    .bind(Uuid::now_v7())
    .bind(b.ws.parse::<Uuid>()?)
    .bind(b.conn.parse::<Uuid>()?)
    .execute(&stack.pool)
    .await?;

    // A's genuine rename, confirmed with A's credentials, re-keys A's monitor ...
    let payload = stack.sim.model(|m| {
        m.rename_repository(repo, "renamed-0");
        let r = m.repository(repo).expect("repository exists");
        repository_payload(m, "renamed", r, Some(renamed_changes("repo-0")))
    });
    stack.deliver("repository", &payload).await?;
    stack.settle().await?;
    assert!(
        monitors_of(&stack, &stack.conn)
            .await?
            .contains(&("acme/renamed-0".into(), Some(i64::try_from(repo)?)))
    );
    // ... and leaves B's name-only monitor unbound: a bound id would admit B's writes.
    assert!(
        monitors_of(&stack, &b.conn)
            .await?
            .contains(&("acme/repo-0".into(), None))
    );
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM repository_to_monitor
                  WHERE connection_id = '{}' AND native_id = {repo}",
                b.conn
            ))
            .await?,
        0
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_connections_own_delivery_writes_nothing() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let target = stack.repositories[0];
    let (number, native) = first_issue(&stack, target);
    let row_before = issue_row(&stack, native).await?;

    // A pauses: its mirror stays readable, but nothing writes to it any more.
    sqlx::query("UPDATE connection SET status = 'paused' WHERE id = $1")
        .bind(stack.conn.parse::<Uuid>()?)
        .execute(&stack.pool)
        .await?;
    let genuine = stack.sim.model(|m| {
        m.update_issue(target, number, |i| {
            i.title = "edited while paused".into();
            i.updated_at += time::Duration::HOUR;
        });
        let r = m.repository(target).expect("repository exists");
        issues_payload(m, "edited", r, r.issue(number).expect("issue exists"))
    });
    stack.deliver("issues", &genuine).await?;
    stack.settle().await?;

    assert_eq!(
        issue_row(&stack, native).await?,
        row_before,
        "a paused connection's webhook wrote"
    );
    Ok(())
}

/// Whoever signed it, a delivery dated past its receipt (plus the skew allowed) is refused with
/// its reason before any writer runs: the row keeps its version, the reason is recorded on the
/// connection's activity and counted, and A's genuine update applies after it (nothing was
/// frozen).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delivery_dated_in_the_future_is_refused_with_its_reason_and_freezes_nothing()
-> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let target = stack.repositories[0];
    let (number, native) = first_issue(&stack, target);
    let row_before = issue_row(&stack, native).await?;
    let mut ahead = stack.sim.model(|m| {
        let r = m.repository(target).expect("repository exists");
        issues_payload(m, "edited", r, r.issue(number).expect("issue exists"))
    });
    ahead["issue"]["title"] = Value::from("dated ahead");
    ahead["issue"]["updated_at"] = Value::from("2099-01-01T00:00:00Z");
    // Signed by A's own endpoint: admission alone would let it through.
    stack.deliver("issues", &ahead).await?;
    stack.settle().await?;
    assert_eq!(
        issue_row(&stack, native).await?,
        row_before,
        "the row changed"
    );
    let (reason,): (String,) = sqlx::query_as(
        "SELECT detail ->> 'reason' FROM connection_activity WHERE activity = 'webhook_future_time'",
    )
    .fetch_one(&stack.pool)
    .await?;
    assert!(
        reason.contains("2099") && reason.contains("clock skew"),
        "{reason}"
    );
    // The vendor's clock is at fault, not the message: replaying it would be refused again,
    // so it is acknowledged rather than kept as a dead message.
    let (dead,): (i64,) = sqlx::query_as("SELECT count(*) FROM dead_message")
        .fetch_one(&stack.pool)
        .await?;
    assert_eq!(dead, 0);
    assert_eq!(stack.rejected("future_time").await?, 1);

    let genuine = stack.sim.model(|m| {
        m.update_issue(target, number, |i| {
            i.title = "edited by A".into();
            i.updated_at += time::Duration::HOUR;
        });
        let r = m.repository(target).expect("repository exists");
        issues_payload(m, "edited", r, r.issue(number).expect("issue exists"))
    });
    stack.deliver("issues", &genuine).await?;
    stack.settle().await?;
    let (_, title, _) = issue_row(&stack, native).await?;
    assert_eq!(title.as_deref(), Some("edited by A"));
    Ok(())
}
