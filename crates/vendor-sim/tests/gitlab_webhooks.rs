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
