//! The client against the simulated GitLab over HTTP: paging to the end, error paths kept,
//! newer enum values, GitLab's REST headers, retries, the budget stop, the quota gauges.

use std::time::Duration;

use gitlab_client::queries::ReviewState;
use gitlab_client::{
    Budget, ClientConfig, DetailedMergeStatus, Error, GitlabClient, NewGroupHook, NoteParent,
    PathSegment, RetryPolicy,
};
use time::OffsetDateTime;
use vendor_http::egress::Egress;
use vendor_sim::gitlab::{
    DiffPosition, Fault, GitlabFault, GitlabSim, Model, NewIssue, NewMergeRequest, NoteOn, ops,
};

const TOKEN: &str = "glpat-test";

fn at(seconds: i64) -> OffsetDateTime {
    vendor_sim::github::EPOCH + time::Duration::seconds(seconds)
}

/// top (3 projects) / a (2) / a/deep (1), b (0); `top/p0` has 5 issues and 3 merge requests.
struct World {
    sim: GitlabSim,
    top: u64,
    p0: u64,
}

async fn world() -> World {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut m = Model::default();
    m.add_token(TOKEN);
    let top = m.add_group(None, "top");
    let a = m.add_group(Some(top), "a");
    let deep = m.add_group(Some(a), "deep");
    m.add_group(Some(top), "b");
    let p0 = m.add_project(top, "p0");
    m.add_project(top, "p1");
    m.add_project(top, "p2");
    m.add_project(a, "pa0");
    m.add_project(a, "pa1");
    m.add_project(deep, "pd0");
    for n in 0..5 {
        m.add_issue(
            p0,
            NewIssue {
                title: format!("issue {n}"),
                updated_at: at(100 - n),
            },
        );
    }
    for n in 0..3 {
        m.add_merge_request(
            p0,
            NewMergeRequest {
                title: format!("mr {n}"),
                updated_at: at(n),
            },
        );
    }
    World {
        sim: GitlabSim::start(m).await.unwrap(),
        top,
        p0,
    }
}

fn client(sim: &GitlabSim) -> GitlabClient {
    let mut config = ClientConfig::new(sim.base_url()).with_egress(Egress::unrestricted());
    config.retry = RetryPolicy {
        max_retries: 3,
        min_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        max_retry_after: Duration::from_secs(2),
        deadline: vendor_http::DEFAULT_CALL_DEADLINE,
    };
    GitlabClient::new(&config, TOKEN).unwrap()
}

#[tokio::test]
async fn discovery_listings_page_to_their_end_and_match_the_count() {
    let w = world().await;
    let c = client(&w.sim);
    let mut groups = Vec::new();
    let mut after = None;
    loop {
        let page = c.subgroups_page("top", 1, after.as_deref()).await.unwrap();
        assert!(page.is_whole());
        groups.extend(
            page.nodes
                .into_iter()
                .flatten()
                .map(|g| g.full_path.into_inner()),
        );
        if !page.page_info.has_next_page {
            break;
        }
        after = page.page_info.end_cursor;
    }
    assert_eq!(groups, ["top/a", "top/a/deep", "top/b"]);
    let mut projects = Vec::new();
    for group in ["top", "top/a", "top/a/deep", "top/b"] {
        let mut after = None;
        loop {
            let page = c
                .group_projects_page(group, 2, after.as_deref())
                .await
                .unwrap();
            projects.extend(page.nodes.into_iter().flatten());
            if !page.page_info.has_next_page {
                break;
            }
            after = page.page_info.end_cursor;
        }
    }
    assert_eq!(projects.len(), 6);
    assert_eq!(c.group_project_count("top").await.unwrap(), 6);
    // Direct projects only, with their own count.
    let direct = c.group_projects_page("top/a", 100, None).await.unwrap();
    assert_eq!(direct.count, Some(2));
    let by_id = c.project_by_id(w.p0).await.unwrap().unwrap();
    assert_eq!(
        (
            by_id.full_path.inner(),
            by_id.group.unwrap().full_path.inner()
        ),
        ("top/p0", "top")
    );
    assert!(c.project_by_id(9999).await.unwrap().is_none());
    let missing = c.group_projects_page("nope", 10, None).await.unwrap_err();
    assert!(matches!(missing, Error::Graphql { .. }), "{missing}");
}

#[tokio::test]
async fn items_are_listed_by_updated_after_least_recent_first() {
    let w = world().await;
    let c = client(&w.sim);
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = c
            .issues_page("top/p0", Some(at(96)), 2, after.as_deref())
            .await
            .unwrap();
        assert_eq!(page.count, Some(4), "issues updated after the watermark");
        seen.extend(page.nodes.into_iter().flatten().map(|i| i.updated_at.0));
        if !page.page_info.has_next_page {
            break;
        }
        after = page.page_info.end_cursor;
    }
    assert_eq!(seen, [at(97), at(98), at(99), at(100)]);
    let mrs = c
        .merge_requests_page("top/p0", None, 100, None)
        .await
        .unwrap();
    assert_eq!(mrs.nodes.len(), 3);
    let mr = mrs.nodes[0].as_ref().unwrap();
    assert_eq!(
        mr.detailed_merge_status,
        Some(DetailedMergeStatus::Mergeable)
    );
    assert_eq!(mr.user_notes_count, Some(0));
}

#[tokio::test]
async fn a_field_error_keeps_its_path_and_leaves_siblings_known() {
    let w = world().await;
    let c = client(&w.sim);
    w.sim.inject(Fault::nth(
        ops::PROJECT_MERGE_REQUESTS,
        1,
        GitlabFault::FieldError {
            path: "project.mergeRequests.nodes.1.userNotesCount".into(),
            message: "timeout".into(),
        },
    ));
    let page = c
        .merge_requests_page("top/p0", None, 100, None)
        .await
        .unwrap();
    assert!(!page.is_whole());
    let error = &page.errors[0];
    assert_eq!(error.node_index(), Some(1));
    assert_eq!(
        error.path[2..4],
        [PathSegment::Field("nodes".into()), PathSegment::Index(1)]
    );
    let mr = page.nodes[1]
        .as_ref()
        .expect("the rest of the node decodes");
    // Null with an error: unknown, not zero; siblings keep their values.
    assert_eq!(mr.user_notes_count, None);
    assert!(page.field_unknown(1, "userNotesCount"));
    assert!(!page.field_unknown(1, "approved"));
    assert!(!page.field_unknown(0, "userNotesCount"));
    assert_eq!(page.nodes[0].as_ref().unwrap().user_notes_count, Some(0));
}

#[tokio::test]
async fn newer_enum_values_are_other_and_supplement_values_are_known() {
    let w = world().await;
    let c = client(&w.sim);
    w.sim.model(|m| {
        let mr = m.merge_requests.values_mut().next().unwrap();
        mr.detailed_merge_status = Some("REQUESTED_CHANGES".into());
        mr.reviewers = vec![("carol".into(), Some("APPROVED".into()))];
    });
    let page = c
        .merge_requests_page("top/p0", None, 100, None)
        .await
        .unwrap();
    let first = page.nodes.iter().flatten().find(|m| m.iid == "6").unwrap();
    assert_eq!(
        first.detailed_merge_status,
        Some(DetailedMergeStatus::RequestedChanges)
    );
    let reviewer = &first.reviewers.as_ref().unwrap().nodes.as_ref().unwrap()[0];
    assert_eq!(
        reviewer
            .as_ref()
            .unwrap()
            .merge_request_interaction
            .as_ref()
            .unwrap()
            .review_state,
        Some(ReviewState::Approved)
    );
    w.sim.inject(Fault::nth(
        ops::PROJECT_MERGE_REQUESTS,
        1,
        GitlabFault::ReplaceValue {
            path: "project.mergeRequests.nodes.0.detailedMergeStatus".into(),
            value: "IN_MERGE_TRAIN_NEXT_YEAR".into(),
        },
    ));
    let page = c
        .merge_requests_page("top/p0", None, 100, None)
        .await
        .unwrap();
    assert_eq!(
        page.nodes[0].as_ref().unwrap().detailed_merge_status,
        Some(DetailedMergeStatus::Other(
            "IN_MERGE_TRAIN_NEXT_YEAR".into()
        ))
    );
}

#[tokio::test]
async fn rest_notes_keep_gitlab_paging_headers_as_sent() {
    let w = world().await;
    let c = client(&w.sim);
    let on = NoteOn::Issue(w.p0, 1);
    let ids: Vec<u64> = w.sim.model(|m| {
        vec![
            m.add_note(on, "one", false, None),
            m.add_note(on, "changed the title", true, None),
            m.add_note(on, "on line 3", false, Some("DiffNote")),
        ]
    });
    let parent = NoteParent::Issue {
        project: w.p0,
        iid: 1,
    };
    let first = c.notes_page(parent, 1, 2).await.unwrap();
    assert_eq!(
        first.notes.iter().map(|n| n.id).collect::<Vec<_>>(),
        ids[..2]
    );
    assert_eq!(first.headers.page.as_deref(), Some("1"));
    assert_eq!(first.headers.next(), Some(Some(2)));
    assert_eq!(first.headers.total(), Some(3));
    let last = c.notes_page(parent, 2, 2).await.unwrap();
    assert_eq!(last.notes[0].kind.as_deref(), Some("DiffNote"));
    assert_eq!(last.headers.next_page.as_deref(), Some(""));
    assert_eq!(last.headers.next(), Some(None));

    w.sim.inject(Fault::nth(
        ops::LIST_NOTES,
        1,
        GitlabFault::OmitHeaders(vec!["x-total", "x-next-page"]),
    ));
    let bare = c.notes_page(parent, 1, 2).await.unwrap();
    assert_eq!(
        (bare.headers.total.clone(), bare.headers.next()),
        (None, None)
    );
    w.sim
        .inject(Fault::nth(ops::LIST_NOTES, 1, GitlabFault::TotalOffBy(2)));
    assert_eq!(
        c.notes_page(parent, 1, 2).await.unwrap().headers.total(),
        Some(5)
    );
    w.sim.inject(Fault::nth(
        ops::LIST_NOTES,
        1,
        GitlabFault::ShortPage { keep: 1 },
    ));
    let short = c.notes_page(parent, 1, 2).await.unwrap();
    assert_eq!(
        (short.notes.len(), short.headers.next()),
        (1, Some(Some(2)))
    );

    assert_eq!(
        c.note(parent, ids[2]).await.unwrap().unwrap().body,
        "on line 3"
    );
    w.sim.model(|m| m.notes.remove(&ids[2]));
    assert!(
        c.note(parent, ids[2]).await.unwrap().is_none(),
        "a deleted note reads as gone"
    );
}

#[tokio::test]
async fn past_ten_thousand_notes_gitlab_sends_no_total() {
    let w = world().await;
    let c = client(&w.sim);
    let on = NoteOn::MergeRequest(w.p0, 6);
    w.sim.model(|m| {
        for _ in 0..10_001 {
            m.add_note(on, "x", false, None);
        }
    });
    let page = c
        .notes_page(
            NoteParent::MergeRequest {
                project: w.p0,
                iid: 6,
            },
            1,
            100,
        )
        .await
        .unwrap();
    assert_eq!(page.headers.total, None);
    assert_eq!(page.headers.next(), Some(Some(2)));
}

#[tokio::test]
async fn group_hooks_and_a_project_over_rest() {
    let w = world().await;
    let c = client(&w.sim);
    let empty = c.group_hooks_page(w.top, 1, 100).await.unwrap();
    assert!(empty.hooks.is_empty());
    assert_eq!(
        (
            empty.headers.page(),
            empty.headers.next(),
            empty.headers.total()
        ),
        (Some(1), Some(None), Some(0))
    );
    let hook = c
        .create_group_hook(
            w.top,
            &NewGroupHook {
                url: "https://forgesync.example/webhooks/gitlab/connections/c/k/r".into(),
                token: "route-credential".into(),
                issues_events: true,
                merge_requests_events: true,
                note_events: true,
                pipeline_events: true,
                push_events: true,
                enable_ssl_verification: true,
                project_events: true,
                subgroup_events: true,
                member_events: true,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        c.group_hooks_page(w.top, 1, 100).await.unwrap().hooks,
        std::slice::from_ref(&hook)
    );
    // GitLab pages the list: two more hooks make three, two to a page.
    let others: Vec<u64> = w.sim.model(|m| {
        (0..2)
            .map(|i| m.add_hook(w.top, &format!("https://elsewhere.example/{i}"), "t"))
            .collect()
    });
    let first = c.group_hooks_page(w.top, 1, 2).await.unwrap();
    assert_eq!(
        first.hooks.iter().map(|h| h.id).collect::<Vec<_>>(),
        [hook.id, others[0]]
    );
    assert_eq!(
        (
            first.headers.page(),
            first.headers.next(),
            first.headers.total()
        ),
        (Some(1), Some(Some(2)), Some(3))
    );
    let last = c.group_hooks_page(w.top, 2, 2).await.unwrap();
    assert_eq!(
        last.hooks.iter().map(|h| h.id).collect::<Vec<_>>(),
        [others[1]]
    );
    assert_eq!(
        (last.headers.page(), last.headers.next()),
        (Some(2), Some(None))
    );
    w.sim.model(|m| {
        for id in &others {
            m.hooks.remove(id);
        }
    });
    assert_eq!(
        w.sim.model(|m| m.hooks[&hook.id].token.clone()),
        "route-credential"
    );
    assert!(c.delete_group_hook(w.top, hook.id).await.unwrap());
    assert!(
        !c.delete_group_hook(w.top, hook.id).await.unwrap(),
        "already gone"
    );
    let project = c.project(w.p0).await.unwrap().unwrap();
    assert_eq!(
        (project.path_with_namespace.as_str(), project.namespace.id),
        ("top/p0", w.top)
    );
    assert!(c.project(9999).await.unwrap().is_none());
}

/// A merge request's close time over REST (GraphQL's `closedAt` is newer than the contract's
/// floor): known only while it is closed, retried like every call, counted against the budget.
#[tokio::test]
async fn a_merge_requests_close_time_over_rest() {
    let w = world().await;
    let c = client(&w.sim);
    // The project's first merge request (after its five issues).
    let mr = 6;
    let open = c.merge_request(w.p0, mr).await.unwrap().unwrap();
    assert_eq!((open.iid, open.state.as_str()), (mr, "opened"));
    assert_eq!((open.closed_at, open.close_time()), (None, None));
    w.sim.model(|m| {
        m.update_merge_request(w.p0, mr, |mr| {
            mr.state = "closed".into();
            mr.updated_at = at(50);
        });
        m.update_merge_request(w.p0, mr + 1, |mr| {
            mr.state = "merged".into();
            mr.updated_at = at(60);
        });
    });
    let closed = c.merge_request(w.p0, mr).await.unwrap().unwrap();
    assert_eq!(
        (closed.state.as_str(), closed.close_time()),
        ("closed", Some(at(50)))
    );
    // A merge is no close without one.
    let merged = c.merge_request(w.p0, mr + 1).await.unwrap().unwrap();
    assert_eq!(
        (merged.state.as_str(), merged.close_time()),
        ("merged", None)
    );
    assert!(c.merge_request(w.p0, 99).await.unwrap().is_none());
    assert_eq!(w.sim.calls(ops::GET_MERGE_REQUEST), 4);
    w.sim.inject(Fault::nth(
        ops::GET_MERGE_REQUEST,
        1,
        GitlabFault::Status(502),
    ));
    assert_eq!(
        c.merge_request(w.p0, mr)
            .await
            .unwrap()
            .unwrap()
            .close_time(),
        Some(at(50))
    );
    assert_eq!(w.sim.calls(ops::GET_MERGE_REQUEST), 6, "retried once");
    w.sim.model(|m| m.rate_limit.remaining = 2);
    let capped = c.with_budget(Budget::keep(1));
    capped.merge_request(w.p0, mr).await.unwrap();
    let err = capped.merge_request(w.p0, mr).await.unwrap_err();
    assert!(matches!(err, Error::BudgetExhausted(_)), "{err}");
    assert_eq!(
        w.sim.calls(ops::GET_MERGE_REQUEST),
        7,
        "the refused call is never sent"
    );
}

#[tokio::test]
async fn server_errors_and_throttling_are_retried() {
    let w = world().await;
    let c = client(&w.sim);
    w.sim
        .inject(Fault::nth(ops::GROUP_PROJECTS, 1, GitlabFault::Status(502)));
    w.sim.inject(Fault::nth(
        ops::GROUP_PROJECTS,
        2,
        GitlabFault::TooManyRequests { retry_after: 0 },
    ));
    let page = c.group_projects_page("top", 10, None).await.unwrap();
    assert_eq!(page.count, Some(3));
    assert_eq!(w.sim.calls(ops::GROUP_PROJECTS), 3);
    // Retries are bounded: a lasting outage is reported as what it is.
    w.sim
        .inject(Fault::always(ops::LIST_NOTES, GitlabFault::Status(503)));
    let err = c
        .notes_page(
            NoteParent::Issue {
                project: w.p0,
                iid: 1,
            },
            1,
            20,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Http { status: 503, .. }), "{err}");
    assert_eq!(w.sim.calls(ops::LIST_NOTES), 4);
    w.sim.inject(Fault::always(
        ops::GET_PROJECT,
        GitlabFault::TooManyRequests { retry_after: 0 },
    ));
    let err = c.project(w.p0).await.unwrap_err();
    assert!(err.is_rate_limited(), "{err}");
    // A client error is not retried.
    w.sim.model(|m| m.tokens.clear());
    let err = c.group_project_count("top").await.unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err}");
}

#[tokio::test]
async fn the_budget_stops_calls_before_gitlab_runs_out() {
    let w = world().await;
    w.sim.model(|m| m.rate_limit.remaining = 6);
    let c = client(&w.sim).with_budget(Budget::keep(3));
    let mut sent = 0;
    let stop = loop {
        match c.group_project_count("top").await {
            Ok(_) => sent += 1,
            Err(Error::BudgetExhausted(stop)) => break stop,
            Err(other) => panic!("{other}"),
        }
    };
    // 6 left: three calls leave 3, the floor; the fourth is never sent.
    assert_eq!(sent, 3);
    assert_eq!(w.sim.calls(ops::GROUP_PROJECT_COUNT), 3);
    assert_eq!((stop.remaining, stop.min_remaining), (3, 3));
    assert_eq!(c.rate_limit().unwrap().remaining, 3);
    assert_eq!(c.last_budget_stop(), Some(stop));
}

#[tokio::test]
async fn what_gitlab_says_is_left_is_reported_for_the_connection() {
    // This test's process has no other recorder (nextest runs each test alone).
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this process");
    let w = world().await;
    w.sim.model(|m| m.rate_limit.remaining = 6);
    let c = client(&w.sim);
    c.report_quota_as("conn-1");
    // Clones share the ledger, and with it where it reports.
    c.with_budget(Budget::keep(1))
        .group_project_count("top")
        .await
        .unwrap();
    let rendered = metrics.render();
    let labels = r#"{vendor="gitlab",resource="api",connection="conn-1"}"#;
    assert!(
        rendered.contains(&format!("vendor_quota_remaining{labels} 5\n")),
        "{rendered}"
    );
    assert!(
        rendered.contains(&format!("vendor_quota_limit{labels} ")),
        "{rendered}"
    );
}

#[tokio::test]
async fn discussions_page_with_threads_diff_positions_and_replies() {
    let w = world().await;
    let c = client(&w.sim);
    let on = NoteOn::MergeRequest(w.p0, 6);
    let (lone, system, diff, reply, thread) = w.sim.model(|m| {
        let lone = m.add_note(on, "looks good", false, None);
        let system = m.add_note(on, "approved this merge request", true, None);
        let head = m.merge_requests[&(w.p0, 6)].diff_head_sha.clone().unwrap();
        let diff = m.add_diff_note(
            on,
            "off by one?",
            DiffPosition::line("src/lib.rs", 42, &head),
        );
        let reply = m.add_reply(diff, "fixed").unwrap();
        let thread = m.notes[&diff].discussion.clone();
        m.resolved_discussions.insert(thread.clone());
        (lone, system, diff, reply, thread)
    });
    let mut discussions = Vec::new();
    let mut after = None;
    loop {
        let page = c
            .merge_request_discussions_page("top/p0", 6, 2, after.as_deref())
            .await
            .unwrap();
        assert!(page.is_whole());
        discussions.extend(page.nodes.into_iter().flatten());
        if !page.page_info.has_next_page {
            break;
        }
        after = page.page_info.end_cursor;
    }
    assert_eq!(discussions.len(), 3, "lone note, system note, diff thread");
    let ids = |d: &gitlab_client::Discussion| -> Vec<u64> {
        d.notes
            .nodes
            .iter()
            .flatten()
            .flatten()
            .map(|n| n.id.number().unwrap())
            .collect()
    };
    assert_eq!(ids(&discussions[0]), [lone]);
    assert_eq!(ids(&discussions[1]), [system]);
    assert_eq!(ids(&discussions[2]), [diff, reply]);
    assert!(!discussions[0].resolvable && !discussions[0].resolved);
    let notes = discussions[1].notes.nodes.as_ref().unwrap();
    assert!(notes[0].as_ref().unwrap().system);
    let t = &discussions[2];
    assert_eq!(t.id.tail(), thread);
    assert!(t.resolvable && t.resolved && t.resolved_at.is_some());
    assert!(!t.notes.page_info.has_next_page);
    let first = t.notes.nodes.as_ref().unwrap()[0].as_ref().unwrap();
    let position = first.position.as_ref().expect("a diff note has a position");
    assert_eq!(
        (
            position.file_path.as_str(),
            position.new_line,
            position.old_line
        ),
        ("src/lib.rs", Some(42), None)
    );
    assert_eq!(position.diff_refs.head_sha.len(), 40);
    assert_eq!(first.author.username, "bob");
    let second = t.notes.nodes.as_ref().unwrap()[1].as_ref().unwrap();
    assert_eq!(
        second.position, first.position,
        "a reply sits where its thread does"
    );

    // A field GitLab failed keeps its path: that discussion's notes are unknown, the rest known.
    w.sim.inject(Fault::nth(
        ops::MERGE_REQUEST_DISCUSSIONS,
        1,
        GitlabFault::FieldError {
            path: "project.mergeRequest.discussions.nodes.1.notes.nodes.0.position".into(),
            message: "timeout".into(),
        },
    ));
    let page = c
        .merge_request_discussions_page("top/p0", 6, 100, None)
        .await
        .unwrap();
    assert!(!page.is_whole());
    assert!(page.field_unknown(1, "notes"));
    assert!(!page.field_unknown(0, "notes"));
    // A merge request that is not there is an error, not an empty listing.
    let err = c
        .merge_request_discussions_page("top/p0", 999, 100, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Graphql { .. }), "{err}");
}

#[tokio::test]
async fn notes_listing_faults_deleted_mid_listing_and_hidden_but_readable() {
    let w = world().await;
    let c = client(&w.sim);
    let on = NoteOn::Issue(w.p0, 1);
    let ids: Vec<u64> = w.sim.model(|m| {
        (0..4)
            .map(|n| m.add_note(on, &format!("n{n}"), false, None))
            .collect()
    });
    let parent = NoteParent::Issue {
        project: w.p0,
        iid: 1,
    };
    // Hidden: left out of the listing and its total, yet it still reads by id.
    w.sim.inject(Fault::always(
        ops::LIST_NOTES,
        GitlabFault::HideNote(ids[1]),
    ));
    let page = c.notes_page(parent, 1, 100).await.unwrap();
    assert_eq!(
        page.notes.iter().map(|n| n.id).collect::<Vec<_>>(),
        [ids[0], ids[2], ids[3]]
    );
    assert_eq!(page.headers.total(), Some(3));
    assert!(c.note(parent, ids[1]).await.unwrap().is_some());
    w.sim.clear_faults();
    // Deleted between the first and the second page: the total changes and the pages shift.
    w.sim.inject(Fault::nth(
        ops::LIST_NOTES,
        2,
        GitlabFault::DeleteNote(ids[0]),
    ));
    let first = c.notes_page(parent, 1, 2).await.unwrap();
    let second = c.notes_page(parent, 2, 2).await.unwrap();
    assert_eq!(first.headers.total(), Some(4));
    assert_eq!(second.headers.total(), Some(3));
    assert_eq!(
        second.notes.iter().map(|n| n.id).collect::<Vec<_>>(),
        [ids[3]]
    );
    assert!(c.note(parent, ids[0]).await.unwrap().is_none());
}

/// The merge request `MergeRequestReadiness` reads in these tests: `top/p0!6`, two reviewers
/// and one approver, merged by dave with a passing pipeline on its head.
fn ready_to_read(w: &World) -> u64 {
    let p0 = w.p0;
    w.sim.model(|m| {
        let mr = m.merge_requests.get_mut(&(p0, 6)).unwrap();
        mr.reviewers = vec![
            ("carol".into(), Some("APPROVED".into())),
            ("erin".into(), None),
        ];
        mr.approved_by = vec![("carol".into(), at(500))];
        mr.detailed_merge_status = Some("APPROVALS_SYNCING".into());
    });
    6
}

#[tokio::test]
async fn a_readiness_read_keeps_each_failed_fact_unknown_and_the_rest_known() {
    let w = world().await;
    let c = client(&w.sim);
    let iid = ready_to_read(&w);
    let read = c.merge_request_readiness("top/p0", iid).await.unwrap();
    assert!(read.is_whole());
    let mr = read.nodes[0].as_ref().unwrap();
    let approvers = mr.approved_by.as_ref().unwrap();
    assert!(!approvers.page_info.has_next_page);
    assert_eq!(
        approvers.nodes.as_ref().unwrap()[0]
            .as_ref()
            .unwrap()
            .username,
        "carol"
    );
    assert_eq!(
        mr.reviewers.as_ref().unwrap().nodes.as_ref().unwrap().len(),
        2
    );
    assert_eq!(mr.mergeable, Some(true));
    assert_eq!(
        mr.detailed_merge_status,
        Some(DetailedMergeStatus::ApprovalsSyncing)
    );
    // No pipeline and no error: GitLab reports none.
    assert_eq!(mr.head_pipeline, None);
    assert!(!read.field_unknown(0, "headPipeline"));

    for field in ["approvedBy", "reviewers", "headPipeline", "diffHeadSha"] {
        w.sim.inject(Fault::nth(
            ops::MERGE_REQUEST_READINESS,
            1,
            GitlabFault::FieldError {
                path: format!("project.mergeRequest.{field}"),
                message: "timeout".into(),
            },
        ));
        let read = c.merge_request_readiness("top/p0", iid).await.unwrap();
        // A failed field is unknown at its own path, never an empty list or "no pipeline".
        assert!(read.field_unknown(0, field), "{field}");
        for sibling in ["approvedBy", "reviewers", "headPipeline", "diffHeadSha"] {
            if sibling != field {
                assert!(
                    !read.field_unknown(0, sibling),
                    "{field} leaves {sibling} known"
                );
            }
        }
        assert!(read.nodes[0].is_some(), "the rest of the node decodes");
    }
}

#[tokio::test]
async fn a_readiness_read_reports_the_head_pipeline_and_the_merge_facts() {
    let w = world().await;
    let c = client(&w.sim);
    let iid = ready_to_read(&w);
    let p0 = w.p0;
    let pipeline = w.sim.model(|m| m.start_pipeline(p0, iid)).unwrap();
    w.sim.model(|m| m.set_pipeline_status(pipeline, "success"));
    w.sim.model(|m| {
        m.update_merge_request(p0, iid, |mr| {
            mr.state = "merged".into();
            mr.merge_user = Some("dave".into());
        })
    });
    let read = c.merge_request_readiness("top/p0", iid).await.unwrap();
    let mr = read.nodes[0].as_ref().unwrap();
    let head = mr.head_pipeline.as_ref().unwrap();
    assert_eq!(head.status, gitlab_client::PipelineStatus::Success);
    assert_eq!(head.sha, mr.diff_head_sha);
    assert_eq!(mr.merge_user.as_ref().unwrap().username, "dave");
    assert!(mr.merge_commit_sha.is_some());
    assert!(mr.merged_at.is_some());
}

#[tokio::test]
async fn nested_reviewers_are_completed_page_by_page() {
    let w = world().await;
    let c = client(&w.sim);
    let p0 = w.p0;
    w.sim.model(|m| {
        let mr = m.merge_requests.get_mut(&(p0, 6)).unwrap();
        mr.reviewers = (0..5)
            .map(|n| (format!("r{n}"), Some("REVIEWED".into())))
            .collect();
    });
    let mut after = None;
    let mut names = Vec::new();
    loop {
        let (page, errors) = c
            .merge_request_reviewers_page("top/p0", 6, 2, after.as_deref())
            .await
            .unwrap();
        assert!(errors.is_empty());
        let page = page.unwrap();
        names.extend(
            page.nodes
                .unwrap()
                .into_iter()
                .flatten()
                .map(|r| r.username),
        );
        if !page.page_info.has_next_page {
            break;
        }
        after = page.page_info.end_cursor;
    }
    assert_eq!(names, ["r0", "r1", "r2", "r3", "r4"]);
}

#[tokio::test]
async fn standing_approvals_over_rest_carry_their_dates() {
    let w = world().await;
    let c = client(&w.sim);
    let iid = ready_to_read(&w);
    let approvals = c.merge_request_approvals(w.p0, iid).await.unwrap().unwrap();
    assert_eq!(approvals.iid, iid);
    assert_eq!(approvals.approved_by.len(), 1);
    assert_eq!(approvals.approved_by[0].user.username, "carol");
    assert_eq!(approvals.approved_by[0].approved_at, Some(at(500)));
    assert!(
        c.merge_request_approvals(w.p0, 999)
            .await
            .unwrap()
            .is_none()
    );
}
