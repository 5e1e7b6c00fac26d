//! The simulated GitLab executes group hooks as GitLab does: changes reach the hooks of the
//! project's group and ancestors with GitLab's headers and body shapes, and a hook that keeps
//! failing is disabled, as its API then shows.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value as Json;
use vendor_sim::gitlab::webhook::TEMPORARY_AFTER;
use vendor_sim::gitlab::{
    DiffPosition, GitlabSim, HookAlert, Model, NewIssue, NewMergeRequest, NoteOn,
};

type Seen = Arc<Mutex<Vec<(HeaderMap, Json)>>>;

/// A receiver on a free port answering `status`; what it received.
async fn receiver(status: StatusCode) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let kept = seen.clone();
    let app = Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                let json = serde_json::from_slice(&body).unwrap_or(Json::Null);
                kept.lock().unwrap().push((headers, json));
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

#[tokio::test]
async fn changes_reach_ancestor_group_hooks_with_gitlabs_headers_and_shapes() {
    let (url, seen) = receiver(StatusCode::OK).await;
    let mut model = Model::default();
    let top = model.add_group(None, "top");
    let sub = model.add_group(Some(top), "sub");
    let project = model.add_project(sub, "app");
    let other = model.add_group(None, "other");
    let elsewhere = model.add_project(other, "app");
    let sim = GitlabSim::start(model).await.unwrap();
    let hook = sim.model(|m| m.add_hook(top, &url, "route-token"));

    let (issue, mr) = sim.model(|m| {
        let at = time::OffsetDateTime::now_utc();
        let issue = m.add_issue(
            project,
            NewIssue {
                title: "bug".into(),
                updated_at: at,
            },
        );
        m.add_issue(
            elsewhere,
            NewIssue {
                title: "not ours".into(),
                updated_at: at,
            },
        );
        let mr = m.add_merge_request(
            project,
            NewMergeRequest {
                title: "fix".into(),
                updated_at: at,
            },
        );
        (issue, mr)
    });
    sim.model(|m| {
        m.update_issue(project, issue, |i| i.state = "closed".into());
        let note = m.add_diff_note(
            NoteOn::MergeRequest(project, mr),
            "nit",
            DiffPosition::line("src/lib.rs", 7, "abc"),
        );
        m.add_reply(note, "fixed");
    });
    let attempts = sim.flush_hooks().await;
    let all = sim.hook_attempts();
    assert!(attempts.len() <= all.len());
    assert_eq!(
        all.len(),
        5,
        "open, open, close, diff note, reply; nothing from `other`"
    );
    assert!(all.iter().all(|a| a.hook_id == hook && a.succeeded()));

    let seen = seen.lock().unwrap().clone();
    let events: Vec<&str> = seen
        .iter()
        .map(|(h, _)| header(h, "x-gitlab-event"))
        .collect();
    assert_eq!(
        events,
        [
            "Issue Hook",
            "Merge Request Hook",
            "Issue Hook",
            "Note Hook",
            "Note Hook"
        ]
    );
    for (h, _) in &seen {
        assert_eq!(header(h, "x-gitlab-token"), "route-token");
        assert_eq!(header(h, "x-gitlab-instance"), sim.base_url());
        assert!(!header(h, "x-gitlab-event-uuid").is_empty());
        assert!(!header(h, "x-gitlab-webhook-uuid").is_empty());
        assert!(!header(h, "idempotency-key").is_empty());
    }
    let (_, closed) = &seen[2];
    assert_eq!(closed["object_kind"], "issue");
    assert_eq!(closed["object_attributes"]["action"], "close");
    assert_eq!(closed["object_attributes"]["state"], "closed");
    assert_eq!(closed["project"]["id"], project);
    assert_eq!(closed["project"]["path_with_namespace"], "top/sub/app");
    assert!(
        closed["object_attributes"]["updated_at"]
            .as_str()
            .unwrap()
            .ends_with(" UTC")
    );
    let (_, opened) = &seen[1];
    assert_eq!(opened["object_kind"], "merge_request");
    assert_eq!(opened["object_attributes"]["iid"], mr);
    assert_eq!(opened["object_attributes"]["action"], "open");
    let (_, diff) = &seen[3];
    let (_, reply) = &seen[4];
    assert_eq!(diff["object_attributes"]["type"], "DiffNote");
    assert_eq!(
        diff["object_attributes"]["position"]["new_path"],
        "src/lib.rs"
    );
    assert_eq!(diff["merge_request"]["iid"], mr);
    assert_eq!(
        reply["object_attributes"]["discussion_id"],
        diff["object_attributes"]["discussion_id"]
    );
}

#[tokio::test]
async fn a_hook_that_keeps_failing_is_disabled_as_gitlab_shows_it() {
    let (url, seen) = receiver(StatusCode::INTERNAL_SERVER_ERROR).await;
    let mut model = Model::default();
    model.add_token("glpat-test");
    let group = model.add_group(None, "top");
    let project = model.add_project(group, "app");
    let sim = GitlabSim::start(model).await.unwrap();
    let hook = sim.model(|m| m.add_hook(group, &url, "t"));
    for n in 0..(TEMPORARY_AFTER + 2) {
        sim.model(|m| {
            let at = time::OffsetDateTime::now_utc();
            m.add_issue(
                project,
                NewIssue {
                    title: format!("i{n}"),
                    updated_at: at,
                },
            )
        });
        sim.flush_hooks().await;
    }
    // Executed until it rested; the deliveries after that were not attempted.
    assert_eq!(seen.lock().unwrap().len(), TEMPORARY_AFTER as usize);
    let (alert, until) = sim.model(|m| {
        let h = &m.hooks[&hook];
        (h.alert_status, h.disabled_until)
    });
    assert_eq!(alert, HookAlert::TemporarilyDisabled);
    assert!(until.is_some());
    let listed: Json = reqwest::Client::new()
        .get(format!("{}/api/v4/groups/{group}/hooks", sim.base_url()))
        .header("private-token", "glpat-test")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed[0]["alert_status"], "temporarily_disabled");
    assert!(listed[0]["disabled_until"].is_string());
}

#[tokio::test]
async fn project_subgroup_and_member_changes_reach_the_hooks_that_asked_and_members_list() {
    let (url, seen) = receiver(StatusCode::OK).await;
    let mut model = Model::default();
    model.add_token("t");
    let top = model.add_group(None, "top");
    let sub = model.add_group(Some(top), "sub");
    let app = model.add_project(sub, "app");
    let sim = GitlabSim::start(model).await.unwrap();
    let hook = sim.model(|m| m.add_hook(top, &url, "route-token"));
    sim.model(|m| {
        m.rename_project_with_hook(app, "app2").unwrap();
        m.transfer_project_with_hook(app, top).unwrap();
        m.rename_group_with_hook(sub, "squad").unwrap();
        m.add_member(sub, "alice", 30);
        m.update_member(sub, "alice", 40).unwrap();
        m.add_member(top, "bob", 50);
        m.remove_member(top, "bob").unwrap();
    });
    sim.flush_hooks().await;
    let got: Vec<(String, Json)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(h, b)| (header(h, "x-gitlab-event").to_owned(), b.clone()))
        .collect();
    let events: Vec<(&str, &str)> = got
        .iter()
        .map(|(h, b)| (h.as_str(), b["event_name"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        events,
        [
            ("Project Hook", "project_rename"),
            ("Project Hook", "project_transfer"),
            ("Subgroup Hook", "group_rename"),
            ("Member Hook", "user_add_to_group"),
            ("Member Hook", "user_update_for_group"),
            ("Member Hook", "user_add_to_group"),
            ("Member Hook", "user_remove_from_group"),
        ]
    );
    // GitLab's shapes: the old path beside the new, the group's old full path, the member's
    // group and user by id.
    assert_eq!(got[0].1["path_with_namespace"], "top/sub/app2");
    assert_eq!(got[0].1["old_path_with_namespace"], "top/sub/app");
    assert_eq!(got[1].1["path_with_namespace"], "top/app2");
    assert_eq!(got[1].1["project_id"], app);
    assert_eq!(got[2].1["old_full_path"], "top/sub");
    assert_eq!(got[2].1["full_path"], "top/squad");
    assert_eq!(got[4].1["group_id"], sub);
    assert_eq!(got[4].1["group_access"], "Maintainer");
    assert!(got[4].1["user_id"].as_u64().is_some());

    // A hook that did not ask for member events hears none of them.
    sim.model(|m| m.hooks.get_mut(&hook).unwrap().member_events = false);
    sim.model(|m| m.add_member(top, "carol", 10));
    sim.flush_hooks().await;
    assert_eq!(seen.lock().unwrap().len(), 7);

    // The members listing over REST, and one membership by user id (404 when not a member).
    let client = reqwest::Client::new();
    let listed: Vec<Json> = client
        .get(format!("{}/api/v4/groups/{sub}/members", sim.base_url()))
        .bearer_auth("t")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["username"], "alice");
    assert_eq!(listed[0]["access_level"], 40);
    let alice = listed[0]["id"].as_u64().unwrap();
    let one = client
        .get(format!(
            "{}/api/v4/groups/{top}/members/{alice}",
            sim.base_url()
        ))
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    assert_eq!(one.status(), StatusCode::NOT_FOUND);
}
