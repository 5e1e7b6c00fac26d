//! Check runs of the head: a completed check suite or an ended commit status reads the head's
//! runs; `scm.pull_request.checks_completed` records once per settled set of runs.

use std::time::Duration;

use anyhow::Result;
use serde_json::Value;
use time::OffsetDateTime;
use vendor_sim::github::webhook;
use vendor_sim::github::{
    CheckConclusion, EPOCH, Fault, FaultKind, NewPullRequest, Scenario, StatusState, ops,
};

use crate::support::LiveStack;

/// The connection's App (the stack's `app_id`): our own.
const OUR_APP: u64 = 4242;
/// Someone else's CI App.
const CI_APP: u64 = 77;

const COMPLETIONS: &str =
    "SELECT count(*) FROM item_event WHERE name = 'scm.pull_request.checks_completed'";

fn minute(n: i64) -> OffsetDateTime {
    EPOCH + time::Duration::minutes(n)
}

/// A stack with one repository and one open pull request, mirrored by its `opened` webhook.
struct Head {
    stack: LiveStack,
    repo: u64,
    sha: String,
}

impl Head {
    async fn open() -> Result<Head> {
        let stack = LiveStack::start(Scenario {
            repositories: 1,
            items: 0,
            pull_request_percent: 0,
            ..Scenario::default()
        })
        .await?;
        let repo = stack.repositories[0];
        let payload = stack.sim.model(|m| {
            let pr = m
                .add_pull_request(
                    repo,
                    NewPullRequest {
                        title: "checks".into(),
                        ..NewPullRequest::default()
                    },
                )
                .expect("repository exists");
            let r = m.repository(repo).expect("repository exists");
            webhook::pull_request_payload(m, "opened", r, &pr)
        });
        let sha = payload["pull_request"]["head"]["sha"]
            .as_str()
            .expect("head sha")
            .to_owned();
        stack.deliver("pull_request", &payload).await?;
        stack.settle().await?;
        let head = Head { stack, repo, sha };
        assert_eq!(
            head.count("SELECT count(*) FROM pull_request WHERE head_sha = '{sha}'")
                .await?,
            1,
            "the pull request is mirrored"
        );
        Ok(head)
    }

    async fn count(&self, sql: &str) -> Result<i64> {
        self.stack.count(&sql.replace("{sha}", &self.sha)).await
    }

    /// A suite of `app` on the head whose runs `names` ended at `ended` minutes.
    fn suite(&self, app: u64, runs: &[(&str, i64)]) -> (u64, Vec<u64>) {
        self.stack.sim.model(|m| {
            let suite = m
                .add_check_suite(self.repo, &self.sha, app, "CI")
                .expect("repository exists");
            let ids = runs
                .iter()
                .map(|(name, ended)| {
                    let run = m.add_check_run(self.repo, suite, name).expect("suite");
                    m.complete_check_run(self.repo, run, CheckConclusion::Success, minute(*ended));
                    run
                })
                .collect();
            m.complete_check_suite(self.repo, suite, CheckConclusion::Success);
            (suite, ids)
        })
    }

    /// Delivers `check_suite.completed` for `suite` as the model has it now, and waits. Each
    /// call is a new completion (GitHub dates it), so ingress takes it for a new delivery.
    async fn suite_completed(&self, suite: u64) -> Result<()> {
        let payload = self.stack.sim.model(|m| {
            let now = m.tick();
            m.update_check_suite(self.repo, suite, |s| s.updated_at = now);
            let r = m.repository(self.repo).expect("repository exists");
            let s = m.check_suite(self.repo, suite).expect("suite exists");
            webhook::check_suite_payload(m, "completed", r, s)
        });
        self.stack.deliver("check_suite", &payload).await?;
        self.stack.settle().await
    }

    async fn stored(&self) -> Result<(Option<String>, Option<bool>, Option<Value>)> {
        Ok(sqlx::query_as(
            "SELECT head_check_runs_sha, head_check_runs_finished, head_check_runs
               FROM pull_request WHERE head_sha = $1",
        )
        .bind(&self.sha)
        .fetch_one(&self.stack.pool)
        .await?)
    }

    async fn read_at(&self) -> Result<Option<OffsetDateTime>> {
        let (at,): (Option<OffsetDateTime>,) =
            sqlx::query_as("SELECT head_check_runs_read_at FROM pull_request WHERE head_sha = $1")
                .bind(&self.sha)
                .fetch_one(&self.stack.pool)
                .await?;
        Ok(at)
    }
}

#[tokio::test]
async fn a_completed_suite_with_every_run_ended_records_one_completion_and_a_repeat_none()
-> Result<()> {
    let head = Head::open().await?;
    let (suite, _) = head.suite(CI_APP, &[("build", 1), ("test", 2)]);
    head.suite_completed(suite).await?;
    assert_eq!(head.stack.count(COMPLETIONS).await?, 1);
    let (sha, finished, runs) = head.stored().await?;
    assert_eq!(sha.as_deref(), Some(head.sha.as_str()));
    assert_eq!(finished, Some(true));
    assert_eq!(
        head.stack
            .count("SELECT count(*) FROM pull_request WHERE head_check_state = 'success'")
            .await?,
        1
    );
    let runs = runs.expect("runs stored");
    assert_eq!(runs.as_array().map(Vec::len), Some(2));
    assert_eq!(
        runs[0]["link"].as_str().map(|l| l.contains('?')),
        Some(false),
        "links are stored without their query: {runs}"
    );
    // The event pins the pull request's version; its activity entry shares the source key.
    assert_eq!(
        head.count(
            "SELECT count(*) FROM item_event e JOIN pull_request p ON p.id = e.pull_request_id
              WHERE e.name = 'scm.pull_request.checks_completed'
                AND e.version = p.upstream_updated_at AND e.source_key LIKE 'checks:%'"
        )
        .await?,
        1
    );
    assert_eq!(
        head.count(
            "SELECT count(*) FROM activity_event WHERE kind = 'scm.pull_request.checks_completed'"
        )
        .await?,
        1
    );
    let first_read = head.read_at().await?;

    // The same read again: no second event, and the stored read keeps its time.
    head.suite_completed(suite).await?;
    assert_eq!(head.stack.count(COMPLETIONS).await?, 1);
    assert_eq!(head.read_at().await?, first_read);
    assert_eq!(head.stack.sim.calls(ops::GET_COMMIT_CHECK_RUNS), 2);
    Ok(())
}

#[tokio::test]
async fn a_rerun_on_the_same_head_records_a_new_completion_and_a_reordered_or_lagging_read_none()
-> Result<()> {
    let head = Head::open().await?;
    let (suite, runs) = head.suite(CI_APP, &[("build", 1), ("test", 2)]);
    head.suite_completed(suite).await?;
    assert_eq!(head.stack.count(COMPLETIONS).await?, 1);

    // A re-run ends at another time: a new completion at the same version.
    let rerun = |ended: [i64; 2]| {
        head.stack.sim.model(|m| {
            for (run, at) in runs.iter().zip(ended) {
                m.complete_check_run(head.repo, *run, CheckConclusion::Success, minute(at));
            }
        })
    };
    rerun([10, 11]);
    head.suite_completed(suite).await?;
    assert_eq!(head.stack.count(COMPLETIONS).await?, 2);
    assert_eq!(
        head.count(
            "SELECT count(DISTINCT version) FROM item_event
              WHERE name = 'scm.pull_request.checks_completed'"
        )
        .await?,
        1,
        "both completions pin the same version"
    );

    // The same runs in another order: nothing changes, the stored read keeps its time.
    let read = head.read_at().await?;
    head.stack.sim.model(|m| {
        m.update_check_suite(head.repo, suite, |s| s.runs.reverse());
    });
    head.suite_completed(suite).await?;
    assert_eq!(head.stack.count(COMPLETIONS).await?, 2);
    assert_eq!(head.read_at().await?, read);

    // A lagging read shows the earlier runs again: they already recorded their completion.
    rerun([1, 2]);
    head.suite_completed(suite).await?;
    assert_eq!(head.stack.count(COMPLETIONS).await?, 2);
    Ok(())
}

#[tokio::test]
async fn an_awaiting_approval_suite_keeps_the_list_incomplete() -> Result<()> {
    let head = Head::open().await?;
    // GitHub completes a suite waiting for a maintainer's approval as action_required, no runs.
    let suite = head.stack.sim.model(|m| {
        let suite = m
            .add_check_suite(head.repo, &head.sha, CI_APP, "GitHub Actions")
            .expect("repository exists");
        m.complete_check_suite(head.repo, suite, CheckConclusion::ActionRequired);
        suite
    });
    head.suite_completed(suite).await?;
    assert_eq!(head.stack.count(COMPLETIONS).await?, 0);
    let (sha, finished, _) = head.stored().await?;
    assert_eq!(
        sha.as_deref(),
        Some(head.sha.as_str()),
        "the read is stored"
    );
    assert_eq!(finished, Some(false));
    // The simulator's rollup reads success; the waiting suite keeps the head pending.
    assert_eq!(
        head.stack
            .count("SELECT count(*) FROM pull_request WHERE head_check_state = 'pending'")
            .await?,
        1
    );
    Ok(())
}

#[tokio::test]
async fn our_own_apps_suite_is_ignored() -> Result<()> {
    let head = Head::open().await?;
    let (suite, _) = head.suite(OUR_APP, &[("forgesync", 1)]);
    head.suite_completed(suite).await?;
    assert_eq!(head.stack.count(COMPLETIONS).await?, 0);
    assert_eq!(head.stored().await?.0, None, "nothing was read or stored");
    assert_eq!(head.stack.sim.calls(ops::GET_COMMIT_CHECK_RUNS), 0);
    Ok(())
}

#[tokio::test]
async fn an_ended_commit_status_reads_the_head_and_a_pending_one_does_not() -> Result<()> {
    let head = Head::open().await?;
    let status = |state: StatusState| {
        head.stack.sim.model(|m| {
            let s = m
                .add_commit_status(head.repo, &head.sha, "ci/lint", state, minute(3))
                .expect("repository exists");
            webhook::status_payload(m, m.repository(head.repo).expect("repository"), &s)
        })
    };
    head.stack
        .deliver("status", &status(StatusState::Pending))
        .await?;
    head.stack.settle().await?;
    assert_eq!(head.stack.sim.calls(ops::GET_COMMIT_CHECK_RUNS), 0);
    head.stack
        .deliver("status", &status(StatusState::Failure))
        .await?;
    head.stack.settle().await?;
    assert_eq!(head.stack.count(COMPLETIONS).await?, 1);
    let (_, finished, runs) = head.stored().await?;
    assert_eq!(finished, Some(true));
    assert_eq!(runs.expect("runs")[0]["state"], "failure");
    Ok(())
}

#[tokio::test]
async fn a_failed_read_records_nothing() -> Result<()> {
    let head = Head::open().await?;
    let (suite, _) = head.suite(CI_APP, &[("build", 1)]);
    head.stack.sim.inject(Fault::always(
        ops::GET_COMMIT_CHECK_RUNS,
        FaultKind::FieldError {
            path: vec!["repository".into(), "object".into(), "checkSuites".into()],
            error_type: "FORBIDDEN".into(),
            message: "Resource not accessible by integration".into(),
        },
    ));
    head.suite_completed(suite).await?;
    assert!(head.stack.sim.calls(ops::GET_COMMIT_CHECK_RUNS) >= 1);
    assert_eq!(head.stack.count(COMPLETIONS).await?, 0);
    assert_eq!(head.stored().await?.0, None, "the stored runs stay");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_suite_whose_reader_cannot_be_built_is_redelivered_and_applied_once_it_can() -> Result<()>
{
    let head = Head::open().await?;
    let s = &head.stack;
    let (suite, _) = head.suite(CI_APP, &[("build", 1)]);
    // Suspended: deliveries are still admitted, but GitHub is not read for the connection.
    let (status, body) = s
        .post(
            &format!("/workspaces/{}/connections/{}/suspend", s.ws, s.conn),
            serde_json::json!({}),
        )
        .await?;
    assert_eq!(status, 200, "{body}");
    let payload = s.sim.model(|m| {
        let r = m.repository(head.repo).expect("repository exists");
        let suite = m.check_suite(head.repo, suite).expect("suite exists");
        webhook::check_suite_payload(m, "completed", r, suite)
    });
    s.deliver("check_suite", &payload).await?;
    // Handled and handed back for a later attempt, not acknowledged.
    let ns = s.env.bus.namespace();
    let stream = s
        .env
        .bus
        .jetstream()
        .get_stream(ns.name(bus::Stream::WebhooksGithub.name()))
        .await?;
    let durable = ns.name("github-sync-repository-events");
    forgesync_e2e::eventually("the delivery was never retried", || {
        let (stream, durable) = (&stream, &durable);
        async move {
            let info = stream.consumer_info(durable).await?;
            Ok((info.num_redelivered > 0).then_some(()))
        }
    })
    .await?;
    assert_eq!(s.sim.calls(ops::GET_COMMIT_CHECK_RUNS), 0);
    assert_eq!(head.stored().await?.0, None);

    let (status, body) = s
        .post(
            &format!("/workspaces/{}/connections/{}/resume", s.ws, s.conn),
            serde_json::json!({}),
        )
        .await?;
    assert_eq!(status, 200, "{body}");
    forgesync_e2e::eventually("the retried delivery never applied", || async {
        Ok((head.stack.count(COMPLETIONS).await? == 1).then_some(()))
    })
    .await?;
    assert_eq!(head.stored().await?.0.as_deref(), Some(head.sha.as_str()));
    assert_eq!(s.count("SELECT count(*) FROM dead_message").await?, 0);
    Ok(())
}

#[tokio::test]
async fn the_sync_reads_an_unfinished_list_again() -> Result<()> {
    let head = Head::open().await?;
    let (suite, run) = head.stack.sim.model(|m| {
        let suite = m
            .add_check_suite(head.repo, &head.sha, CI_APP, "CI")
            .expect("repository exists");
        let run = m.add_check_run(head.repo, suite, "build").expect("suite");
        (suite, run)
    });
    // A status of the head ended while the build still runs: the list is not finished.
    let payload = head.stack.sim.model(|m| {
        let s = m
            .add_commit_status(
                head.repo,
                &head.sha,
                "ci/lint",
                StatusState::Success,
                minute(1),
            )
            .expect("repository exists");
        webhook::status_payload(m, m.repository(head.repo).expect("repository"), &s)
    });
    head.stack.deliver("status", &payload).await?;
    head.stack.settle().await?;
    assert_eq!(head.stored().await?.1, Some(false));
    assert_eq!(head.stack.count(COMPLETIONS).await?, 0);

    // The build ends; its suite's hook is lost. The next sync reads the list again.
    head.stack.sim.model(|m| {
        m.complete_check_run(head.repo, run, CheckConclusion::Success, minute(2));
        m.complete_check_suite(head.repo, suite, CheckConclusion::Success);
    });
    head.stack.reconcile().await?;
    head.stack.finished_jobs("RECONCILIATION", 1).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while head.stack.count(COMPLETIONS).await? == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no completion recorded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(head.stored().await?.1, Some(true));
    assert_eq!(
        head.count(
            "SELECT count(*) FROM item_event
              WHERE name = 'scm.pull_request.checks_completed' AND origin = 'sync'"
        )
        .await?,
        1
    );
    Ok(())
}
