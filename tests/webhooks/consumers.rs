//! Which deliveries github-sync consumes: repository events through filters computed from the
//! monitors (rebuilt when they change), owner-level events always, anything else acknowledged.

use anyhow::Result;
use vendor_sim::github::{NewIssue, Scenario, webhook};

use crate::support::LiveStack;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn filters_follow_the_monitors_so_a_newly_monitored_repository_is_consumed() -> Result<()> {
    let s = LiveStack::start(Scenario {
        repositories: 1,
        items: 0,
        ..Scenario::default()
    })
    .await?;
    // A repository joins the installation; the next reconcile materialises its monitor.
    let installation = s
        .sim
        .model(|m| m.repository(s.repositories[0]).unwrap().installation);
    let added = s
        .sim
        .model(|m| m.add_repository(installation, "acme", "newcomer"));
    s.reconcile().await?;
    s.finished_jobs("RECONCILIATION", 1).await?;
    assert_eq!(
        s.count("SELECT count(*) FROM repository_to_monitor WHERE name = 'newcomer'")
            .await?,
        1
    );

    // An issue opened after the reconcile reaches the mirror only through its webhook, on a
    // subject no filter covered before the monitor existed.
    let payload = s.sim.model(|m| {
        let issue = m
            .add_issue(
                added,
                NewIssue {
                    title: "live".into(),
                    author: Some("dev".into()),
                    ..Default::default()
                },
            )
            .unwrap();
        let repo = m.repository(added).unwrap().clone();
        webhook::issues_payload(m, "opened", &repo, &issue)
    });
    s.deliver("issues", &payload).await?;
    s.settle().await?;
    assert_eq!(
        s.count("SELECT count(*) FROM issue WHERE title = 'live'")
            .await?,
        1,
        "the new repository's webhook was not consumed"
    );
    assert_eq!(
        s.count("SELECT count(*) FROM item_event WHERE name = 'scm.issue.opened'")
            .await?,
        1
    );
    // The event's message dates it in RFC 3339.
    let events = s.events(1).await?;
    assert_eq!(events.len(), 1, "one message announces the event");
    let version = events[0].json()["version"]
        .as_str()
        .expect("the event names its version")
        .to_owned();
    time::OffsetDateTime::parse(&version, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("version {version:?} is not RFC 3339: {e}"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_we_do_not_handle_and_unmonitored_repositories_are_acknowledged() -> Result<()> {
    let s = LiveStack::start(Scenario {
        repositories: 1,
        items: 0,
        ..Scenario::default()
    })
    .await?;
    let repo_id = s.repositories[0];
    let (star, stranger) = s.sim.model(|m| {
        let repo = m.repository(repo_id).unwrap().clone();
        let star = webhook::star_payload(m, &repo, "fan", Some(vendor_sim::github::EPOCH));
        // A repository of the same owner that no monitor covers, with an issue.
        let other = m.add_repository(None, "acme", "stranger");
        let issue = m
            .add_issue(
                other,
                NewIssue {
                    title: "not ours".into(),
                    ..Default::default()
                },
            )
            .unwrap();
        let other = m.repository(other).unwrap().clone();
        (star, webhook::issues_payload(m, "opened", &other, &issue))
    });
    s.deliver("star", &star).await?;
    s.deliver("issues", &stranger).await?;
    s.settle().await?;
    assert_eq!(s.count("SELECT count(*) FROM issue").await?, 0);
    assert_eq!(
        s.count("SELECT count(*) FROM repository WHERE name = 'stranger'")
            .await?,
        0
    );
    assert_eq!(s.count("SELECT count(*) FROM dead_message").await?, 0);
    Ok(())
}
