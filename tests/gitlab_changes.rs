//! Two hundred scripted changes to twenty GitLab merge requests, end to end: control-api
//! activates a connection on the simulated group, gitlab-sync registers its group hook and runs
//! INITIAL, then the script edits, drafts and readies, approves and unapproves, runs pipelines,
//! comments, closes, reopens and merges. Each hook delivery GitLab queues is sent to ingress
//! three times (twice under its own `Idempotency-Key`, once as a resend under a new one), the
//! copies of a batch shuffled together, while reconciles run. After a closing reconcile, every
//! fact the mirror keeps equals what applying the changes in order gives, and each change that
//! records an item event recorded exactly one, with one activity entry. Real Postgres and NATS,
//! the GitLab simulator over HTTP.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result};
use forgesync_e2e::{GitlabStack, eventually};
use serde_json::{Value, json};
use testkit::TestEnv;
use time::OffsetDateTime;
use vendor_sim::gitlab::{GitlabSim, HeldDelivery, Model, NewMergeRequest, NoteOn};

const TOKEN: &str = "glpat-changes";
const MERGE_REQUESTS: u64 = 20;
const CHANGES: usize = 200;
/// Changes between two deliveries of the queued hooks.
const BATCH: usize = 25;
/// Changes between two reconciles started amid the script.
const SYNC_EVERY: usize = 50;

/// A small deterministic generator (xorshift64*), so a failure replays with its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// One scripted change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Edit,
    Draft,
    Ready,
    Approve(&'static str),
    Unapprove(&'static str),
    Pipeline(&'static str),
    Push,
    /// A push dated the same second as the change before it.
    SameSecondPush,
    /// A force-push back to the head before the current one.
    ForceBack,
    RequestChanges(&'static str),
    Comment,
    Close,
    Reopen,
    Merge,
}

const REVIEWERS: [&str; 3] = ["bob", "carol", "dave"];
const PIPELINE_ENDS: [&str; 3] = ["success", "failed", "running"];

/// The changes open to a merge request in its simulated state.
fn choices(mr: &vendor_sim::gitlab::MergeRequest, heads: usize) -> Vec<Change> {
    let mut out = vec![Change::Edit, Change::Comment];
    match mr.state.as_str() {
        "opened" => {
            out.push(if mr.draft {
                Change::Ready
            } else {
                Change::Draft
            });
            for r in REVIEWERS {
                if mr.approved_by.iter().any(|(u, _)| u == r) {
                    out.push(Change::Unapprove(r));
                } else {
                    out.push(Change::Approve(r));
                }
            }
            for end in PIPELINE_ENDS {
                out.push(Change::Pipeline(end));
            }
            out.extend([Change::Push, Change::SameSecondPush]);
            if heads > 1 {
                out.push(Change::ForceBack);
            }
            out.push(Change::RequestChanges(
                REVIEWERS[mr.iid as usize % REVIEWERS.len()],
            ));
            out.push(Change::Close);
            // Merges end a request's script: rarer than the rest.
            if mr.iid.is_multiple_of(3) {
                out.push(Change::Merge);
            }
        }
        "closed" => out.push(Change::Reopen),
        _ => {}
    }
    out
}

/// The item event a change records, if any.
fn event_of(change: Change) -> Option<&'static str> {
    Some(match change {
        Change::Draft => "scm.pull_request.converted_to_draft",
        Change::Ready => "scm.pull_request.ready_for_review",
        Change::Unapprove(_) => "scm.pull_request.review_dismissed",
        Change::Close => "scm.pull_request.closed",
        Change::Reopen => "scm.pull_request.reopened",
        Change::Merge => "scm.pull_request.merged",
        Change::Push | Change::SameSecondPush | Change::ForceBack => {
            "scm.pull_request.synchronized"
        }
        Change::RequestChanges(_) => "scm.pull_request.review_dismissed",
        _ => return None,
    })
}

/// Applies `change` to merge request (`project`, `iid`) at the simulator, which queues the
/// hooks GitLab sends for it. `heads`: the request's heads so far, oldest first.
fn apply(
    m: &mut Model,
    project: u64,
    iid: u64,
    change: Change,
    step: usize,
    heads: &mut Vec<String>,
) {
    let pushed = match change {
        Change::Push | Change::SameSecondPush => Some(format!("{:040x}", 0xc0de_0000 + step)),
        Change::ForceBack => Some(heads[heads.len() - 2].clone()),
        _ => None,
    };
    if let Some(sha) = pushed {
        let at = (change == Change::SameSecondPush)
            .then(|| m.merge_requests[&(project, iid)].updated_at);
        let done = m.push_merge_request(project, iid, &sha, "alice", at);
        assert!(done.is_some(), "the simulator refused {change:?} on !{iid}");
        heads.push(sha);
        return;
    }
    let done = match change {
        Change::RequestChanges(user) => m.request_changes(project, iid, user).is_some(),
        Change::Push | Change::SameSecondPush | Change::ForceBack => unreachable!(),
        Change::Edit => m.update_merge_request(project, iid, |mr| {
            mr.title = format!("change {step}");
        }),
        Change::Draft => m.update_merge_request(project, iid, |mr| mr.draft = true),
        Change::Ready => m.update_merge_request(project, iid, |mr| mr.draft = false),
        Change::Approve(user) => m.approve_merge_request(project, iid, user),
        Change::Unapprove(user) => m.unapprove_merge_request(project, iid, user),
        Change::Pipeline(end) => m
            .start_pipeline(project, iid)
            .is_some_and(|id| m.set_pipeline_status(id, end)),
        Change::Comment => {
            m.add_note(
                NoteOn::MergeRequest(project, iid),
                &format!("comment {step}"),
                false,
                None,
            );
            true
        }
        Change::Close => m.update_merge_request(project, iid, |mr| mr.state = "closed".into()),
        Change::Reopen => m.update_merge_request(project, iid, |mr| mr.state = "opened".into()),
        Change::Merge => m.update_merge_request(project, iid, |mr| {
            mr.state = "merged".into();
            mr.merge_user = Some("alice".into());
        }),
    };
    assert!(done, "the simulator refused {change:?} on !{iid}");
}

/// The mirror's state of a GitLab merge request state.
fn mirrored_state(state: &str) -> &'static str {
    match state {
        "merged" => "merged",
        "closed" => "closed",
        _ => "open",
    }
}

/// The head check a pipeline status leaves (lifecycle-core's GitLab mapping, as stored).
fn check_state(status: &str) -> &'static str {
    match status {
        "success" => "success",
        "failed" | "canceled" => "failure",
        "skipped" => "skipped",
        _ => "pending",
    }
}

/// Sends every held delivery three times (twice as queued, once resent under a new key), the
/// copies shuffled together; each must be accepted.
async fn deliver(sim: &GitlabSim, http: &reqwest::Client, rng: &mut Rng) -> Result<usize> {
    let held = sim.take_held_hooks();
    let mut copies: Vec<HeldDelivery> = held
        .iter()
        .flat_map(|d| [d.clone(), d.clone(), d.resent()])
        .collect();
    rng.shuffle(&mut copies);
    for d in &copies {
        let status = d.send(http).await?;
        anyhow::ensure!(
            status.is_success(),
            "ingress answered {status} to a {} delivery",
            d.delivery.event
        );
    }
    Ok(held.len())
}

/// What the mirror keeps of one merge request, as compared with the simulator's.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Facts {
    state: String,
    title: String,
    draft: Option<bool>,
    merged_at: Option<OffsetDateTime>,
    approvals: Vec<(String, Option<OffsetDateTime>)>,
    head_check: Option<(String, String)>,
    requested_changes: Vec<String>,
    comments: i64,
}

fn expected(m: &Model, project: u64, iid: u64, requested: Option<&BTreeSet<String>>) -> Facts {
    let mr = &m.merge_requests[&(project, iid)];
    let mut approvals: Vec<_> = mr
        .approved_by
        .iter()
        .map(|(u, at)| (u.clone(), Some(*at)))
        .collect();
    approvals.sort();
    let head_check = m
        .pipelines
        .values()
        .filter(|p| p.project == project && Some(&p.sha) == mr.diff_head_sha.as_ref())
        .max_by_key(|p| p.id)
        .map(|p| (check_state(&p.status).to_owned(), p.sha.clone()))
        // GitLab answers no pipeline for a head without one.
        .or_else(|| {
            mr.diff_head_sha
                .clone()
                .map(|sha| ("no_pipeline".to_owned(), sha))
        });
    Facts {
        state: mirrored_state(&mr.state).to_owned(),
        title: mr.title.clone(),
        draft: Some(mr.draft),
        merged_at: mr.merged_at,
        approvals,
        head_check,
        requested_changes: requested.into_iter().flatten().cloned().collect(),
        comments: m.user_notes_count(NoteOn::MergeRequest(project, iid)) as i64,
    }
}

/// A merge request's row: id, state, title, draft, merged_at, head check state and sha.
type StoredRow = (
    uuid::Uuid,
    String,
    Option<String>,
    Option<bool>,
    Option<OffsetDateTime>,
    Option<String>,
    Option<String>,
);

async fn stored(pool: &sqlx::PgPool, project: u64, iid: u64) -> Result<Facts> {
    let (id, state, title, draft, merged_at, check_state, check_sha): StoredRow = sqlx::query_as(
        "SELECT p.id, p.state, p.title, p.draft, p.merged_at, p.head_check_state, p.head_check_sha
           FROM pull_request p JOIN repository r ON r.id = p.repository_id
          WHERE r.native_id = $1 AND p.number = $2",
    )
    .bind(project as i64)
    .bind(iid as i32)
    .fetch_one(pool)
    .await
    .context("line 232")?;
    let approvals = sqlx::query_as(
        "SELECT username, approved_at FROM merge_request_approval
          WHERE pull_request_id = $1 ORDER BY username, approved_at",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .context("line 239")?;
    let requested_changes = sqlx::query_scalar(
        "SELECT username FROM merge_request_requested_change
          WHERE pull_request_id = $1 ORDER BY username",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .context("requested changes")?;
    let comments = sqlx::query_scalar(
        "SELECT count(*) FROM comment WHERE pull_request_id = $1 AND deleted_at IS NULL",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .context("line 245")?;
    Ok(Facts {
        state,
        title: title.unwrap_or_default(),
        draft,
        merged_at,
        approvals,
        head_check: check_state.zip(check_sha),
        requested_changes,
        comments,
    })
}

/// Item events and activity entries per (merge request, event name).
async fn recorded(pool: &sqlx::PgPool, project: u64) -> Result<BTreeMap<(i32, String), i64>> {
    let rows: Vec<(i32, String, i64)> = sqlx::query_as(
        "SELECT p.number, e.name, count(*) FROM item_event e
           JOIN pull_request p ON p.id = e.pull_request_id
           JOIN repository r ON r.id = p.repository_id
          WHERE r.native_id = $1 GROUP BY 1, 2",
    )
    .bind(project as i64)
    .fetch_all(pool)
    .await
    .context("line 267")?;
    Ok(rows.into_iter().map(|(n, e, c)| ((n, e), c)).collect())
}

async fn activity(pool: &sqlx::PgPool, project: u64) -> Result<BTreeMap<i32, i64>> {
    let rows: Vec<(i32, i64)> = sqlx::query_as(
        "SELECT p.number, count(*) FROM activity_event a
           JOIN pull_request p ON p.id = a.pull_request_id
           JOIN repository r ON r.id = p.repository_id
          WHERE r.native_id = $1 GROUP BY 1",
    )
    .bind(project as i64)
    .fetch_all(pool)
    .await
    .context("line 280")?;
    Ok(rows.into_iter().collect())
}

/// Waits until every stored delivery is published and gitlab-sync's webhook consumers have
/// settled them (quiet for three looks in a row).
async fn settle(env: &TestEnv, pool: &sqlx::PgPool) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let ns = env.bus.namespace();
    let mut quiet = 0;
    while quiet < 3 {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the deliveries did not settle"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let unpublished: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
            .fetch_one(pool)
            .await
            .context("line 298")?;
        let mut busy = unpublished > 0;
        let stream = env
            .bus
            .jetstream()
            .get_stream(ns.name(bus::Stream::WebhooksGitlab.name()))
            .await?;
        for durable in [
            "gitlab-sync-connection-events",
            "gitlab-sync-project-events",
        ] {
            if let Ok(info) = stream.consumer_info(ns.name(durable)).await {
                busy |= info.num_pending > 0 || info.num_ack_pending > 0;
            }
        }
        quiet = if busy { 0 } else { quiet + 1 };
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_changes_sent_thrice_and_shuffled_amid_syncs_equal_their_in_order_application()
-> Result<()> {
    let seed = std::env::var("FORGESYNC_CHANGES_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_2026_u64);
    eprintln!("seed {seed} (FORGESYNC_CHANGES_SEED replays it)");
    let mut rng = Rng(seed | 1);

    let env = TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();
    let mut model = Model::default();
    model.add_token(TOKEN);
    let acme = model.add_group(None, "acme");
    let project = model.add_project(acme, "api");
    let created = OffsetDateTime::now_utc() - time::Duration::days(1);
    for i in 0..MERGE_REQUESTS {
        model.add_merge_request(
            project,
            NewMergeRequest {
                title: format!("merge request {i}"),
                updated_at: created,
            },
        );
    }
    let sim = GitlabSim::start(model).await?;

    let stack = GitlabStack::start(&env).await?;
    let http = reqwest::Client::new();
    let (ws, conn) = stack.connect("acme", sim.base_url(), "acme", TOKEN).await?;
    let post = |path: String, body: Value| {
        let stack = &stack;
        async move { stack.post(&path, body).await }
    };
    let finished = |job_type: &'static str, n: i64| {
        let pool = pool.clone();
        async move {
            eventually(&format!("{n} {job_type} jobs did not finish"), || {
                let pool = pool.clone();
                async move {
                    let done: Vec<(String, Option<String>)> = sqlx::query_as(
                        "SELECT status, error FROM sync_job
                          WHERE job_type = $1 AND finished_at IS NOT NULL ORDER BY created_at",
                    )
                    .bind(job_type)
                    .fetch_all(&pool)
                    .await
                    .context("line 408")?;
                    Ok((done.len() as i64 >= n).then_some(done))
                }
            })
            .await
        }
    };
    let initial = finished("INITIAL", 1).await?;
    assert_eq!(initial[0].0, "succeeded", "{initial:?}");
    sim.flush_hooks().await;

    // The script. Hooks wait at the simulator and leave in shuffled triples per batch.
    sim.hold_hooks(true);
    let before_events = recorded(&pool, project).await?;
    let before_activity = activity(&pool, project).await?;
    let mut expect_events: BTreeMap<(i32, String), i64> = BTreeMap::new();
    // A dismissal is keyed by the approval it withdraws, which a withdrawal delivered before
    // its approval never learns: at most one per unapproval or request for changes.
    let mut dismissals_at_most: BTreeMap<i32, i64> = BTreeMap::new();
    let mut heads: BTreeMap<u64, Vec<String>> = sim.model(|m| {
        (1..=MERGE_REQUESTS)
            .map(|iid| {
                let head = m.merge_requests[&(project, iid)].diff_head_sha.clone();
                (iid, head.into_iter().collect())
            })
            .collect()
    });
    let mut requested: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    let mut reconciles = 0;
    let mut delivered = 0;
    for step in 0..CHANGES {
        let (iid, change, wait, withdraws) = sim.model(|m| {
            loop {
                let iid = 1 + rng.below(MERGE_REQUESTS as usize) as u64;
                let mr = &m.merge_requests[&(project, iid)];
                let options = choices(mr, heads[&iid].len());
                if options.is_empty() {
                    continue;
                }
                let change = options[rng.below(options.len())];
                // GitLab dates a change by its own clock, never ahead of it: a change waits for
                // the second after the request's last one (a same-second push does not).
                let wait = if change == Change::SameSecondPush {
                    time::Duration::ZERO
                } else {
                    (mr.updated_at + time::Duration::seconds(1) - OffsetDateTime::now_utc())
                        .max(time::Duration::ZERO)
                };
                // A request for changes withdraws its author's approval as the mirror holds
                // it, which a reset on push (naming no one) may leave standing until a read.
                let withdraws = matches!(change, Change::Unapprove(_) | Change::RequestChanges(_));
                break (iid, change, wait, withdraws);
            }
        });
        if wait > time::Duration::ZERO {
            tokio::time::sleep(wait.unsigned_abs()).await;
        }
        sim.model(|m| {
            apply(
                m,
                project,
                iid,
                change,
                step,
                heads.get_mut(&iid).expect("known"),
            )
        });
        match change {
            Change::RequestChanges(u) => {
                requested.entry(iid).or_default().insert(u.to_owned());
            }
            Change::Approve(u) => {
                requested.entry(iid).or_default().remove(u);
            }
            _ => {}
        }
        match event_of(change) {
            Some("scm.pull_request.review_dismissed") => {
                *dismissals_at_most.entry(iid as i32).or_default() += i64::from(withdraws);
            }
            Some(name) => {
                *expect_events
                    .entry((iid as i32, name.to_owned()))
                    .or_default() += 1;
            }
            None => {}
        }
        if (step + 1).is_multiple_of(BATCH) {
            delivered += deliver(&sim, &http, &mut rng).await?;
        }
        if (step + 1).is_multiple_of(SYNC_EVERY) {
            let (status, body) = post(
                format!("/workspaces/{ws}/connections/{conn}/sync"),
                json!({"type": "RECONCILIATION"}),
            )
            .await?;
            assert_eq!(status, 202, "{body}");
            reconciles += 1;
        }
    }
    delivered += deliver(&sim, &http, &mut rng).await?;
    assert!(
        delivered >= CHANGES,
        "every change sent a hook: {delivered}"
    );

    // Every delivery applied, then the closing reconcile.
    settle(&env, &pool).await?;
    let done = finished("RECONCILIATION", reconciles).await?;
    let (status, body) = post(
        format!("/workspaces/{ws}/connections/{conn}/sync"),
        json!({"type": "RECONCILIATION"}),
    )
    .await?;
    assert_eq!(status, 202, "{body}");
    let done_after = finished("RECONCILIATION", done.len() as i64 + 1).await?;
    assert!(
        done_after.iter().all(|(s, _)| s == "succeeded"),
        "{done_after:?}"
    );

    let dead: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_message")
        .fetch_one(&pool)
        .await
        .context("line 475")?;
    assert_eq!(dead, 0, "no delivery went dead");
    let mut differ = Vec::new();
    for iid in 1..=MERGE_REQUESTS {
        let want = sim.model(|m| expected(m, project, iid, requested.get(&iid)));
        let mut have = stored(&pool, project, iid).await?;
        // An approval a read found before its act arrived has no date (unknown, never a wrong
        // one): it stands, and its date is compared only where known.
        for ((user, at), (want_user, want_at)) in have.approvals.iter_mut().zip(&want.approvals) {
            if user == want_user && at.is_none() {
                *at = *want_at;
            }
        }
        if have != want {
            differ.push(format!("!{iid}:\n  mirror {have:?}\n  in order {want:?}"));
        }
    }
    assert!(
        differ.is_empty(),
        "the mirror differs from in-order application:\n{}",
        differ.join("\n")
    );
    // One item event per change that records one, and one activity entry per item event.
    let after = recorded(&pool, project).await?;
    let mut recorded_now: BTreeMap<(i32, String), i64> = BTreeMap::new();
    let mut dismissed: BTreeMap<i32, i64> = BTreeMap::new();
    let mut closes: BTreeMap<i32, i64> = BTreeMap::new();
    for (key, n) in &after {
        let delta = n - before_events.get(key).copied().unwrap_or(0);
        if key.1 == "scm.pull_request.review_dismissed" {
            dismissed.insert(key.0, delta);
        } else if key.1 == "scm.pull_request.closed" {
            closes.insert(key.0, delta);
        } else if delta != 0 {
            recorded_now.insert(key.clone(), delta);
        }
    }
    // A Merge Request Hook names no close time, so a close is recorded by the sync that stores
    // GitLab's: one reopened before any sync read it records none (never two).
    // A request that ends closed has its last close recorded by the closing reconcile.
    for iid in 1..=MERGE_REQUESTS as i32 {
        let n = closes.get(&iid).copied().unwrap_or(0);
        let closed = expect_events
            .remove(&(iid, "scm.pull_request.closed".to_owned()))
            .unwrap_or(0);
        assert!(n <= closed, "!{iid}: {n} close events for {closed} closes");
        let ends_closed = sim.model(|m| m.merge_requests[&(project, iid as u64)].state == "closed");
        assert!(
            !ends_closed || n >= 1,
            "!{iid}: its standing close is recorded"
        );
    }
    for (iid, n) in &dismissed {
        let bound = dismissals_at_most.get(iid).copied().unwrap_or(0);
        assert!(
            *n <= bound,
            "!{iid}: {n} dismissals for {bound} withdrawals"
        );
    }
    assert_eq!(recorded_now, expect_events, "item events of the script");
    let activity_after = activity(&pool, project).await?;
    for iid in 1..=MERGE_REQUESTS as i32 {
        let events: i64 = after
            .iter()
            .filter(|((n, _), _)| *n == iid)
            .map(|(_, c)| c)
            .sum();
        let entries = activity_after.get(&iid).copied().unwrap_or(0);
        assert_eq!(
            entries - before_activity.get(&iid).copied().unwrap_or(0),
            events
                - before_events
                    .iter()
                    .filter(|((n, _), _)| *n == iid)
                    .map(|(_, c)| c)
                    .sum::<i64>(),
            "!{iid}: one activity entry per item event"
        );
    }
    stack.sync.stop().await
}
