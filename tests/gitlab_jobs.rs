//! gitlab-sync end to end: control-api creates and activates a GitLab connection on a group of
//! 12 projects in subgroups (10,000 issues and merge requests, 30,000 notes); gitlab-sync
//! discovers the projects, confirms its consumer, registers one group hook at ingress and runs
//! INITIAL through gitlab-client against the GitLab simulator over HTTP. The simulator then sends
//! a hook to the registered URL, ingress accepts its token and the change reaches the mirror.
//! Real Postgres and NATS throughout.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Result;
use forgesync_e2e::{GitlabStack, eventually};
use serde_json::Value;
use sqlx::PgPool;
use testkit::TestEnv;
use time::OffsetDateTime;
use vendor_sim::gitlab::{GitlabSim, Model, NoteOn, ops};

const TOKEN: &str = "glpat-e2e";
const ITEMS: u64 = 10_000;

/// What the mirror must hold for one project, counted from the simulator's model.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
struct Counts {
    issues: i64,
    merge_requests: i64,
    /// User notes on issues (system notes are not mirrored).
    issue_notes: i64,
    /// User notes on merge requests outside diff threads.
    merge_request_notes: i64,
    /// Diff notes, first notes and replies.
    diff_notes: i64,
    /// Diff discussions.
    threads: i64,
}

/// Group `acme` with subgroups `acme/platform`, `acme/platform/infra` and `acme/apps`, three
/// projects in each; `ITEMS` issues and merge requests spread over them, three notes each.
fn model() -> (Model, Vec<u64>) {
    let generated = vendor_sim::gitlab::generate(&vendor_sim::gitlab::Scenario {
        group: "acme".into(),
        token: TOKEN.into(),
        items: ITEMS,
        first_update: OffsetDateTime::now_utc() - time::Duration::days(30),
    });
    (generated.model, generated.projects)
}

fn expected(m: &Model) -> BTreeMap<i64, Counts> {
    let mut out: BTreeMap<i64, Counts> = m
        .projects
        .keys()
        .map(|p| (*p as i64, Counts::default()))
        .collect();
    for (p, _) in m.issues.keys() {
        out.get_mut(&(*p as i64)).unwrap().issues += 1;
    }
    for (p, _) in m.merge_requests.keys() {
        out.get_mut(&(*p as i64)).unwrap().merge_requests += 1;
    }
    let mut threads = std::collections::BTreeSet::new();
    for n in m.notes.values().filter(|n| !n.system) {
        let (NoteOn::Issue(p, _) | NoteOn::MergeRequest(p, _)) = n.on;
        let counts = out.get_mut(&(p as i64)).unwrap();
        match n.on {
            NoteOn::Issue(..) => counts.issue_notes += 1,
            NoteOn::MergeRequest(..) if n.position.is_some() => {
                threads.insert((p, n.discussion.clone()));
                counts.diff_notes += 1;
            }
            NoteOn::MergeRequest(..) => counts.merge_request_notes += 1,
        }
    }
    for (p, _) in threads {
        out.get_mut(&(p as i64)).unwrap().threads += 1;
    }
    out
}

async fn mirrored(pool: &PgPool) -> Result<BTreeMap<i64, Counts>> {
    let rows: Vec<(i64, i64, i64, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT r.native_id,
                (SELECT count(*) FROM issue i WHERE i.repository_id = r.id AND i.deleted_at IS NULL),
                (SELECT count(*) FROM pull_request p WHERE p.repository_id = r.id AND p.deleted_at IS NULL),
                (SELECT count(*) FROM comment c WHERE c.repository_id = r.id AND c.issue_id IS NOT NULL),
                (SELECT count(*) FROM comment c WHERE c.repository_id = r.id AND c.pull_request_id IS NOT NULL),
                (SELECT count(*) FROM review_comment rc JOIN pull_request p ON p.id = rc.pull_request_id
                  WHERE p.repository_id = r.id),
                (SELECT count(*) FROM review_thread t JOIN pull_request p ON p.id = t.pull_request_id
                  WHERE p.repository_id = r.id)
           FROM repository r",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, i, mr, inotes, mrnotes, diff, threads)| {
            (
                id,
                Counts {
                    issues: i,
                    merge_requests: mr,
                    issue_notes: inotes,
                    merge_request_notes: mrnotes,
                    diff_notes: diff,
                    threads,
                },
            )
        })
        .collect())
}

/// Waits (up to ten minutes: the full-size INITIAL takes minutes in a debug build) for the
/// INITIAL job to finish; says how far it got when it does not.
async fn initial_finished(pool: &PgPool, sim: &GitlabSim) -> Result<(String, Option<String>, i64)> {
    let deadline = Instant::now() + std::time::Duration::from_secs(600);
    let mut last_report = Instant::now();
    loop {
        let job: Option<(String, Option<String>, i64)> = sqlx::query_as(
            "SELECT status, error, progress_done FROM sync_job
              WHERE job_type = 'INITIAL' AND finished_at IS NOT NULL",
        )
        .fetch_optional(pool)
        .await?;
        if let Some(job) = job {
            return Ok(job);
        }
        if Instant::now() > deadline {
            let jobs: Vec<(String, String, Option<String>, i64)> = sqlx::query_as(
                "SELECT job_type, status, error, progress_done FROM sync_job ORDER BY created_at",
            )
            .fetch_all(pool)
            .await?;
            let activities: Vec<(String, String)> = sqlx::query_as(
                "SELECT activity, detail::text FROM connection_activity ORDER BY id",
            )
            .fetch_all(pool)
            .await?;
            panic!(
                "INITIAL did not finish: jobs {jobs:?}, activities {activities:?}, calls {:?}",
                sim.call_counts()
            );
        }
        if last_report.elapsed() > std::time::Duration::from_secs(30) {
            last_report = Instant::now();
            let running: Vec<(String, String, i64)> =
                sqlx::query_as("SELECT job_type, status, progress_done FROM sync_job")
                    .fetch_all(pool)
                    .await?;
            eprintln!(
                "waiting for INITIAL: {running:?}, calls {:?}",
                sim.call_counts()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

fn first(log: &[String], op: &str) -> usize {
    log.iter()
        .position(|o| o == op)
        .unwrap_or_else(|| panic!("no {op} call in {:?}", &log[..log.len().min(50)]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn activation_discovers_12_projects_registers_one_hook_and_initial_mirrors_10000_items_and_30000_notes()
-> Result<()> {
    let started = Instant::now();
    let env = TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();
    let (model, projects) = model();
    assert_eq!(model.notes.len(), 30_000);
    let want = expected(&model);
    let sim = GitlabSim::start(model).await?;

    let stack = GitlabStack::start(&env).await?;
    let get = |path: String| {
        let stack = &stack;
        async move { stack.get(&path).await }
    };
    let (ws, conn) = stack.connect("acme", sim.base_url(), "acme", TOKEN).await?;

    let job = initial_finished(&pool, &sim).await?;
    let initial_took = started.elapsed();
    assert_eq!(job.0, "succeeded", "{job:?}");
    assert_eq!(job.2, ITEMS as i64, "progress counts every item");

    // The call log: discovery to its end, then exactly one hook create, then INITIAL's reads.
    let log = sim.call_log();
    let create = first(&log, ops::CREATE_GROUP_HOOK);
    assert_eq!(sim.calls(ops::CREATE_GROUP_HOOK), 1, "exactly one hook");
    for op in [
        ops::GROUP_SUBGROUPS,
        ops::GROUP_PROJECTS,
        ops::GROUP_PROJECT_COUNT,
    ] {
        assert!(first(&log, op) < create, "{op} before the hook create");
        let last = log.iter().rposition(|o| o == op).unwrap();
        assert!(last < create, "{op} ends before the hook create");
    }
    for op in [
        ops::PROJECT_ISSUES,
        ops::PROJECT_MERGE_REQUESTS,
        ops::MERGE_REQUEST_DISCUSSIONS,
        ops::LIST_NOTES,
    ] {
        assert!(
            first(&log, op) > create,
            "INITIAL's {op} after the hook create"
        );
    }
    // The organization's members were listed and the consumer confirmed between discovery and
    // the hook.
    let activities: Vec<String> = sqlx::query_scalar(
        "SELECT activity FROM connection_activity
          WHERE activity LIKE 'gitlab_activation_%' ORDER BY id",
    )
    .fetch_all(&pool)
    .await?;
    assert_eq!(
        activities[..4],
        [
            "gitlab_activation_discovery",
            "gitlab_activation_members",
            "gitlab_activation_consumer",
            "gitlab_activation_hook_requested",
        ],
        "{activities:?}"
    );
    let (status, activation) = get(format!(
        "/workspaces/{ws}/connections/{conn}/gitlab/activation"
    ))
    .await?;
    assert_eq!(status, 200, "{activation}");
    assert_eq!(activation["discovery"]["complete"], true, "{activation}");
    assert_eq!(
        activation["discovery"]["projects_found"], 12,
        "{activation}"
    );
    assert_eq!(activation["discovery"]["project_count"], 12, "{activation}");
    assert!(
        activation["consumer"]["confirmed_at"].is_string(),
        "{activation}"
    );
    assert_eq!(activation["hook"]["state"], "open", "{activation}");
    let hooks: Vec<_> = sim.model(|m| m.hooks.values().cloned().collect());
    assert_eq!(hooks.len(), 1);
    assert!(
        hooks[0].url.starts_with(&format!(
            "{}/webhooks/gitlab/connections/{conn}/k1/",
            stack.ingress.url()
        )),
        "{}",
        hooks[0].url
    );

    // Every item and note, per project and class.
    assert_eq!(mirrored(&pool).await?, want);
    assert_eq!(
        want.values()
            .map(|c| c.issues + c.merge_requests)
            .sum::<i64>(),
        ITEMS as i64
    );

    // A sample of fields, read through control-api.
    let (status, listed) = get(format!("/workspaces/{ws}/gitlab/projects")).await?;
    assert_eq!(status, 200, "{listed}");
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 12);
    let infra = projects[6];
    let project = listed
        .iter()
        .find(|p| p["native_id"] == infra)
        .expect("the infra project is listed");
    assert_eq!(project["namespace"], "acme/platform/infra", "{project}");
    let project_id = project["id"].as_str().unwrap().to_owned();
    let (status, issues) = get(format!(
        "/workspaces/{ws}/gitlab/projects/{project_id}/issues?limit=1000"
    ))
    .await?;
    assert_eq!(status, 200, "{issues}");
    let issues = issues.as_array().unwrap();
    assert_eq!(issues.len() as i64, want[&(infra as i64)].issues);
    let upstream: BTreeMap<u64, (String, String)> = sim.model(|m| {
        m.issues
            .values()
            .filter(|i| i.project == infra)
            .map(|i| (i.iid, (i.title.clone(), i.state.clone())))
            .collect()
    });
    for issue in issues {
        let (title, state) = &upstream[&issue["number"].as_u64().unwrap()];
        assert_eq!(issue["title"], title.as_str());
        let mirrored_state = issue["state"].as_str().unwrap().to_lowercase();
        assert_eq!(
            mirrored_state.starts_with("open"),
            state == "opened",
            "{issue}"
        );
    }
    let (status, mrs) = get(format!(
        "/workspaces/{ws}/gitlab/projects/{project_id}/merge-requests?limit=1000"
    ))
    .await?;
    assert_eq!(status, 200, "{mrs}");
    let mrs = mrs.as_array().unwrap();
    assert_eq!(mrs.len() as i64, want[&(infra as i64)].merge_requests);
    // A merged MR whose diff note has a reply (i % 5 != 0).
    let (iid, upstream_mr, notes) = sim.model(|m| {
        let mr = m
            .merge_requests
            .values()
            .find(|mr| {
                mr.project == infra && mr.state == "merged" && {
                    let i: u64 = mr.title[3..].parse().unwrap();
                    !i.is_multiple_of(5)
                }
            })
            .unwrap()
            .clone();
        let notes: Vec<_> = m
            .notes_of(NoteOn::MergeRequest(infra, mr.iid))
            .into_iter()
            .cloned()
            .collect();
        (mr.iid, mr, notes)
    });
    let mr = mrs
        .iter()
        .find(|m| m["number"] == iid)
        .expect("the merge request is listed");
    assert_eq!(mr["title"], upstream_mr.title.as_str());
    assert_eq!(mr["source_branch"], upstream_mr.source_branch.as_str());
    assert!(
        mr["state"].as_str().unwrap().eq_ignore_ascii_case("merged"),
        "{mr}"
    );
    let mr_id = mr["id"].as_str().unwrap();
    let (status, detail) = get(format!(
        "/workspaces/{ws}/gitlab/projects/{project_id}/merge-requests/{mr_id}"
    ))
    .await?;
    assert_eq!(status, 200, "{detail}");
    let [lone, diff, reply] = &notes[..] else {
        panic!("three notes: {notes:?}")
    };
    assert_eq!(detail["notes"].as_array().unwrap().len(), 1, "{detail}");
    assert_eq!(detail["notes"][0]["native_id"], lone.id);
    assert_eq!(detail["notes"][0]["body"], lone.body.as_str());
    let threads = detail["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1, "{detail}");
    assert_eq!(
        threads[0]["discussion_id"],
        format!("gid://gitlab/Discussion/{}", diff.discussion)
    );
    let position = diff.position.as_ref().unwrap();
    assert_eq!(threads[0]["path"], position.new_path.as_str());
    let thread_notes = threads[0]["notes"].as_array().unwrap();
    assert_eq!(thread_notes.len(), 2, "{detail}");
    let by_id = |id: u64| thread_notes.iter().find(|n| n["native_id"] == id).unwrap();
    assert_eq!(by_id(diff.id)["body"], diff.body.as_str());
    assert_eq!(by_id(diff.id)["path"], position.new_path.as_str());
    assert_eq!(by_id(diff.id)["line"], position.new_line.unwrap());
    assert_eq!(by_id(diff.id)["in_reply_to"], Value::Null);
    assert_eq!(by_id(reply.id)["body"], reply.body.as_str());
    assert_eq!(
        by_id(reply.id)["in_reply_to"],
        diff.id,
        "the reply links its thread's first note"
    );
    assert!(detail["unthreaded_notes"].as_array().unwrap().is_empty());

    // One change upstream: GitLab sends its hook to the registered URL with the registered
    // token; ingress accepts it and the note reaches the mirror.
    let added = sim.model(|m| {
        m.add_note(
            NoteOn::MergeRequest(infra, iid),
            "sent by the group hook",
            false,
            None,
        )
    });
    sim.flush_hooks().await;
    let attempts = sim.hook_attempts();
    assert!(
        !attempts.is_empty()
            && attempts
                .iter()
                .all(|a| a.hook_id == hooks[0].id && a.succeeded()),
        "ingress accepted the hook: {attempts:?}"
    );
    let body: String = eventually("the hook's note did not reach the mirror", || {
        let pool = &pool;
        async move {
            Ok(
                sqlx::query_scalar("SELECT body FROM comment WHERE native_id = $1")
                    .bind(added as i64)
                    .fetch_optional(pool)
                    .await?,
            )
        }
    })
    .await?;
    assert_eq!(body, "sent by the group hook");
    eprintln!(
        "INITIAL finished {initial_took:?} after start; whole test {:?}",
        started.elapsed()
    );
    Ok(())
}
