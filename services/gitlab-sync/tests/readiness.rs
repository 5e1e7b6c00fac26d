//! The readiness read after a Merge Request Hook and the same facts on the sync's pages, through
//! gitlab-sync in-process against real Postgres and JetStream and the simulated GitLab over HTTP
//! (`common`); syncs run on the engine with the connection's token. Bodies are the simulator's
//! real-shaped hooks.

mod common;

use std::time::Duration;

use anyhow::Result;
use common::{World, at, hook_version};
use serde_json::Value as Json;
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::gitlab::webhook::merge_request_hook;
use vendor_sim::gitlab::{Fault, GitlabFault, MergeRequest, ops};

/// What the mirror holds about a merge request's readiness.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
struct Facts {
    reviewers: Option<Json>,
    review_decision: Option<String>,
    mergeable: Option<bool>,
    merge_status: Option<String>,
    approval_read_at: Option<OffsetDateTime>,
    head_check_state: Option<String>,
    head_check_sha: Option<String>,
    merged_at: Option<OffsetDateTime>,
    merge_commit_sha: Option<String>,
    merged_by: Option<String>,
}

impl World {
    /// Changes merge request `iid` in the simulator with `f`; the hook GitLab sends for it
    /// (`update`, `merge`, ...).
    fn change(&self, iid: u64, f: impl FnOnce(&mut MergeRequest)) -> Json {
        let api = self.api;
        self.sim.model(|m| {
            let before = m.merge_requests[&(api, iid)].clone();
            assert!(m.update_merge_request(api, iid, f));
            let mr = m.merge_requests[&(api, iid)].clone();
            let action = match (before.state.as_str(), mr.state.as_str()) {
                ("opened", "merged") => "merge",
                _ => "update",
            };
            merge_request_hook(m, &mr, action, Some(&before))
        })
    }

    /// Changes merge request `iid` in the simulator without any hook.
    fn quietly(&self, iid: u64, f: impl FnOnce(&mut MergeRequest)) {
        let api = self.api;
        self.sim
            .model(|m| f(m.merge_requests.get_mut(&(api, iid)).unwrap()));
    }

    /// Delivers `body` through A's route and waits until it settled.
    async fn deliver(&self, body: &Json) -> Result<Uuid> {
        let id = self.registered(self.a, body, None).await?;
        self.settle().await?;
        Ok(id)
    }

    /// Fails the next readiness read with `faults` at these fields of the merge request.
    fn fail_next_read_at(&self, fields: &[&str]) {
        for field in fields {
            // A fault counts the calls made after it is armed.
            self.sim.inject(Fault::nth(
                ops::MERGE_REQUEST_READINESS,
                1,
                GitlabFault::FieldError {
                    path: format!("project.mergeRequest.{field}"),
                    message: "Timeout on resolving the field".into(),
                },
            ));
        }
    }

    async fn facts(&self, iid: u64) -> Result<Facts> {
        Ok(sqlx::query_as(
            "SELECT p.reviewers, p.review_decision, p.mergeable, p.merge_status,
                    p.approval_read_at, p.head_check_state, p.head_check_sha, p.merged_at,
                    p.merge_commit_sha, p.merged_by
               FROM pull_request p JOIN repository r ON r.id = p.repository_id
              WHERE r.native_id = $1 AND p.number = $2",
        )
        .bind(self.api as i64)
        .bind(iid as i32)
        .fetch_one(self.pool())
        .await?)
    }

    /// The standing approvals of merge request `iid`: (username, approved_at).
    async fn approvals(&self, iid: u64) -> Result<Vec<(String, Option<OffsetDateTime>)>> {
        Ok(sqlx::query_as(
            "SELECT a.username, a.approved_at FROM merge_request_approval a
               JOIN pull_request p ON p.id = a.pull_request_id
               JOIN repository r ON r.id = p.repository_id
              WHERE r.native_id = $1 AND p.number = $2 ORDER BY a.username",
        )
        .bind(self.api as i64)
        .bind(iid as i32)
        .fetch_all(self.pool())
        .await?)
    }
}

fn reviewers(list: &[(&str, Option<&str>)]) -> Option<Json> {
    Some(Json::Array(
        list.iter()
            .map(|(u, s)| serde_json::json!({"username": u, "state": s}))
            .collect(),
    ))
}

const MERGED: &str = "scm.pull_request.merged";

#[tokio::test]
async fn the_read_after_a_hook_records_reviewers_approvals_and_a_decision_from_reviewers()
-> Result<()> {
    let w = World::start().await?;
    let iid = w.open("ready?", at(10)).await?;
    let f = w.facts(iid).await?;
    // Nobody asked, nobody approved: review required; GitLab reports no pipeline for the head.
    assert_eq!(f.reviewers, reviewers(&[]));
    assert_eq!(f.review_decision.as_deref(), Some("review_required"));
    assert_eq!(
        (f.mergeable, f.merge_status.as_deref()),
        (Some(true), Some("mergeable"))
    );
    assert!(f.approval_read_at.is_some());
    assert_eq!(f.head_check_state.as_deref(), Some("no_pipeline"));

    // Reviewers with their 18.6+ states, one named without a state; carol approves.
    w.quietly(iid, |mr| {
        mr.reviewers = vec![
            ("carol".into(), Some("APPROVED".into())),
            ("dan".into(), None),
        ]
    });
    let approved = w.approve(iid, "carol");
    w.deliver(&approved).await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        f.reviewers,
        reviewers(&[("carol", Some("approved")), ("dan", None)])
    );
    assert_eq!(f.review_decision.as_deref(), Some("approved"));
    assert_eq!(
        w.approvals(iid).await?,
        [("carol".to_owned(), Some(hook_version(&approved)))]
    );

    // A reviewer's request for changes decides, whatever the approvals.
    let update = w.change(iid, |mr| {
        mr.title = "ready!".into();
        mr.reviewers[1].1 = Some("REQUESTED_CHANGES".into());
    });
    w.deliver(&update).await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        f.reviewers,
        reviewers(&[
            ("carol", Some("approved")),
            ("dan", Some("requested_changes"))
        ])
    );
    assert_eq!(f.review_decision.as_deref(), Some("changes_requested"));

    // Named without a state (GitLab before 18.6): the stored state stays.
    let update = w.change(iid, |mr| mr.reviewers[1].1 = None);
    w.deliver(&update).await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        f.reviewers,
        reviewers(&[
            ("carol", Some("approved")),
            ("dan", Some("requested_changes"))
        ])
    );
    assert_eq!(f.review_decision.as_deref(), Some("changes_requested"));

    // A state this build does not know clears the stored one.
    w.sim.inject(Fault::nth(
        ops::MERGE_REQUEST_READINESS,
        1,
        GitlabFault::ReplaceValue {
            path: "project.mergeRequest.reviewers.nodes.1.mergeRequestInteraction.reviewState"
                .into(),
            value: "DEFERRED_UNTIL_TUESDAY".into(),
        },
    ));
    let update = w.change(iid, |mr| mr.title = "again".into());
    w.deliver(&update).await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        f.reviewers,
        reviewers(&[("carol", Some("approved")), ("dan", None)])
    );
    assert_eq!(f.review_decision.as_deref(), Some("approved"));

    // GitLab still syncing approvals: nothing approval-derived is known.
    let update = w.change(iid, |mr| {
        mr.title = "syncing".into();
        mr.detailed_merge_status = Some("APPROVALS_SYNCING".into());
    });
    w.deliver(&update).await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        (f.review_decision, f.mergeable, f.merge_status),
        (None, None, None)
    );
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

#[tokio::test]
async fn a_stale_approval_hook_is_rejected_and_the_read_records_the_approval() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("stale", at(10)).await?;
    // With GitLab's read failing, the hooks alone decide what is stored.
    w.sim.inject(Fault::always(
        ops::MERGE_REQUEST_READINESS,
        GitlabFault::FieldError {
            path: "project".into(),
            message: "unavailable".into(),
        },
    ));
    let approved = w.approve(iid, "carol");
    // GitLab built the approval hook before a later change advanced updated_at.
    let update = w.change(iid, |mr| mr.title = "edited".into());
    assert!(hook_version(&update) > hook_version(&approved));
    w.deliver(&update).await?;
    // The stale act changes nothing.
    let first = w.deliver(&approved).await?;
    assert_eq!(w.approvals(iid).await?, []);

    // Redelivered with GitLab answering: the act is still rejected (no act date), and the read
    // records carol's approval from GitLab's approver list (its date unknown: open, no route
    // read).
    w.sim.clear_faults();
    w.registered(w.a, &approved, Some(first)).await?;
    w.settle().await?;
    assert_eq!(w.approvals(iid).await?, [("carol".to_owned(), None)]);
    assert_eq!(
        w.facts(iid).await?.review_decision.as_deref(),
        Some("approved")
    );
    w.stop().await
}

#[tokio::test]
async fn field_errors_leave_exactly_those_facts_unknown_never_empty() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("flaky", at(10)).await?;
    w.quietly(iid, |mr| {
        mr.reviewers = vec![("carol".into(), Some("APPROVED".into()))]
    });
    w.deliver(&w.approve(iid, "carol")).await?;
    let before = w.facts(iid).await?;
    assert_eq!(before.review_decision.as_deref(), Some("approved"));
    assert_eq!(before.head_check_state.as_deref(), Some("no_pipeline"));

    // GitLab now lists no approver and no reviewer and runs a pipeline, but fails those fields.
    w.quietly(iid, |mr| {
        mr.approved_by.clear();
        mr.reviewers.clear();
    });
    let api = w.api;
    w.sim.model(|m| m.start_pipeline(api, iid)).unwrap();
    w.fail_next_read_at(&["approvedBy", "reviewers", "headPipeline"]);
    let mut update = w.change(iid, |mr| mr.title = "one".into());
    // Only the read speaks of reviewers here (a hook's own list is a fact of its own).
    update.as_object_mut().unwrap().remove("reviewers");
    w.deliver(&update).await?;
    let f = w.facts(iid).await?;
    // A failed approver list is not empty; a failed reviewer list is not empty; a failed
    // headPipeline records no check.
    assert_eq!(w.approvals(iid).await?.len(), 1);
    assert_eq!(f.reviewers, before.reviewers);
    assert_eq!(f.head_check_state.as_deref(), Some("no_pipeline"));
    assert_eq!(
        f.review_decision, None,
        "a list not read whole decides nothing"
    );

    // A failed head: nothing head-specific (approvals, decision) is taken; the reviewer list
    // and the pipeline GitLab names with its commit are.
    w.fail_next_read_at(&["diffHeadSha"]);
    w.deliver(&w.change(iid, |mr| mr.title = "two".into()))
        .await?;
    let f = w.facts(iid).await?;
    assert_eq!(w.approvals(iid).await?.len(), 1);
    assert_eq!(f.review_decision, None);
    assert_eq!(f.reviewers, reviewers(&[]));
    assert_eq!(f.head_check_state.as_deref(), Some("pending"));

    // Read whole again: GitLab's empty lists are facts now.
    w.deliver(&w.change(iid, |mr| mr.title = "three".into()))
        .await?;
    assert_eq!(w.approvals(iid).await?, []);
    assert_eq!(
        w.facts(iid).await?.review_decision.as_deref(),
        Some("review_required")
    );
    w.stop().await
}

#[tokio::test]
async fn a_project_unmonitored_during_the_read_takes_nothing_from_it() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("moving", at(10)).await?;
    let before = w.facts(iid).await?;
    let approved = w.approve(iid, "carol");
    let next = w.sim.calls(ops::MERGE_REQUEST_READINESS) + 1;
    w.sim.inject(Fault::nth(
        ops::MERGE_REQUEST_READINESS,
        1,
        GitlabFault::Delay(Duration::from_secs(3)),
    ));
    w.registered(w.a, &approved, None).await?;
    // While GitLab is read, A stops monitoring the project (and its selection no longer names it).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while w.sim.calls(ops::MERGE_REQUEST_READINESS) < next {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "no read began");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sqlx::query("DELETE FROM repository_to_monitor WHERE connection_id = $1")
        .bind(w.a.route.connection_id)
        .execute(w.pool())
        .await?;
    sqlx::query("UPDATE connection SET settings = $2 WHERE id = $1")
        .bind(w.a.route.connection_id)
        .bind(serde_json::json!({"group": "acme", "projects": ["acme/elsewhere"]}))
        .execute(w.pool())
        .await?;
    w.settle().await?;
    // The act was admitted before; the read took nothing: the decision stays as the act left it.
    assert_eq!(w.approvals(iid).await?.len(), 1);
    let f = w.facts(iid).await?;
    assert_eq!(f.review_decision, None);
    assert_eq!(f.approval_read_at, before.approval_read_at);
    w.stop().await
}

#[tokio::test]
async fn a_merged_request_takes_its_merge_facts_and_gitlabs_approval_dates() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("to merge", at(10)).await?;
    w.deliver(&w.approve(iid, "carol")).await?;
    // GitLab's standing row is dated earlier than the hook said.
    w.quietly(iid, |mr| mr.approved_by[0].1 = at(5));
    let merge = w.change(iid, |mr| {
        mr.state = "merged".into();
        mr.merge_user = Some("dave".into());
    });
    let (merged_at, commit) = w.sim.model(|m| {
        let mr = &m.merge_requests[&(w.api, iid)];
        (mr.merged_at, mr.merge_commit_sha.clone())
    });
    // The hook names no merger and no merge time.
    assert!(merge["object_attributes"].get("merge_user").is_none());
    w.deliver(&merge).await?;
    let f = w.facts(iid).await?;
    assert_eq!(f.merged_at, merged_at);
    assert_eq!(f.merged_by.as_deref(), Some("dave"));
    assert_eq!(f.merge_commit_sha, commit);
    assert_eq!(w.approvals(iid).await?, [("carol".to_owned(), Some(at(5)))]);
    // A recorded merger is never replaced.
    w.quietly(iid, |mr| mr.merge_user = Some("mallory".into()));
    w.sync_a("RECONCILIATION").await?;
    assert_eq!(w.facts(iid).await?.merged_by.as_deref(), Some("dave"));
    w.stop().await
}

#[tokio::test]
async fn one_merge_event_by_any_path() -> Result<()> {
    let w = World::start().await?;
    // The hook first, then its copies and a sync.
    let hooked = w.open("hook first", at(10)).await?;
    let merge = w.change(hooked, |mr| mr.state = "merged".into());
    let first = w.thrice(&merge).await?;
    w.settle().await?;
    w.sync_a("RECONCILIATION").await?;
    w.registered(w.a, &merge, Some(first)).await?;
    w.settle().await?;
    let events = w.events(hooked, MERGED).await?;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "webhook");
    assert_eq!(w.activities(hooked, MERGED).await?, 1);

    // The sync first, then the hook.
    let synced = w.open("sync first", at(20)).await?;
    let merge = w.change(synced, |mr| mr.state = "merged".into());
    w.sync_a("RECONCILIATION").await?;
    w.thrice(&merge).await?;
    w.settle().await?;
    let events = w.events(synced, MERGED).await?;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "sync");
    assert_eq!(w.activities(synced, MERGED).await?, 1);
    w.stop().await
}

#[tokio::test]
async fn the_sync_writes_the_same_readiness_facts() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("synced", at(10)).await?;
    w.quietly(iid, |mr| {
        mr.reviewers = vec![("erin".into(), Some("REQUESTED_CHANGES".into()))];
        mr.updated_at += time::Duration::seconds(5);
    });
    w.sync_a("RECONCILIATION").await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        f.reviewers,
        reviewers(&[("erin", Some("requested_changes"))])
    );
    assert_eq!(f.review_decision.as_deref(), Some("changes_requested"));
    // Nested reviewer pages are completed before the list is used: with GitLab saying more
    // follow, the sync asks MergeRequestReviewers for the rest.
    w.quietly(iid, |mr| {
        mr.reviewers = vec![("erin".into(), Some("APPROVED".into()))];
        mr.updated_at += time::Duration::seconds(5);
    });
    w.sim.inject(Fault::nth(
        ops::PROJECT_MERGE_REQUESTS,
        1,
        GitlabFault::ReplaceValue {
            path: "project.mergeRequests.nodes.0.reviewers.pageInfo.hasNextPage".into(),
            value: true.into(),
        },
    ));
    let asked = w.sim.calls(ops::MERGE_REQUEST_REVIEWERS);
    w.sync_a("RECONCILIATION").await?;
    assert!(w.sim.calls(ops::MERGE_REQUEST_REVIEWERS) > asked);
    let f = w.facts(iid).await?;
    assert_eq!(f.reviewers, reviewers(&[("erin", Some("approved"))]));
    w.stop().await
}

#[tokio::test]
async fn another_workspaces_endpoint_sending_approval_hooks_for_as_project_changes_nothing()
-> Result<()> {
    let w = World::start().await?;
    let iid = w.open("A's", at(10)).await?;
    let before = w.facts(iid).await?;
    let reads = w.sim.calls(ops::MERGE_REQUEST_READINESS);
    // B forges approval hooks for A's project on its own route and its operator endpoint.
    let forged = w.approve(iid, "mallory");
    w.registered(w.b, &forged, None).await?;
    w.operator(w.b, &forged).await?;
    w.settle().await?;
    assert_eq!(w.approvals(iid).await?, []);
    assert_eq!(w.facts(iid).await?, before);
    // B's token never read A's merge request for it.
    assert_eq!(w.sim.calls(ops::MERGE_REQUEST_READINESS), reads);
    w.stop().await
}

#[tokio::test]
async fn hook_reviewer_lists_are_dated_snapshots() -> Result<()> {
    let w = World::start().await?;
    // Only the hooks state reviewers here: GitLab's readiness read fails.
    w.sim.inject(Fault::always(
        ops::MERGE_REQUEST_READINESS,
        GitlabFault::FieldError {
            path: "project".into(),
            message: "unavailable".into(),
        },
    ));
    let iid = w.open("asked", at(10)).await?;
    assert_eq!(w.facts(iid).await?.reviewers, reviewers(&[]));
    // GitLab 18.6+: each reviewer with their state.
    let stated = w.change(iid, |mr| {
        mr.title = "one".into();
        mr.reviewers = vec![
            ("carol".into(), Some("REVIEWED".into())),
            ("dan".into(), None),
        ];
    });
    w.deliver(&stated).await?;
    assert_eq!(
        w.facts(iid).await?.reviewers,
        reviewers(&[("carol", Some("reviewed")), ("dan", None)])
    );
    // Before 18.6: named without a state, carol keeps hers; dan is no longer asked.
    let named = w.change(iid, |mr| {
        mr.title = "two".into();
        mr.reviewers = vec![("carol".into(), None)];
    });
    w.deliver(&named).await?;
    assert_eq!(
        w.facts(iid).await?.reviewers,
        reviewers(&[("carol", Some("reviewed"))])
    );
    // Two lists of the same version: the one received later stands, and the earlier one
    // delivered again changes nothing.
    let mut earlier = named.clone();
    earlier["reviewers"] = serde_json::json!([{"username": "erin", "state": "approved"}]);
    let mut later = named.clone();
    later["reviewers"] = serde_json::json!([{"username": "frank"}]);
    let first = w.deliver(&earlier).await?;
    assert_eq!(
        w.facts(iid).await?.reviewers,
        reviewers(&[("erin", Some("approved"))])
    );
    w.deliver(&later).await?;
    w.registered(w.a, &earlier, Some(first)).await?;
    w.settle().await?;
    assert_eq!(w.facts(iid).await?.reviewers, reviewers(&[("frank", None)]));
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

#[tokio::test]
async fn a_rotated_token_is_read_with_at_once() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("rotated", at(10)).await?;
    assert_eq!(w.facts(iid).await?.mergeable, Some(true));
    let reads = || w.sim.calls(ops::MERGE_REQUEST_READINESS);

    // GitLab now takes only A's new token, which A stores: the next hook's read uses it (a
    // client kept from the old token would be refused and record nothing).
    w.sim.model(|m| {
        m.tokens.remove("token-a");
        m.add_token("token-a-rotated");
    });
    store::secrets::put(
        &w.env.db.db,
        &w.keyring,
        w.a.connection_id,
        "token",
        b"token-a-rotated",
    )
    .await?;
    let update = w.change(iid, |mr| {
        mr.title = "rotated, then blocked".into();
        mr.mergeable = false;
    });
    let before = reads();
    w.deliver(&update).await?;
    assert_eq!(reads(), before + 1);
    assert_eq!(w.facts(iid).await?.mergeable, Some(false));

    w.stop().await
}
