//! gitlab-sync's webhook consumers, running in-process against real Postgres and JetStream and
//! the simulated GitLab (`common`): deliveries are stored as ingress stores them, relayed as
//! ingress's relay would and consumed. Bodies are the simulator's real-shaped hooks.

mod common;

use std::ops::Deref;

use anyhow::Result;
use common::{Setup, Stack, Tenant, at};
use lifecycle_core::source_key::LifecycleChange;
use serde_json::Value as Json;
use sync_engine::JobOutcome;
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::gitlab::webhook::{issue_hook, merge_request_hook, note_hook, pipeline_hook};
use vendor_sim::gitlab::{
    DiffPosition, Fault, GitlabFault, Model, NewIssue, NewMergeRequest, NoteOn, ops,
};

/// The projects of the simulated instance (native ids).
struct Projects {
    /// `acme/api`: discovered and monitored by A.
    api: u64,
    /// `acme/team/new`: in A's group and selection, not discovered yet.
    fresh: u64,
    /// `acme/hidden`: in A's group, not selected.
    hidden: u64,
    /// `other/x`: outside A's group.
    outside: u64,
}

struct World {
    stack: Stack,
    a: Tenant,
    b: Tenant,
    p: Projects,
}

impl Deref for World {
    type Target = Stack;

    fn deref(&self) -> &Stack {
        &self.stack
    }
}

impl World {
    /// A (group `acme`, selecting `acme/api` and `acme/team/new`, monitoring `acme/api`) and B
    /// (group `globex`) on one GitLab instance, and gitlab-sync running.
    async fn start() -> Result<World> {
        let mut model = Model::default();
        model.add_token("token-a");
        model.add_token("token-b");
        let acme = model.add_group(None, "acme");
        let team = model.add_group(Some(acme), "team");
        let other = model.add_group(None, "other");
        model.add_group(None, "globex");
        let p = Projects {
            api: model.add_project(acme, "api"),
            fresh: model.add_project(team, "new"),
            hidden: model.add_project(acme, "hidden"),
            outside: model.add_project(other, "x"),
        };
        let setup = Setup::new(model).await?;
        let settings_a =
            serde_json::json!({"group": "acme", "projects": ["acme/api", "acme/team/new"]});
        let a = setup.tenant(settings_a, "token-a").await?;
        let b = setup
            .tenant(serde_json::json!({"group": "globex"}), "token-b")
            .await?;
        setup.monitor(a, "acme", "api", p.api).await?;
        Ok(World {
            stack: setup.run().await?,
            a,
            b,
            p,
        })
    }

    /// The body of `build` over the simulator's model.
    fn body(&self, build: impl FnOnce(&mut Model) -> Json) -> Json {
        self.sim.model(build)
    }

    /// (title, state, author) of the merge request `iid` of project `native_id`.
    async fn merge_request(
        &self,
        native_id: u64,
        iid: i32,
    ) -> Result<Option<(String, String, Option<String>)>> {
        Ok(sqlx::query_as(
            "SELECT p.title, p.state, p.author FROM pull_request p
               JOIN repository r ON r.id = p.repository_id
              WHERE r.native_id = $1 AND p.number = $2",
        )
        .bind(native_id as i64)
        .bind(iid)
        .fetch_optional(self.pool())
        .await?)
    }

    /// (name, source key, occurred at, origin) of every item event of item `number` (an
    /// issue's or a merge request's: they share the project's numbers).
    async fn item_events(&self, number: u64) -> Result<Vec<ItemEventRow>> {
        Ok(sqlx::query_as(
            "SELECT e.name, e.source_key, e.occurred_at, e.origin FROM item_event e
               LEFT JOIN issue i ON i.id = e.issue_id
               LEFT JOIN pull_request p ON p.id = e.pull_request_id
              WHERE coalesce(i.number, p.number) = $1 ORDER BY e.name",
        )
        .bind(number as i32)
        .fetch_all(self.pool())
        .await?)
    }

    /// (state, closed_at, merged_at) of merge request `number` as stored.
    async fn merge_request_times(&self, number: u64) -> Result<ItemTimes> {
        Ok(
            sqlx::query_as(
                "SELECT state, closed_at, merged_at FROM pull_request WHERE number = $1",
            )
            .bind(number as i32)
            .fetch_one(self.pool())
            .await?,
        )
    }

    async fn stop(self) -> Result<()> {
        self.stack.stop().await
    }
}

/// A review comment: native id, the comment it answers, path, line.
type ThreadRow = (i64, Option<i64>, Option<String>, Option<i32>);

/// An item event: name, source key, occurred at, origin.
type ItemEventRow = (String, Option<String>, Option<OffsetDateTime>, String);

/// A merge request's state, closed_at and merged_at.
type ItemTimes = (String, Option<OffsetDateTime>, Option<OffsetDateTime>);

/// The item event row a close or a merge at `at` records, from whichever path.
fn lifecycle_event(
    name: &str,
    change: LifecycleChange<'_>,
    at: OffsetDateTime,
    origin: &str,
) -> ItemEventRow {
    (
        name.to_owned(),
        Some(change.source_key().as_str().to_owned()),
        Some(at),
        origin.to_owned(),
    )
}

#[tokio::test]
async fn applied_then_redelivery_and_older_copies_change_nothing() -> Result<()> {
    let w = World::start().await?;
    let api = w.p.api;
    let iid = w.sim.model(|m| {
        m.add_merge_request(
            api,
            NewMergeRequest {
                title: "first".into(),
                updated_at: at(10),
            },
        )
    });
    let opened = w.body(|m| {
        let mr = m.merge_requests[&(api, iid)].clone();
        merge_request_hook(m, &mr, "open", None)
    });
    let first = w.registered(w.a, &opened, None).await?;
    w.settle().await?;
    assert_eq!(
        w.merge_request(api, iid as i32).await?,
        Some(("first".into(), "open".into(), Some("alice".into())))
    );
    let opened_events = "SELECT count(*) FROM item_event WHERE name = 'scm.pull_request.opened'";
    assert_eq!(w.count(opened_events).await?, 1);

    // The same delivery again, and an older copy with another title: nothing moves.
    w.registered(w.a, &opened, Some(first)).await?;
    let older = w.body(|m| {
        let mut mr = m.merge_requests[&(api, iid)].clone();
        mr.title = "older".into();
        mr.updated_at = at(5);
        merge_request_hook(m, &mr, "update", None)
    });
    w.registered(w.a, &older, None).await?;
    w.settle().await?;
    assert_eq!(
        w.merge_request(api, iid as i32).await?,
        Some(("first".into(), "open".into(), Some("alice".into())))
    );
    assert_eq!(w.count(opened_events).await?, 1, "one opened event");

    // A newer edit applies and keeps the author an update hook does not name.
    let edited = w.body(|m| {
        m.update_merge_request(api, iid, |mr| {
            mr.title = "second".into();
            mr.updated_at = at(20);
        });
        let mr = m.merge_requests[&(api, iid)].clone();
        merge_request_hook(m, &mr, "update", None)
    });
    w.registered(w.a, &edited, None).await?;

    // Notes: a plain note, a diff note and its reply; an issue's close.
    let (plain, diff, reply) = w.sim.model(|m| {
        let on = NoteOn::MergeRequest(api, iid);
        let plain = m.add_note(on, "looks good", false, None);
        let diff = m.add_diff_note(on, "nit", DiffPosition::line("src/lib.rs", 7, "abc"));
        let reply = m.add_reply(diff, "fixed").unwrap();
        (plain, diff, reply)
    });
    for id in [plain, diff, reply] {
        let body = w.body(|m| {
            let n = m.notes[&id].clone();
            note_hook(m, &n, "create")
        });
        w.registered(w.a, &body, None).await?;
    }
    let issue = w.sim.model(|m| {
        m.add_issue(
            api,
            NewIssue {
                title: "bug".into(),
                updated_at: at(30),
            },
        )
    });
    let closed = w.body(|m| {
        m.update_issue(api, issue, |i| {
            i.state = "closed".into();
            i.updated_at = at(40);
        });
        let i = m.issues[&(api, issue)].clone();
        issue_hook(m, &i, "close", None)
    });
    w.registered(w.a, &closed, None).await?;
    w.settle().await?;

    assert_eq!(
        w.merge_request(api, iid as i32).await?,
        Some(("second".into(), "open".into(), Some("alice".into())))
    );
    assert_eq!(
        w.count(&format!(
            "SELECT count(*) FROM comment WHERE native_id = {plain} AND body = 'looks good'"
        ))
        .await?,
        1
    );
    let thread: Vec<ThreadRow> = sqlx::query_as(
        "SELECT c.native_id, c.in_reply_to, c.path, c.line FROM review_comment c
           JOIN review_thread t ON t.id = c.thread_id ORDER BY c.native_id",
    )
    .fetch_all(w.pool())
    .await?;
    assert_eq!(
        thread,
        [
            (diff as i64, None, Some("src/lib.rs".into()), Some(7)),
            (
                reply as i64,
                Some(diff as i64),
                Some("src/lib.rs".into()),
                Some(7)
            ),
        ]
    );
    let closed_issue: (String, Option<time::OffsetDateTime>) =
        sqlx::query_as("SELECT state, closed_at FROM issue WHERE number = $1")
            .bind(issue as i32)
            .fetch_one(w.pool())
            .await?;
    assert_eq!(closed_issue, ("closed".into(), Some(at(40))));
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

#[tokio::test]
async fn an_undiscovered_projects_first_merge_request_hook_admits_it() -> Result<()> {
    let w = World::start().await?;
    let fresh = w.p.fresh;
    let body = w.body(|m| {
        let iid = m.add_merge_request(
            fresh,
            NewMergeRequest {
                title: "new work".into(),
                updated_at: at(1),
            },
        );
        let mr = m.merge_requests[&(fresh, iid)].clone();
        merge_request_hook(m, &mr, "open", None)
    });
    w.registered(w.a, &body, None).await?;
    w.settle().await?;
    let monitor: Option<(String, String, Option<i64>)> = sqlx::query_as(
        "SELECT owner, name, native_id FROM repository_to_monitor WHERE connection_id = $1 AND native_id = $2",
    )
    .bind(w.a.connection_id)
    .bind(fresh as i64)
    .fetch_optional(w.pool())
    .await?;
    assert_eq!(
        monitor,
        Some(("acme/team".into(), "new".into(), Some(fresh as i64)))
    );
    assert_eq!(
        w.merge_request(fresh, 1).await?.map(|(title, ..)| title),
        Some("new work".into())
    );
    assert!(w.sim.calls(vendor_sim::gitlab::ops::PROJECT_BY_ID) >= 1);
    w.stop().await
}

#[tokio::test]
async fn a_project_outside_the_group_or_the_selection_stores_nothing() -> Result<()> {
    let w = World::start().await?;
    for project in [w.p.outside, w.p.hidden] {
        let body = w.body(|m| {
            let iid = m.add_merge_request(
                project,
                NewMergeRequest {
                    title: "not ours".into(),
                    updated_at: at(1),
                },
            );
            let mr = m.merge_requests[&(project, iid)].clone();
            merge_request_hook(m, &mr, "open", None)
        });
        w.registered(w.a, &body, None).await?;
    }
    w.settle().await?;
    // Asked GitLab, refused, acknowledged: no monitor, no project row, no merge request.
    assert!(w.sim.calls(vendor_sim::gitlab::ops::PROJECT_BY_ID) >= 2);
    assert_eq!(
        w.count("SELECT count(*) FROM repository_to_monitor")
            .await?,
        1
    );
    assert_eq!(w.count("SELECT count(*) FROM repository").await?, 0);
    assert_eq!(w.count("SELECT count(*) FROM pull_request").await?, 0);
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

#[tokio::test]
async fn another_workspaces_endpoint_cannot_write_a_project_of_a() -> Result<()> {
    let w = World::start().await?;
    let api = w.p.api;
    let iid = w.sim.model(|m| {
        m.add_merge_request(
            api,
            NewMergeRequest {
                title: "A's".into(),
                updated_at: at(10),
            },
        )
    });
    let genuine = w.body(|m| {
        let mr = m.merge_requests[&(api, iid)].clone();
        merge_request_hook(m, &mr, "open", None)
    });
    w.registered(w.a, &genuine, None).await?;
    w.settle().await?;
    // B forges a newer edit of A's project through its own registered route and its own
    // operator endpoint: B's token reads the project, but it is outside B's group.
    let forged = w.body(|m| {
        let mut mr = m.merge_requests[&(api, iid)].clone();
        mr.title = "B was here".into();
        mr.updated_at = at(99);
        merge_request_hook(m, &mr, "update", None)
    });
    w.registered(w.b, &forged, None).await?;
    w.operator(w.b, &forged).await?;
    w.settle().await?;
    assert_eq!(
        w.merge_request(api, iid as i32)
            .await?
            .map(|(title, ..)| title),
        Some("A's".into())
    );
    let b_monitors = format!(
        "SELECT count(*) FROM repository_to_monitor WHERE connection_id = '{}'",
        w.b.connection_id
    );
    assert_eq!(w.count(&b_monitors).await?, 0);
    // A's own operator hook on its monitored project does write.
    w.operator(w.a, &forged).await?;
    w.settle().await?;
    assert_eq!(
        w.merge_request(api, iid as i32)
            .await?
            .map(|(title, ..)| title),
        Some("B was here".into())
    );
    w.stop().await
}

#[tokio::test]
async fn a_malformed_payload_is_recorded_dead_and_changes_nothing() -> Result<()> {
    let w = World::start().await?;
    let broken = serde_json::json!({
        "object_kind": "merge_request",
        "project": {"id": w.p.api, "path_with_namespace": "acme/api"},
        "object_attributes": {"id": "not a number"},
    });
    w.registered(w.a, &broken, None).await?;
    w.settle().await?;
    let dead: Vec<(String, String)> = sqlx::query_as("SELECT consumer, reason FROM dead_message")
        .fetch_all(w.pool())
        .await?;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(
        dead[0].1.contains("malformed merge_request payload"),
        "{dead:?}"
    );
    assert_eq!(w.count("SELECT count(*) FROM pull_request").await?, 0);
    w.stop().await
}

/// A close or a merge hook names no time: the next sync that reads the request (a filtered
/// RECONCILIATION by `updatedAfter`) stores GitLab's close time (read over REST, once) or its
/// mergedAt and records the one event; an issue's close hook records its own, which that sync
/// does not repeat. Redelivered hooks and a whole sync afterwards add nothing, read no close
/// again, and keep the stored times.
#[tokio::test]
async fn a_close_or_merge_hook_then_the_sync_records_exactly_one_event() -> Result<()> {
    let w = World::start().await?;
    let api = w.p.api;
    // GitLab's readiness read after each hook fails here: the hooks alone name no merge time
    // (tests/readiness.rs proves the read that fills it).
    w.sim.inject(Fault::always(
        ops::MERGE_REQUEST_READINESS,
        GitlabFault::FieldError {
            path: "project".into(),
            message: "unavailable".into(),
        },
    ));
    let (bystander, closing, merging, issue) = w.sim.model(|m| {
        let mr = |m: &mut Model, title: &str, updated_at| {
            m.add_merge_request(
                api,
                NewMergeRequest {
                    title: title.into(),
                    updated_at,
                },
            )
        };
        let bystander = mr(m, "bystander", at(1));
        let closing = mr(m, "to close", at(10));
        let merging = mr(m, "to merge", at(10));
        let issue = m.add_issue(
            api,
            NewIssue {
                title: "bug".into(),
                updated_at: at(10),
            },
        );
        (bystander, closing, merging, issue)
    });
    assert_eq!(
        w.sync(w.a, "RECONCILIATION", "manual").await?,
        JobOutcome::Succeeded
    );
    assert_eq!(w.count("SELECT count(*) FROM item_event").await?, 0);
    assert_eq!(w.sim.calls(ops::GET_MERGE_REQUEST), 0, "nothing is closed");

    let hooks = w.body(|m| {
        m.update_merge_request(api, closing, |mr| {
            mr.state = "closed".into();
            mr.updated_at = at(20);
        });
        m.update_merge_request(api, merging, |mr| {
            mr.state = "merged".into();
            mr.updated_at = at(21);
        });
        m.update_issue(api, issue, |i| {
            i.state = "closed".into();
            i.updated_at = at(22);
        });
        serde_json::json!([
            merge_request_hook(m, &m.merge_requests[&(api, closing)], "close", None),
            merge_request_hook(m, &m.merge_requests[&(api, merging)], "merge", None),
            issue_hook(m, &m.issues[&(api, issue)], "close", None),
        ])
    });
    let mut delivered = Vec::new();
    for hook in hooks.as_array().unwrap() {
        delivered.push((w.registered(w.a, hook, None).await?, hook.clone()));
    }
    w.settle().await?;
    // The hooks store the states; only the issue's names its time.
    assert_eq!(
        w.merge_request_times(closing).await?,
        ("closed".into(), None, None)
    );
    assert_eq!(
        w.merge_request_times(merging).await?,
        ("merged".into(), None, None)
    );
    assert!(w.item_events(closing).await?.is_empty());
    assert!(w.item_events(merging).await?.is_empty());
    let issue_closed = vec![lifecycle_event(
        "scm.issue.closed",
        LifecycleChange::Close { closed_at: at(22) },
        at(22),
        "webhook",
    )];
    assert_eq!(w.item_events(issue).await?, issue_closed);

    // A bystander renamed upstream without a newer updatedAt: only a whole listing reads it,
    // so its title tells which listing ran.
    w.sim.model(|m| {
        m.merge_requests.get_mut(&(api, bystander)).unwrap().title = "renamed".into();
    });
    let world = &w;
    let title = move || async move {
        let title: String = sqlx::query_scalar("SELECT title FROM pull_request WHERE number = $1")
            .bind(bystander as i32)
            .fetch_one(world.pool())
            .await?;
        anyhow::Ok(title)
    };
    let events = move || async move {
        anyhow::Ok((
            world.item_events(closing).await?,
            world.item_events(merging).await?,
            world.item_events(issue).await?,
        ))
    };
    let closed = vec![lifecycle_event(
        "scm.pull_request.closed",
        LifecycleChange::Close { closed_at: at(20) },
        at(20),
        "sync",
    )];
    let merged = vec![lifecycle_event(
        "scm.pull_request.merged",
        LifecycleChange::Merge { merged_at: at(21) },
        at(21),
        "sync",
    )];
    let times = move || async move {
        anyhow::Ok((
            world.merge_request_times(closing).await?,
            world.merge_request_times(merging).await?,
        ))
    };
    let stored_times = (
        ("closed".to_owned(), Some(at(20)), None),
        ("merged".to_owned(), Some(at(21)), Some(at(21))),
    );

    // The filtered incremental pass stores the times GitLab reports and records each once.
    assert_eq!(
        w.sync(w.a, "RECONCILIATION", "scheduled").await?,
        JobOutcome::Succeeded
    );
    assert_eq!(title().await?, "bystander", "the pass was filtered");
    assert_eq!(times().await?, stored_times);
    // The one request closed without a merge: its close time is read over REST.
    assert_eq!(w.sim.calls(ops::GET_MERGE_REQUEST), 1);
    assert_eq!(
        events().await?,
        (closed.clone(), merged.clone(), issue_closed.clone())
    );

    // Every hook again, then a second filtered pass and a whole one: nothing new, and the
    // stored close and merge stay.
    for (first, hook) in &delivered {
        w.registered(w.a, hook, Some(*first)).await?;
    }
    w.settle().await?;
    assert_eq!(times().await?, stored_times);
    assert_eq!(
        w.sync(w.a, "RECONCILIATION", "scheduled").await?,
        JobOutcome::Succeeded
    );
    assert_eq!(
        w.sync(w.a, "RECONCILIATION", "manual").await?,
        JobOutcome::Succeeded
    );
    assert_eq!(title().await?, "renamed", "the last pass was whole");
    assert_eq!(times().await?, stored_times);
    assert_eq!(events().await?, (closed, merged, issue_closed));
    // Its close time is stored: neither pass read it again.
    assert_eq!(w.sim.calls(ops::GET_MERGE_REQUEST), 1);
    // One activity entry per event for A, the only workspace monitoring the project.
    assert_eq!(w.count("SELECT count(*) FROM activity_event").await?, 3);
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

/// Every note row of the mirror as either path writes it (row ids and mirror times aside):
/// comments, review comments with their thread, and threads.
async fn note_rows(pool: &sqlx::PgPool) -> Result<Json> {
    let rows: Vec<(Json,)> = sqlx::query_as(
        "SELECT to_jsonb(x) FROM (
           SELECT 'comment' AS t, native_id, node_id, author, body, repository_id, issue_id,
                  pull_request_id, NULL AS thread, NULL AS path, NULL::int AS line,
                  NULL AS commit_sha, NULL::bigint AS in_reply_to, upstream_created_at,
                  upstream_updated_at, deleted_at
             FROM comment
           UNION ALL
           SELECT 'review_comment', c.native_id, c.node_id, c.author, c.body, NULL, NULL,
                  c.pull_request_id, t.node_id, c.path, c.line, c.commit_sha, c.in_reply_to,
                  c.upstream_created_at, c.upstream_updated_at, c.deleted_at
             FROM review_comment c LEFT JOIN review_thread t ON t.id = c.thread_id
           UNION ALL
           SELECT 'review_thread', NULL, node_id, NULL, NULL, NULL, NULL, pull_request_id, NULL,
                  path, NULL, NULL, NULL, NULL, NULL, NULL
             FROM review_thread
         ) x ORDER BY t, native_id, node_id",
    )
    .fetch_all(pool)
    .await?;
    Ok(Json::Array(rows.into_iter().map(|(r,)| r).collect()))
}

/// A GitLab note is one row whichever path wrote it: the rows the Note Hooks write equal the
/// rows the notes pass writes from the same notes (node ids, author, thread, reply, place), a
/// system note is mirrored by neither, and a hook over the sync's rows changes nothing.
#[tokio::test]
async fn a_note_is_the_same_row_from_its_hook_and_from_the_sync() -> Result<()> {
    let w = World::start().await?;
    let api = w.p.api;
    let (mr, issue) = w.sim.model(|m| {
        let mr = m.add_merge_request(
            api,
            NewMergeRequest {
                title: "mr".into(),
                updated_at: at(10),
            },
        );
        let issue = m.add_issue(
            api,
            NewIssue {
                title: "issue".into(),
                updated_at: at(10),
            },
        );
        (mr, issue)
    });
    assert_eq!(
        w.sync(w.a, "RECONCILIATION", "manual").await?,
        JobOutcome::Succeeded
    );
    let notes = w.sim.model(|m| {
        let on = NoteOn::MergeRequest(api, mr);
        let diff = m.add_diff_note(on, "nit", DiffPosition::line("src/lib.rs", 7, "abc"));
        vec![
            m.add_note(on, "looks good", false, None),
            m.add_note(on, "approved this merge request", true, None),
            diff,
            m.add_reply(diff, "fixed").unwrap(),
            m.add_note(NoteOn::Issue(api, issue), "on the issue", false, None),
        ]
    });
    let mut delivered = Vec::new();
    for id in &notes {
        let body = w.body(|m| note_hook(m, &m.notes[id], "create"));
        delivered.push((w.registered(w.a, &body, None).await?, body));
    }
    w.settle().await?;
    let by_hooks = note_rows(w.pool()).await?;
    assert_eq!(
        by_hooks.as_array().map(Vec::len),
        Some(5),
        "two comments, two review comments, one thread: {by_hooks:#}"
    );

    // The same notes read by the sync, from nothing.
    for table in ["comment", "review_comment", "review_thread"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table}")))
            .execute(w.pool())
            .await?;
    }
    assert_eq!(
        w.sync(w.a, "RECONCILIATION", "manual").await?,
        JobOutcome::Succeeded
    );
    let by_sync = note_rows(w.pool()).await?;
    assert_eq!(by_sync, by_hooks);

    // The hooks again over the sync's rows: the same rows.
    for (first, body) in &delivered {
        w.registered(w.a, body, Some(*first)).await?;
    }
    w.settle().await?;
    assert_eq!(note_rows(w.pool()).await?, by_sync);

    // An edit by someone else (the hook's actor is not the author) keeps the author.
    let plain = notes[0];
    let mut edited = w.body(|m| {
        let note = m.notes.get_mut(&plain).unwrap();
        note.body = "looks great".into();
        note.updated_at = at(50);
        note_hook(m, &m.notes[&plain], "update")
    });
    edited["user"]["id"] = serde_json::json!(424242);
    edited["user"]["username"] = serde_json::json!("root");
    w.registered(w.a, &edited, None).await?;
    w.settle().await?;
    let stored: (Option<String>, Option<String>) =
        sqlx::query_as("SELECT author, body FROM comment WHERE native_id = $1")
            .bind(plain as i64)
            .fetch_one(w.pool())
            .await?;
    assert_eq!(stored, (Some("bob".into()), Some("looks great".into())));
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

/// A close time that fails to read (GitLab's REST errors past the retry) leaves the close
/// unknown: the page is still written, no event is recorded, and the filtered listing's
/// watermark stays before the request, so the next filtered pass reads it and records the close
/// once; after that it is never read again.
#[tokio::test]
async fn a_close_time_that_fails_to_read_is_read_by_the_next_pass() -> Result<()> {
    let w = World::start().await?;
    let api = w.p.api;
    let (closing, later) = w.sim.model(|m| {
        let mut mr = |title: &str| {
            m.add_merge_request(
                api,
                NewMergeRequest {
                    title: title.into(),
                    updated_at: at(10),
                },
            )
        };
        (mr("to close"), mr("later"))
    });
    assert_eq!(
        w.sync(w.a, "RECONCILIATION", "manual").await?,
        JobOutcome::Succeeded
    );
    w.sim.model(|m| {
        m.update_merge_request(api, closing, |mr| {
            mr.state = "closed".into();
            mr.updated_at = at(20);
        });
        // Updated after the close, so a watermark that moved past it would skip the close.
        m.update_merge_request(api, later, |mr| {
            mr.title = "renamed".into();
            mr.updated_at = at(30);
        });
    });
    w.sim.inject(Fault::always(
        ops::GET_MERGE_REQUEST,
        GitlabFault::Status(500),
    ));
    assert_eq!(
        w.sync(w.a, "RECONCILIATION", "scheduled").await?,
        JobOutcome::Succeeded
    );
    assert_eq!(
        w.sim.calls(ops::GET_MERGE_REQUEST),
        2,
        "one read, retried once"
    );
    assert_eq!(
        w.merge_request_times(closing).await?,
        ("closed".into(), None, None)
    );
    assert!(w.item_events(closing).await?.is_empty());
    let title: String = sqlx::query_scalar("SELECT title FROM pull_request WHERE number = $1")
        .bind(later as i32)
        .fetch_one(w.pool())
        .await?;
    assert_eq!(title, "renamed", "the rest of the page was written");

    w.sim.clear_faults();
    let closed = vec![lifecycle_event(
        "scm.pull_request.closed",
        LifecycleChange::Close { closed_at: at(20) },
        at(20),
        "sync",
    )];
    assert_eq!(
        w.sync(w.a, "RECONCILIATION", "scheduled").await?,
        JobOutcome::Succeeded
    );
    assert_eq!(w.sim.calls(ops::GET_MERGE_REQUEST), 3);
    assert_eq!(
        w.merge_request_times(closing).await?,
        ("closed".into(), Some(at(20)), None)
    );
    assert_eq!(w.item_events(closing).await?, closed);
    assert_eq!(
        w.sync(w.a, "RECONCILIATION", "scheduled").await?,
        JobOutcome::Succeeded
    );
    assert_eq!(
        w.sync(w.a, "RECONCILIATION", "manual").await?,
        JobOutcome::Succeeded
    );
    assert_eq!(
        w.sim.calls(ops::GET_MERGE_REQUEST),
        3,
        "stored: never read again"
    );
    assert_eq!(w.item_events(closing).await?, closed);
    assert!(w.item_events(later).await?.is_empty());
    w.stop().await
}

/// (state, sha, whether dated) of the head check of merge request `number`.
async fn head_check(w: &World, number: u64) -> Result<(Option<String>, Option<String>, bool)> {
    Ok(sqlx::query_as(
        "SELECT head_check_state, head_check_sha, head_check_observed_at IS NOT NULL
           FROM pull_request WHERE number = $1",
    )
    .bind(number as i32)
    .fetch_one(w.pool())
    .await?)
}

/// B's endpoints (B's own secret) deliver a Pipeline Hook and a rename hook naming A's project,
/// both real: GitLab did run the pipeline and rename the project. Nothing of A changes (its
/// head check, its repository's path, its monitors) and B's own monitor and merge request stay
/// as they were.
#[tokio::test]
async fn another_workspaces_endpoint_cannot_record_a_pipeline_or_rename_a_project_of_a()
-> Result<()> {
    let w = World::start().await?;
    let api = w.p.api;
    w.sim.inject(Fault::always(
        ops::MERGE_REQUEST_READINESS,
        GitlabFault::FieldError {
            path: "project".into(),
            message: "unavailable".into(),
        },
    ));
    // B's own project, monitored by B, with one merge request through B's route.
    let (site, b_iid, b_opened) = w.sim.model(|m| {
        let globex = m.group_by_path("globex").expect("globex");
        let site = m.add_project(globex, "site");
        let iid = m.add_merge_request(
            site,
            NewMergeRequest {
                title: "B's".into(),
                updated_at: at(10),
            },
        );
        let mr = m.merge_requests[&(site, iid)].clone();
        (site, iid, merge_request_hook(m, &mr, "open", None))
    });
    sqlx::query(
        "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id)
         VALUES ($1, $2, $3, 'globex', 'site', $4)",
    )
    .bind(Uuid::now_v7())
    .bind(w.b.route.workspace_id)
    .bind(w.b.connection_id)
    .bind(site as i64)
    .execute(w.pool())
    .await?;
    w.registered(w.b, &b_opened, None).await?;
    // A's merge request and its pending pipeline through A's route.
    let (iid, opened, pending, pipeline) = w.sim.model(|m| {
        let iid = m.add_merge_request(
            api,
            NewMergeRequest {
                title: "A's".into(),
                updated_at: at(20),
            },
        );
        let mr = m.merge_requests[&(api, iid)].clone();
        let opened = merge_request_hook(m, &mr, "open", None);
        let id = m.start_pipeline(api, iid).expect("a head");
        (iid, opened, pipeline_hook(m, &m.pipelines[&id].clone()), id)
    });
    w.registered(w.a, &opened, None).await?;
    w.settle().await?;
    w.registered(w.a, &pending, None).await?;
    w.settle().await?;
    // B's merge request has the same number in its own project.
    let a_head_check = || {
        sqlx::query_as::<_, (Option<String>, Option<String>, bool)>(
            "SELECT p.head_check_state, p.head_check_sha, p.head_check_observed_at IS NOT NULL
               FROM pull_request p JOIN repository r ON r.id = p.repository_id
              WHERE r.native_id = $1 AND p.number = $2",
        )
        .bind(api as i64)
        .bind(iid as i32)
        .fetch_one(w.pool())
    };
    let a_check = a_head_check().await?;
    assert_eq!(a_check.0.as_deref(), Some("pending"));
    let b_before = w.merge_request(site, b_iid as i32).await?;
    assert!(b_before.is_some(), "B's merge request is stored");

    // GitLab passes A's pipeline and renames A's project; B's endpoints deliver both hooks.
    let (success, renamed) = w.sim.model(|m| {
        assert!(m.set_pipeline_status(pipeline, "success"));
        let success = pipeline_hook(m, &m.pipelines[&pipeline].clone());
        let renamed = m.rename_project_with_hook(api, "api2").expect("renamed");
        (success, renamed)
    });
    w.registered(w.b, &success, None).await?;
    w.operator(w.b, &success).await?;
    w.registered(w.b, &renamed, None).await?;
    w.settle().await?;

    assert_eq!(a_head_check().await?, a_check);
    let path: (String, String) =
        sqlx::query_as("SELECT owner, name FROM repository WHERE native_id = $1")
            .bind(api as i64)
            .fetch_one(w.pool())
            .await?;
    assert_eq!(path, ("acme".to_owned(), "api".to_owned()));
    let monitors = |tenant: Tenant| {
        sqlx::query_as::<_, (String, String, Option<i64>)>(
            "SELECT owner, name, native_id FROM repository_to_monitor WHERE connection_id = $1
              ORDER BY owner, name",
        )
        .bind(tenant.connection_id)
        .fetch_all(w.pool())
    };
    assert_eq!(
        monitors(w.a).await?,
        [("acme".to_owned(), "api".to_owned(), Some(api as i64))]
    );
    assert_eq!(
        monitors(w.b).await?,
        [("globex".to_owned(), "site".to_owned(), Some(site as i64))]
    );
    assert_eq!(w.merge_request(site, b_iid as i32).await?, b_before);
    assert_eq!(
        w.count("SELECT count(*) FROM pull_request WHERE head_check_state IS NOT NULL")
            .await?,
        1,
        "only A's own pipeline hook was recorded"
    );
    w.stop().await
}

/// Head checks are dated observations: a Pipeline Hook records the check of the open merge
/// request it ran for, a redelivered pending from before the success changes nothing, and
/// control-api's merge request read shows the check to A while B's workspace gets 404.
#[tokio::test]
async fn a_pipeline_hook_records_the_head_check_and_an_older_one_changes_nothing() -> Result<()> {
    let w = World::start().await?;
    let api = w.p.api;
    // Only the Pipeline Hooks observe here: GitLab's readiness read after the open hook fails.
    w.sim.inject(Fault::always(
        ops::MERGE_REQUEST_READINESS,
        GitlabFault::FieldError {
            path: "project".into(),
            message: "unavailable".into(),
        },
    ));
    let iid = w.sim.model(|m| {
        m.add_merge_request(
            api,
            NewMergeRequest {
                title: "ci".into(),
                updated_at: at(10),
            },
        )
    });
    let opened = w.body(|m| {
        let mr = m.merge_requests[&(api, iid)].clone();
        merge_request_hook(m, &mr, "open", None)
    });
    w.registered(w.a, &opened, None).await?;
    w.settle().await?;
    assert_eq!(head_check(&w, iid).await?, (None, None, false));

    let (pending, success, head) = w.sim.model(|m| {
        let id = m
            .start_pipeline(api, iid)
            .expect("the merge request has a head");
        let pending = pipeline_hook(m, &m.pipelines[&id].clone());
        assert!(m.set_pipeline_status(id, "success"));
        let success = pipeline_hook(m, &m.pipelines[&id].clone());
        (pending, success, m.pipelines[&id].sha.clone())
    });
    let first = w.registered(w.a, &pending, None).await?;
    w.settle().await?;
    assert_eq!(
        head_check(&w, iid).await?,
        (Some("pending".into()), Some(head.clone()), true)
    );
    w.registered(w.a, &success, None).await?;
    w.settle().await?;
    let passed = (Some("success".into()), Some(head.clone()), true);
    assert_eq!(head_check(&w, iid).await?, passed);
    // The pending hook again, after the success: older, it changes nothing.
    w.registered(w.a, &pending, Some(first)).await?;
    w.settle().await?;
    assert_eq!(head_check(&w, iid).await?, passed);
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);

    // The read: A sees the check; B's workspace, naming A's project and merge request, gets 404.
    let (project, merge_request): (Uuid, Uuid) =
        sqlx::query_as("SELECT p.repository_id, p.id FROM pull_request p WHERE p.number = $1")
            .bind(iid as i32)
            .fetch_one(w.pool())
            .await?;
    let api_server = testkit::spawn(testkit::control_api_config(w.env.common_args())).await?;
    let keys = testkit::control_api_keys()?;
    let admin = testkit::token(&keys, control_api::Role::Admin, None)?;
    let http = reqwest::Client::new();
    let read = |workspace: Uuid| {
        http.get(format!(
            "{}/workspaces/{workspace}/gitlab/projects/{project}/merge-requests/{merge_request}",
            api_server.url()
        ))
        .bearer_auth(&admin)
        .send()
    };
    let res = read(w.a.route.workspace_id).await?;
    assert_eq!(res.status(), reqwest::StatusCode::OK);
    let body: Json = res.json().await?;
    let check = &body["head_check"];
    assert_eq!(check["state"], "success");
    assert_eq!(check["sha"], head.as_str());
    assert!(check["observed_at"].is_string(), "{body}");
    let res = read(w.b.route.workspace_id).await?;
    assert_eq!(res.status(), reqwest::StatusCode::NOT_FOUND);
    api_server.stop().await?;
    w.stop().await
}

/// A Pipeline Hook whose pipeline names no status is a dead message, never applied.
#[tokio::test]
async fn a_pipeline_hook_without_its_status_is_dead() -> Result<()> {
    let w = World::start().await?;
    let api = w.p.api;
    let body = w.body(|m| {
        let iid = m.add_merge_request(
            api,
            NewMergeRequest {
                title: "ci".into(),
                updated_at: at(10),
            },
        );
        let id = m.start_pipeline(api, iid).expect("a head");
        let mut body = pipeline_hook(m, &m.pipelines[&id].clone());
        body["object_attributes"]
            .as_object_mut()
            .expect("attributes")
            .remove("status");
        body
    });
    w.registered(w.a, &body, None).await?;
    w.settle().await?;
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 1);
    assert_eq!(
        w.count("SELECT count(*) FROM pull_request WHERE head_check_state IS NOT NULL")
            .await?,
        0
    );
    w.stop().await
}
