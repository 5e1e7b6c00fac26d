//! Pushes, ready and draft, and requested changes through gitlab-sync, in-process against real
//! Postgres and JetStream and the simulated GitLab (`common`); syncs run on the engine with the
//! connection's token. Bodies are the simulator's real-shaped hooks.

mod common;

use anyhow::Result;
use common::{World, at};
use lifecycle_core::source_key::LifecycleChange;
use serde_json::Value as Json;
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::gitlab::webhook::{Pushed, merge_request_hook, note_hook};

const SYNCHRONIZED: &str = "scm.pull_request.synchronized";

impl World {
    /// Pushes `sha` onto merge request `iid` at `at` (`None`: now).
    fn push(&self, iid: u64, sha: &str, at: Option<OffsetDateTime>) -> Pushed {
        let api = self.api;
        self.sim
            .model(|m| m.push_merge_request(api, iid, sha, "alice", at))
            .expect("the merge request exists")
    }

    /// Sets merge request `iid`'s draft flag; the `update` hook GitLab sends.
    fn set_draft(&self, iid: u64, draft: bool) -> Json {
        let api = self.api;
        self.sim.model(|m| {
            let before = m.merge_requests[&(api, iid)].clone();
            assert!(m.update_merge_request(api, iid, |mr| mr.draft = draft));
            let mr = m.merge_requests[&(api, iid)].clone();
            merge_request_hook(m, &mr, "update", Some(&before))
        })
    }

    /// `user` requests changes on merge request `iid`; the Note Hook of GitLab's system note.
    fn request_changes(&self, iid: u64, user: &str) -> Json {
        let api = self.api;
        self.sim.model(|m| {
            let id = m
                .request_changes(api, iid, user)
                .expect("the merge request");
            note_hook(m, &m.notes[&id].clone(), "create")
        })
    }

    /// The stored head and review decision of merge request `iid`.
    async fn head(&self, iid: u64) -> Result<(Option<String>, Option<String>)> {
        Ok(sqlx::query_as(
            "SELECT p.head_sha, p.review_decision FROM pull_request p
               JOIN repository r ON r.id = p.repository_id
              WHERE r.native_id = $1 AND p.number = $2",
        )
        .bind(self.api as i64)
        .bind(iid as i32)
        .fetch_one(self.pool())
        .await?)
    }

    /// Sets merge request `iid`'s stored decision, as a readiness read would.
    async fn read_decision(&self, iid: u64, decision: &str) -> Result<()> {
        sqlx::query("UPDATE pull_request SET review_decision = $2 WHERE number = $1")
            .bind(iid as i32)
            .bind(decision)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Who stands as having requested changes on merge request `iid`, with the note.
    async fn requested_changes(&self, iid: u64) -> Result<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT c.username, c.note_id FROM merge_request_requested_change c
               JOIN pull_request p ON p.id = c.pull_request_id
              WHERE p.number = $1 ORDER BY c.username",
        )
        .bind(iid as i32)
        .fetch_all(self.pool())
        .await?)
    }

    /// Whose approval stands on merge request `iid`.
    async fn approvals(&self, iid: u64) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT a.username FROM merge_request_approval a
               JOIN pull_request p ON p.id = a.pull_request_id
              WHERE p.number = $1 ORDER BY a.username",
        )
        .bind(iid as i32)
        .fetch_all(self.pool())
        .await?)
    }
}

/// The source key of the push from `before` to `after`.
fn push_key(before: &str, after: &str) -> String {
    LifecycleChange::Push { before, after }
        .source_key()
        .as_str()
        .to_owned()
}

fn sha(n: u32) -> String {
    format!("{n:040x}")
}

/// The head a merge request opened in the simulator starts at.
fn initial_head(iid: u64) -> String {
    format!("{iid:040x}")
}

#[tokio::test]
async fn a_push_hook_records_the_push_of_the_open_merge_request_on_its_branch_once() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("pushed", at(10)).await?;
    let other = w.open("another branch", at(10)).await?;
    let h0 = initial_head(iid);
    w.read_decision(iid, "approved").await?;
    w.read_decision(other, "approved").await?;
    let pushed = w.push(iid, &sha(0xa1), None);
    assert_eq!(pushed.push["object_kind"], "push");

    // The Push Hook, thrice: one push, under the key the update hook derives.
    let push_id = w.thrice(&pushed.push).await?;
    w.settle().await?;
    let expected = vec![(push_key(&h0, &sha(0xa1)), "webhook".to_owned())];
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, expected);
    assert_eq!(w.activities(iid, SYNCHRONIZED).await?, 1);
    // A Push Hook names no date: the head stays until a dated writer moves it; the push left
    // the stored head, so readiness is unknown.
    assert_eq!(w.head(iid).await?, (Some(h0.clone()), None));
    // Another branch's merge request heard nothing.
    assert!(w.events(other, SYNCHRONIZED).await?.is_empty());
    assert_eq!(w.head(other).await?.1, Some("approved".into()));

    // The update hook of the same push moves the head and adds no second push.
    let update_id = w.thrice(&pushed.update).await?;
    w.settle().await?;
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, expected);
    assert_eq!(w.activities(iid, SYNCHRONIZED).await?, 1);
    assert_eq!(w.head(iid).await?.0, Some(sha(0xa1)));

    // Redelivered, the push and its update hook add nothing; a decision read since stays
    // through the push's redelivery (an update hook is followed by a readiness read of its own).
    w.again(&pushed.update, update_id).await?;
    w.settle().await?;
    w.read_decision(iid, "approved").await?;
    w.again(&pushed.push, push_id).await?;
    w.settle().await?;
    assert_eq!(
        w.head(iid).await?,
        (Some(sha(0xa1)), Some("approved".into()))
    );
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, expected);

    // A closed merge request on a pushed branch records nothing.
    let api = w.api;
    let closed = w.sim.model(|m| {
        let before = m.merge_requests[&(api, other)].clone();
        assert!(m.update_merge_request(api, other, |mr| mr.state = "closed".into()));
        let mr = m.merge_requests[&(api, other)].clone();
        merge_request_hook(m, &mr, "close", Some(&before))
    });
    w.registered(w.a, &closed, None).await?;
    w.settle().await?;
    let late = w.push(other, &sha(0xb1), None);
    w.registered(w.a, &late.push, None).await?;
    w.settle().await?;
    assert!(w.events(other, SYNCHRONIZED).await?.is_empty());
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

/// Two pushes in one second and a force-push back to an earlier head: delivered in order on one
/// merge request, and on another each hook thrice, newest first and shuffled. Both end at the
/// head in-order application reaches, with each push recorded once.
#[tokio::test]
async fn same_second_and_force_back_pushes_each_count_once_whatever_the_delivery() -> Result<()> {
    let w = World::start().await?;
    let mut scripts = Vec::new();
    for title in ["in order", "shuffled"] {
        let iid = w.open(title, at(10)).await?;
        let h0 = initial_head(iid);
        let base = 0x100 * iid as u32;
        let (h1, h2) = (sha(base + 1), sha(base + 2));
        // h0 -> h1 and h1 -> h2 in one second, then back to h1.
        let pushes = [
            w.push(iid, &h1, Some(at(20))),
            w.push(iid, &h2, Some(at(20))),
            w.push(iid, &h1, Some(at(21))),
        ];
        let keys = vec![push_key(&h0, &h1), push_key(&h1, &h2), push_key(&h2, &h1)];
        scripts.push((iid, pushes, keys, h1));
    }

    let (iid, pushes, keys, h1) = &scripts[0];
    for p in pushes {
        w.registered(w.a, &p.push, None).await?;
        w.registered(w.a, &p.update, None).await?;
        w.settle().await?;
    }
    let mut sorted = keys.clone();
    sorted.sort();
    let recorded: Vec<String> = w
        .events(*iid, SYNCHRONIZED)
        .await?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(recorded, sorted);
    assert_eq!(w.head(*iid).await?.0, Some(h1.clone()));

    let (iid, pushes, keys, h1) = &scripts[1];
    let mut bodies: Vec<&Json> = pushes.iter().flat_map(|p| [&p.update, &p.push]).collect();
    bodies.reverse();
    // Newest first, then a fixed shuffle, each body thrice (copies after the first as
    // redeliveries).
    let order = [0, 3, 1, 5, 2, 4];
    let mut first: Vec<Option<Uuid>> = vec![None; bodies.len()];
    for round in 0..3 {
        for &i in &order {
            let k = (i + round) % bodies.len();
            let id = w.registered(w.a, bodies[k], first[k]).await?;
            first[k].get_or_insert(id);
        }
        w.settle().await?;
    }
    let mut sorted = keys.clone();
    sorted.sort();
    let recorded: Vec<String> = w
        .events(*iid, SYNCHRONIZED)
        .await?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(recorded, sorted, "each push once");
    assert_eq!(w.activities(*iid, SYNCHRONIZED).await?, 3);
    assert_eq!(w.head(*iid).await?.0, Some(h1.clone()));
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

/// The sync records the push and the draft it stores under the hooks' keys; the hooks arriving
/// after it, each thrice, add nothing; a ready hook before the sync leaves the sync nothing to add.
#[tokio::test]
async fn the_sync_records_the_push_ready_and_draft_it_stores_once_with_their_hooks() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("synced", at(10)).await?;
    let h0 = initial_head(iid);
    w.sync_a("INITIAL").await?;
    // A push and a conversion to draft whose hooks are late.
    let pushed = w.push(iid, &sha(0xc1), None);
    let draft = w.set_draft(iid, true);
    w.sync_a("RECONCILIATION").await?;
    let push = vec![(push_key(&h0, &sha(0xc1)), "sync".to_owned())];
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, push);
    let drafts = w.events(iid, "scm.pull_request.converted_to_draft").await?;
    assert_eq!(drafts.len(), 1, "{drafts:?}");
    assert_eq!(drafts[0].1, "sync");
    assert_eq!(w.head(iid).await?.0, Some(sha(0xc1)));

    for body in [&pushed.push, &pushed.update, &draft] {
        w.thrice(body).await?;
    }
    w.settle().await?;
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, push);
    assert_eq!(
        w.events(iid, "scm.pull_request.converted_to_draft").await?,
        drafts
    );
    assert_eq!(
        w.activities(iid, "scm.pull_request.converted_to_draft")
            .await?,
        1
    );

    // Ready: the hook first, then a sync that reads the same change.
    let ready = w.set_draft(iid, false);
    w.thrice(&ready).await?;
    w.settle().await?;
    w.sync_a("RECONCILIATION").await?;
    let readies = w.events(iid, "scm.pull_request.ready_for_review").await?;
    assert_eq!(readies.len(), 1, "{readies:?}");
    assert_eq!(readies[0].1, "webhook");
    assert_eq!(
        w.activities(iid, "scm.pull_request.ready_for_review")
            .await?,
        1
    );
    // A sync that reads nothing new records nothing.
    w.sync_a("RECONCILIATION").await?;
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, push);
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

/// GitLab's "requested changes" system note names who requested changes: by Note Hook (thrice)
/// or by the notes pass, it is stored once, withdraws that person's approval with one dismissal,
/// leaves the decision unknown, and is never mirrored as a comment.
#[tokio::test]
async fn a_requested_changes_note_withdraws_its_authors_approval_once_by_hook_or_sync() -> Result<()>
{
    let w = World::start().await?;
    let iid = w.open("by hook", at(10)).await?;
    let approval = w.approve(iid, "bob");
    w.registered(w.a, &approval, None).await?;
    w.settle().await?;
    assert_eq!(w.approvals(iid).await?, ["bob"]);
    w.read_decision(iid, "approved").await?;

    let note = w.request_changes(iid, "bob");
    assert_eq!(note["object_attributes"]["system"], true);
    let note_id = note["object_attributes"]["id"].as_i64().unwrap();
    w.thrice(&note).await?;
    w.settle().await?;
    assert_eq!(w.requested_changes(iid).await?, [("bob".into(), note_id)]);
    assert!(w.approvals(iid).await?.is_empty());
    assert_eq!(w.head(iid).await?.1, None, "the decision is unknown");
    let dismissed = "scm.pull_request.review_dismissed";
    assert_eq!(w.events(iid, dismissed).await?.len(), 1);
    // The notes pass reads the same note: nothing new.
    w.sync_a("INITIAL").await?;
    assert_eq!(w.requested_changes(iid).await?, [("bob".into(), note_id)]);
    assert_eq!(w.events(iid, dismissed).await?.len(), 1);
    assert_eq!(w.activities(iid, dismissed).await?, 1);

    // A note whose hook is lost: the notes pass records it.
    let lost = w.open("by sync", at(10)).await?;
    let approval = w.approve(lost, "cat");
    w.registered(w.a, &approval, None).await?;
    w.settle().await?;
    let note = w.request_changes(lost, "cat");
    let lost_id = note["object_attributes"]["id"].as_i64().unwrap();
    w.sync_a("RECONCILIATION").await?;
    assert_eq!(w.requested_changes(lost).await?, [("cat".into(), lost_id)]);
    // Withdrawn: by the note, or already by the sync's whole approver list read before it.
    assert!(w.approvals(lost).await?.is_empty());
    let by_sync = w.events(lost, dismissed).await?;
    assert!(by_sync.len() <= 1, "{by_sync:?}");
    // Its hook arriving late adds nothing.
    w.thrice(&note).await?;
    w.settle().await?;
    assert_eq!(w.events(lost, dismissed).await?, by_sync);
    assert_eq!(w.requested_changes(lost).await?, [("cat".into(), lost_id)]);

    // System notes stay unmirrored.
    assert_eq!(
        w.count("SELECT count(*) FROM comment WHERE body = 'requested changes'")
            .await?,
        0
    );
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

/// A Push Hook missing `after` is a dead message naming the field; once its stored body is
/// repaired, `POST /dead-messages/{id}/replay` applies it.
#[tokio::test]
async fn a_malformed_push_hook_is_dead_then_replayed_after_a_fix() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("malformed", at(10)).await?;
    let pushed = w.push(iid, &sha(0xd1), None);
    let mut broken = pushed.push.clone();
    broken.as_object_mut().unwrap().remove("after");
    // Stored by reference, as ingress keeps bodies past the inline limit.
    let (subject, event) = common::route_subject(w.a, &broken)?;
    let message = w.store(w.a.route, subject, event, &broken, None, 0).await?;
    w.settle().await?;
    let dead = w.dead().await?;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].1.contains("`after`"), "{dead:?}");
    assert!(w.events(iid, SYNCHRONIZED).await?.is_empty());

    // The fix: the stored body as GitLab meant it.
    sqlx::query("UPDATE inbound_message_body SET body = $2 WHERE message_id = $1")
        .bind(message)
        .bind(serde_json::to_vec(&pushed.push)?)
        .execute(w.pool())
        .await?;
    w.replay(dead[0].0).await?;
    let expected = vec![(
        push_key(&initial_head(iid), &sha(0xd1)),
        "webhook".to_owned(),
    )];
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, expected);
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 1);
    w.stop().await
}

#[tokio::test]
async fn another_workspaces_endpoint_cannot_push_to_a_merge_request_of_a() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("A's", at(10)).await?;
    w.read_decision(iid, "approved").await?;
    // B sends A's project's push and update hooks through its own route and operator endpoint:
    // B's token reads the project, but it is outside B's group.
    let pushed = w.push(iid, &sha(0xe1), None);
    for body in [&pushed.push, &pushed.update] {
        w.registered(w.b, body, None).await?;
        w.operator(w.b, body).await?;
    }
    w.settle().await?;
    assert!(w.events(iid, SYNCHRONIZED).await?.is_empty());
    assert_eq!(
        w.head(iid).await?,
        (Some(initial_head(iid)), Some("approved".into()))
    );
    assert_eq!(
        w.count("SELECT count(*) FROM activity_event WHERE kind = 'scm.pull_request.synchronized'")
            .await?,
        0
    );
    // A's own route does record it.
    w.registered(w.a, &pushed.push, None).await?;
    w.settle().await?;
    assert_eq!(w.events(iid, SYNCHRONIZED).await?.len(), 1);
    w.stop().await
}
