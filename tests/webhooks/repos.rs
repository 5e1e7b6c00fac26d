//! Repository identity: renames re-key the mirror and the monitors in real time, transfers heal
//! on the next reconcile, a reused name never reaches the first repository's rows, misfiled work
//! moves to the repository GitHub reports (or is skipped, with its reason), and the
//! installation's repository selection changes the monitors.

use std::time::Duration;

use anyhow::Result;
use serde_json::Value;
use uuid::Uuid;
use vendor_sim::github::webhook::reviews::{Comment, issue_comment_payload};
use vendor_sim::github::webhook::{
    installation_payload, installation_repositories_payload, issues_payload, pull_request_payload,
    renamed_changes, repository_payload, transferred_changes,
};
use vendor_sim::github::{Fault, FaultKind, NewIssue, Scenario, ops};

use crate::support::LiveStack;

fn scenario() -> Scenario {
    Scenario {
        repositories: 3,
        items: 30,
        ..Scenario::default()
    }
}

/// Waits until the repository consumer filters `github.<owner>.<repo>.>`.
pub(crate) async fn wait_for_filter(stack: &LiveStack, owner: &str, repo: &str) -> Result<()> {
    let token = format!(".{owner}.{repo}.");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let ns = stack.env.bus.namespace();
    loop {
        let stream = stack
            .env
            .bus
            .jetstream()
            .get_stream(ns.name(bus::Stream::WebhooksGithub.name()))
            .await?;
        if let Ok(info) = stream
            .consumer_info(ns.name("github-sync-repository-events"))
            .await
        {
            let config = &info.config;
            if config
                .filter_subjects
                .iter()
                .chain(std::iter::once(&config.filter_subject))
                .any(|f| f.contains(&token))
            {
                return Ok(());
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the consumer never filtered {owner}/{repo}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The mirrored repository row of a native id: (row id, owner, name).
async fn repository_row(stack: &LiveStack, native_id: u64) -> Result<(Uuid, String, String)> {
    Ok(
        sqlx::query_as("SELECT id, owner, name FROM repository WHERE native_id = $1")
            .bind(i64::try_from(native_id)?)
            .fetch_one(&stack.pool)
            .await?,
    )
}

/// Every monitor's (owner/name, native id), sorted.
async fn monitors(stack: &LiveStack) -> Result<Vec<(String, Option<i64>)>> {
    let rows: Vec<(String, Option<i64>)> = sqlx::query_as(
        "SELECT owner || '/' || name, native_id FROM repository_to_monitor ORDER BY 1",
    )
    .fetch_all(&stack.pool)
    .await?;
    Ok(rows)
}

/// The repository rows an item of `table` with `native_id` is filed under.
async fn filed_under(stack: &LiveStack, table: &str, native_id: u64) -> Result<Vec<Uuid>> {
    let rows: Vec<(Uuid,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT repository_id FROM {table} WHERE native_id = $1 ORDER BY 1"
    )))
    .bind(i64::try_from(native_id)?)
    .fetch_all(&stack.pool)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// A new issue in `repo` and its `issues.opened` payload.
pub(crate) fn open_issue(stack: &LiveStack, repo: u64, title: &str) -> (u64, Value) {
    stack.sim.model(|m| {
        let issue = m
            .add_issue(
                repo,
                NewIssue {
                    title: title.to_owned(),
                    ..NewIssue::default()
                },
            )
            .expect("repository exists");
        let r = m.repository(repo).expect("repository exists");
        (issue.database_id, issues_payload(m, "opened", r, &issue))
    })
}

/// Edits issue `number` of `repo` upstream (an hour later) and returns (native id, payload).
fn edit_issue(stack: &LiveStack, repo: u64, number: u64) -> (u64, Value) {
    stack.sim.model(|m| {
        m.update_issue(repo, number, |i| {
            i.title = format!("{} (edited)", i.title);
            i.updated_at += time::Duration::HOUR;
        });
        let r = m.repository(repo).expect("repository exists");
        let issue = r.issue(number).expect("issue exists");
        (issue.database_id, issues_payload(m, "edited", r, issue))
    })
}

fn installation_id(stack: &LiveStack) -> u64 {
    stack
        .sim
        .model(|m| m.installations().next().map(|i| i.id))
        .expect("the scenario has an installation")
}

#[tokio::test]
async fn rename_rekeys_the_mirrored_row_and_every_monitor_and_later_webhooks_apply() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let repo = stack.repositories[0];
    let payload = stack.sim.model(|m| {
        m.rename_repository(repo, "renamed-0");
        let r = m.repository(repo).expect("repository exists");
        repository_payload(m, "renamed", r, Some(renamed_changes("repo-0")))
    });
    stack.deliver("repository", &payload).await?;
    stack.settle().await?;

    let (row, owner, name) = repository_row(&stack, repo).await?;
    assert_eq!((owner.as_str(), name.as_str()), ("acme", "renamed-0"));
    let monitors = monitors(&stack).await?;
    assert!(monitors.contains(&("acme/renamed-0".into(), Some(i64::try_from(repo)?))));
    assert!(!monitors.iter().any(|(n, _)| n == "acme/repo-0"));

    // The consumer follows the new name: an issue opened afterwards is applied.
    wait_for_filter(&stack, "acme", "renamed-0").await?;
    let (issue, payload) = open_issue(&stack, repo, "after the rename");
    stack.deliver("issues", &payload).await?;
    stack.settle().await?;
    assert_eq!(filed_under(&stack, "issue", issue).await?, vec![row]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_older_rename_changes_nothing() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let repo = stack.repositories[0];
    let (older, newer) = stack.sim.model(|m| {
        let r = m.repository(repo).expect("repository exists").clone();
        let older = repository_payload(m, "renamed", &r, Some(renamed_changes("repo-0")));
        let mut newer = older.clone();
        set_rename(&mut newer, "second", "first");
        let mut older = older;
        set_rename(&mut older, "first", "repo-0");
        m.rename_repository(repo, "second");
        (older, newer)
    });
    // The older rename's confirmation is held back; GitHub names the repository as that rename
    // does when it finally answers, so only the dates tell the two renames apart.
    let reads = stack.sim.calls(ops::GET_REPOSITORY_BY_ID);
    stack.sim.inject(Fault::nth(
        ops::GET_REPOSITORY_BY_ID,
        reads + 1,
        FaultKind::Delay(Duration::from_secs(3)),
    ));
    stack.sim.inject(Fault::nth(
        ops::GET_REPOSITORY_BY_ID,
        reads + 1,
        FaultKind::mutate(move |m| {
            m.rename_repository(repo, "first");
        }),
    ));
    stack.deliver("repository", &older).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while stack.sim.calls(ops::GET_REPOSITORY_BY_ID) <= reads {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the older rename was never read"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Received later, applied first.
    stack.deliver("repository", &newer).await?;
    let pool = &stack.pool;
    forgesync_e2e::eventually("the newer rename did not apply", || async move {
        let (name,): (String,) = sqlx::query_as("SELECT name FROM repository WHERE native_id = $1")
            .bind(i64::try_from(repo)?)
            .fetch_one(pool)
            .await?;
        Ok((name == "second").then_some(()))
    })
    .await?;
    stack.settle().await?;

    let (_, owner, name) = repository_row(&stack, repo).await?;
    assert_eq!((owner.as_str(), name.as_str()), ("acme", "second"));
    let monitors = monitors(&stack).await?;
    assert!(monitors.contains(&("acme/second".into(), Some(i64::try_from(repo)?))));
    assert!(!monitors.iter().any(|(n, _)| n == "acme/first"));
    Ok(())
}

/// Sets a `repository.renamed` payload's new name and the name it had before.
fn set_rename(payload: &mut Value, name: &str, from: &str) {
    payload["repository"]["name"] = Value::from(name);
    payload["repository"]["full_name"] = Value::from(format!("acme/{name}"));
    payload["changes"] = renamed_changes(from);
}

#[tokio::test]
async fn transfer_heals_on_the_next_reconcile_by_native_id() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let repo = stack.repositories[0];
    // Moved to an owner the installation does not cover.
    let payload = stack.sim.model(|m| {
        m.transfer_repository(repo, "globex", None);
        let r = m.repository(repo).expect("repository exists");
        let changes = transferred_changes(m, "acme");
        repository_payload(m, "transferred", r, Some(changes))
    });
    stack.deliver("repository", &payload).await?;
    stack.settle().await?;

    stack.reconcile().await?;
    stack.finished_jobs("RECONCILIATION", 1).await?;
    let (row, owner, name) = repository_row(&stack, repo).await?;
    assert_eq!((owner.as_str(), name.as_str()), ("globex", "repo-0"));
    let monitors = monitors(&stack).await?;
    assert!(monitors.contains(&("globex/repo-0".into(), Some(i64::try_from(repo)?))));
    assert!(!monitors.iter().any(|(n, _)| n == "acme/repo-0"));

    wait_for_filter(&stack, "globex", "repo-0").await?;
    let (issue, payload) = open_issue(&stack, repo, "after the transfer");
    stack.deliver("issues", &payload).await?;
    stack.settle().await?;
    assert_eq!(filed_under(&stack, "issue", issue).await?, vec![row]);
    Ok(())
}

#[tokio::test]
async fn a_reused_name_never_reaches_the_first_repositorys_rows() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let first = stack.repositories[0];
    let installation = installation_id(&stack);
    let renamed = stack.sim.model(|m| {
        m.rename_repository(first, "renamed-0");
        let r = m.repository(first).expect("repository exists");
        repository_payload(m, "renamed", r, Some(renamed_changes("repo-0")))
    });
    stack.deliver("repository", &renamed).await?;
    stack.settle().await?;
    let (first_row, _, _) = repository_row(&stack, first).await?;
    let first_issues = stack
        .count(&format!(
            "SELECT count(*) FROM issue WHERE repository_id = '{first_row}'"
        ))
        .await?;

    // A new repository takes the old name and joins the installation.
    let (second, added) = stack.sim.model(|m| {
        let second = m.add_repository(Some(installation), "acme", "repo-0");
        let payload = installation_repositories_payload(m, "added", installation, &[second]);
        (second, payload)
    });
    stack.deliver("installation_repositories", &added).await?;
    stack.settle().await?;
    wait_for_filter(&stack, "acme", "repo-0").await?;
    let (issue, payload) = open_issue(&stack, second, "in the new repo-0");
    stack.deliver("issues", &payload).await?;
    stack.settle().await?;

    let (second_row, _, name) = repository_row(&stack, second).await?;
    assert_eq!(name, "repo-0");
    assert_ne!(second_row, first_row);
    assert_eq!(filed_under(&stack, "issue", issue).await?, vec![second_row]);
    let (_, _, first_name) = repository_row(&stack, first).await?;
    assert_eq!(first_name, "renamed-0");
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM issue WHERE repository_id = '{first_row}'"
            ))
            .await?,
        first_issues
    );
    Ok(())
}

#[tokio::test]
async fn misfiled_work_moves_to_the_reported_repository_or_is_skipped_with_its_reason() -> Result<()>
{
    let stack = LiveStack::start(scenario()).await?;
    let (holder, reported) = (stack.repositories[0], stack.repositories[1]);
    let (holder_row, _, _) = repository_row(&stack, holder).await?;
    let (reported_row, _, _) = repository_row(&stack, reported).await?;
    let numbers: Vec<u64> = stack.sim.model(|m| {
        let r = m.repository(reported).expect("repository exists");
        r.issues().map(|i| i.number).take(3).collect()
    });
    let [moved, registered, held] = numbers[..] else {
        panic!("the scenario gives repo-1 three issues");
    };
    let pull = stack.sim.model(|m| {
        let r = m.repository(reported).expect("repository exists");
        r.pull_requests().next().map(|p| p.number)
    });
    let pull = pull.expect("the scenario gives repo-1 a pull request");

    // File the work under the other repository's row, as a name-based version could have.
    let native = |table: &str, number: u64| {
        format!(
            "UPDATE {table} SET repository_id = '{holder_row}'
              WHERE repository_id = '{reported_row}' AND number = {number} RETURNING id"
        )
    };
    let mut row_ids = Vec::new();
    for (table, number) in [
        ("issue", moved),
        ("issue", registered),
        ("issue", held),
        ("pull_request", pull),
    ] {
        let (id,): (Uuid,) = sqlx::query_as(sqlx::AssertSqlSafe(native(table, number)))
            .fetch_one(&stack.pool)
            .await?;
        row_ids.push(id);
    }
    // A workspace registered an item for one of them.
    sqlx::query(
        "INSERT INTO item_event (id, issue_id, name, source_key, version, origin)
         VALUES ($1, $2, 'scm.issue.opened', 'registered', now(), 'webhook')",
    )
    .bind(Uuid::now_v7())
    .bind(row_ids[1])
    .execute(&stack.pool)
    .await?;
    // The reported repository holds the number of another with a row of its own (a stub).
    sqlx::query(
        "INSERT INTO issue (id, repository_id, native_id, node_id, number, state,
                            upstream_created_at, upstream_updated_at)
         VALUES ($1, $2, 999999999, 'stub', $3, 'open', now(), now())",
    )
    .bind(Uuid::now_v7())
    .bind(reported_row)
    .bind(i32::try_from(held)?)
    .execute(&stack.pool)
    .await?;

    let mut natives = Vec::new();
    for number in [moved, registered, held] {
        let (native, payload) = edit_issue(&stack, reported, number);
        natives.push(native);
        stack.deliver("issues", &payload).await?;
    }
    let (pull_native, pull_payload) = stack.sim.model(|m| {
        m.update_pull_request(reported, pull, |p| p.updated_at += time::Duration::HOUR);
        let r = m.repository(reported).expect("repository exists");
        let p = r.pull_request(pull).expect("pull request exists");
        (p.database_id, pull_request_payload(m, "edited", r, p))
    });
    stack.deliver("pull_request", &pull_payload).await?;
    stack.settle().await?;

    // Moved: the same row, now under the repository GitHub reports, edited.
    assert_eq!(
        filed_under(&stack, "issue", natives[0]).await?,
        vec![reported_row]
    );
    let (title_edited,): (bool,) =
        sqlx::query_as("SELECT title LIKE '%(edited)' FROM issue WHERE id = $1")
            .bind(row_ids[0])
            .fetch_one(&stack.pool)
            .await?;
    assert!(title_edited, "the moved row took the edit");
    assert_eq!(
        filed_under(&stack, "pull_request", pull_native).await?,
        vec![reported_row]
    );
    // Skipped, itemRegistered and idHeldByAnotherRepository: left with the holding repository,
    // and no second row under the reported one.
    for native in &natives[1..] {
        assert_eq!(
            filed_under(&stack, "issue", *native).await?,
            vec![holder_row]
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_installations_repository_selection_changes_the_monitors() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let installation = installation_id(&stack);
    let (fresh, added) = stack.sim.model(|m| {
        let fresh = m.add_repository(Some(installation), "acme", "fresh");
        (
            fresh,
            installation_repositories_payload(m, "added", installation, &[fresh]),
        )
    });
    stack.deliver("installation_repositories", &added).await?;
    stack.settle().await?;
    assert!(
        monitors(&stack)
            .await?
            .contains(&("acme/fresh".into(), Some(i64::try_from(fresh)?)))
    );
    wait_for_filter(&stack, "acme", "fresh").await?;
    let (issue, payload) = open_issue(&stack, fresh, "in a repository just added");
    stack.deliver("issues", &payload).await?;
    stack.settle().await?;
    let (fresh_row, _, _) = repository_row(&stack, fresh).await?;
    assert_eq!(filed_under(&stack, "issue", issue).await?, vec![fresh_row]);

    // Removed: the monitor goes, the mirror stays for whoever else monitors it (or the eraser).
    let gone = stack.repositories[1];
    let removed = stack.sim.model(|m| {
        let payload = installation_repositories_payload(m, "removed", installation, &[gone]);
        m.set_repository_installation(gone, None);
        payload
    });
    stack.deliver("installation_repositories", &removed).await?;
    stack.settle().await?;
    let monitors = monitors(&stack).await?;
    assert!(!monitors.iter().any(|(n, _)| n == "acme/repo-1"));
    assert!(monitors.iter().any(|(n, _)| n == "acme/repo-2"));
    repository_row(&stack, gone).await?;

    // Installation actions are recorded for the connection; its state is control-api's.
    let suspend = stack
        .sim
        .model(|m| installation_payload(m, "suspend", installation));
    stack.deliver("installation", &suspend).await?;
    stack.settle().await?;
    assert_eq!(
        stack
            .count(&format!(
                "SELECT count(*) FROM connection_activity
                  WHERE connection_id = '{}' AND activity = 'github_installation_suspend'",
                stack.conn
            ))
            .await?,
        1
    );
    Ok(())
}

#[tokio::test]
async fn a_reconcile_moves_misfiled_work_and_skips_what_it_cannot() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let (holder, reported) = (stack.repositories[0], stack.repositories[1]);
    let (holder_row, _, _) = repository_row(&stack, holder).await?;
    let (reported_row, _, _) = repository_row(&stack, reported).await?;
    let issues: Vec<(u64, u64)> = stack.sim.model(|m| {
        let r = m.repository(reported).expect("repository exists");
        r.issues()
            .map(|i| (i.number, i.database_id))
            .take(2)
            .collect()
    });
    let [(moved, moved_native), (registered, registered_native)] = issues[..] else {
        panic!("the scenario gives repo-1 two issues");
    };
    let mut row_ids = Vec::new();
    for number in [moved, registered] {
        let (id,): (Uuid,) = sqlx::query_as(
            "UPDATE issue SET repository_id = $1
              WHERE repository_id = $2 AND number = $3 RETURNING id",
        )
        .bind(holder_row)
        .bind(reported_row)
        .bind(i32::try_from(number)?)
        .fetch_one(&stack.pool)
        .await?;
        row_ids.push(id);
    }
    sqlx::query(
        "INSERT INTO item_event (id, issue_id, name, source_key, version, origin)
         VALUES ($1, $2, 'scm.issue.opened', 'registered', now(), 'webhook')",
    )
    .bind(Uuid::now_v7())
    .bind(row_ids[1])
    .execute(&stack.pool)
    .await?;

    stack.reconcile().await?;
    stack.finished_jobs("RECONCILIATION", 1).await?;

    // Moved by the page that lists it: the same row, live, under the reported repository.
    assert_eq!(
        filed_under(&stack, "issue", moved_native).await?,
        vec![reported_row]
    );
    let (live,): (bool,) =
        sqlx::query_as("SELECT deleted_at IS NULL AND title IS NOT NULL FROM issue WHERE id = $1")
            .bind(row_ids[0])
            .fetch_one(&stack.pool)
            .await?;
    assert!(live, "the moved row carries the listed work");
    // Skipped (itemRegistered): no second row under the reported repository.
    assert_eq!(
        filed_under(&stack, "issue", registered_native).await?,
        vec![holder_row]
    );
    Ok(())
}

#[tokio::test]
async fn a_rename_finds_a_legacy_monitor_without_native_id_by_its_former_name() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let repo = stack.repositories[0];
    sqlx::query(
        "UPDATE repository_to_monitor SET native_id = NULL
          WHERE owner = 'acme' AND name = 'repo-0'",
    )
    .execute(&stack.pool)
    .await?;
    let payload = stack.sim.model(|m| {
        m.rename_repository(repo, "renamed-0");
        let r = m.repository(repo).expect("repository exists");
        repository_payload(m, "renamed", r, Some(renamed_changes("repo-0")))
    });
    stack.deliver("repository", &payload).await?;
    stack.settle().await?;
    // A name-only monitor admits no write: the webhook changes nothing ...
    assert!(
        monitors(&stack)
            .await?
            .contains(&("acme/repo-0".into(), None))
    );
    // ... and the connection's own reconcile, which GitHub answers under the new name, re-keys
    // the legacy monitor and binds it to the native id.
    stack.reconcile().await?;
    stack.finished_jobs("RECONCILIATION", 1).await?;
    let monitors = monitors(&stack).await?;
    assert!(monitors.contains(&("acme/renamed-0".into(), Some(i64::try_from(repo)?))));
    assert!(!monitors.iter().any(|(n, _)| n == "acme/repo-0"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_comment_moves_misfiled_work_before_it_stubs_and_is_dropped_on_skipped_work() -> Result<()>
{
    let stack = LiveStack::start(scenario()).await?;
    let (holder, reported) = (stack.repositories[0], stack.repositories[1]);
    let (holder_row, _, _) = repository_row(&stack, holder).await?;
    let (reported_row, _, _) = repository_row(&stack, reported).await?;
    let (moved, registered) = stack.sim.model(|m| {
        let r = m.repository(reported).expect("repository exists");
        let mut issues = r.issues().cloned();
        (issues.next().unwrap(), issues.next().unwrap())
    });
    // Both filed under the other repository's row; a workspace registered the second.
    let mut ids = Vec::new();
    for issue in [&moved, &registered] {
        let (id,): (Uuid,) = sqlx::query_as(
            "UPDATE issue SET repository_id = $1 WHERE repository_id = $2 AND native_id = $3
             RETURNING id",
        )
        .bind(holder_row)
        .bind(reported_row)
        .bind(i64::try_from(issue.database_id)?)
        .fetch_one(&stack.pool)
        .await?;
        ids.push(id);
    }
    sqlx::query(
        "INSERT INTO item_event (id, issue_id, name, source_key, version, origin)
         VALUES ($1, $2, 'scm.issue.opened', 'registered', now(), 'webhook')",
    )
    .bind(Uuid::now_v7())
    .bind(ids[1])
    .execute(&stack.pool)
    .await?;

    let at = time::OffsetDateTime::now_utc().replace_nanosecond(0)?;
    for (issue, comment_id) in [(&moved, 70_001), (&registered, 70_002)] {
        let payload = stack.sim.model(|m| {
            let r = m.repository(reported).expect("repository exists");
            let comment = Comment {
                id: comment_id,
                author: "dev".into(),
                body: "on misfiled work".into(),
                created_at: at,
                updated_at: at,
            };
            issue_comment_payload(m, "created", r, issue, &comment)
        });
        stack.deliver("issue_comment", &payload).await?;
    }
    stack.settle().await?;

    // Moved: the row itself now sits under the reported repository, with the comment; no stub.
    assert_eq!(
        filed_under(&stack, "issue", moved.database_id).await?,
        vec![reported_row]
    );
    let (on_moved,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM comment WHERE native_id = 70001 AND issue_id = $1")
            .bind(ids[0])
            .fetch_one(&stack.pool)
            .await?;
    assert_eq!(on_moved, 1);
    // Skipped (itemRegistered): the row stays, and the comment is dropped rather than stubbed.
    assert_eq!(
        filed_under(&stack, "issue", registered.database_id).await?,
        vec![holder_row]
    );
    assert_eq!(
        stack
            .count("SELECT count(*) FROM comment WHERE native_id = 70002")
            .await?,
        0
    );
    Ok(())
}
