//! Item events are vendor-neutral: the item's vendor decides whose connections' monitors hear of
//! a change, and labels the `item_events_total` counter, so a GitLab repository's events fan out
//! to the workspaces of GitLab connections through the same ledger and outbox as GitHub's.

use std::sync::{Arc, Mutex};

use anyhow::Result;
use lifecycle_core::source_key::LifecycleChange;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use scm_mirror::events::{self, Item, Origin};
use scm_mirror::items::{self, Counts, IssueNode, ItemFields};
use scm_mirror::repository::{RepoHeader, ensure_repository};
use sqlx::PgPool;
use store::entity::ConnectionKind;
use testkit::TestDb;
use time::OffsetDateTime;
use uuid::Uuid;

/// Remembers every counter the code under test touches, as `name{label=value,...}`.
#[derive(Default, Clone)]
struct Counters(Arc<Mutex<Vec<String>>>);

impl Recorder for Counters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let mut seen = self.0.lock().expect("counters lock");
        seen.push(format!("{}{{{}}}", key.name(), labels.join(",")));
        Counter::noop()
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn at(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000 + secs).expect("a valid time")
}

/// A workspace with an active connection of `kind` on its own provider instance, monitoring
/// one repository (bound to its native id); returns (workspace, repository).
async fn monitored(pool: &PgPool, kind: ConnectionKind) -> Result<(Uuid, Uuid)> {
    let (workspace, instance, connection) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, $2)")
        .bind(workspace)
        .bind(kind.as_str())
        .execute(pool)
        .await?;
    sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, $2)")
        .bind(instance)
        .bind(kind.as_str())
        .execute(pool)
        .await?;
    sqlx::query(
        "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id)
         VALUES ($1, $2, $3, 'active', $4)",
    )
    .bind(connection)
    .bind(workspace)
    .bind(kind.as_str())
    .bind(instance)
    .execute(pool)
    .await?;
    let header = RepoHeader {
        native_id: 7,
        node_id: "R_7".into(),
        owner: "acme".into(),
        name: "widgets".into(),
        archived: Some(false),
    };
    let repository = ensure_repository(pool, instance, &header).await?;
    sqlx::query(
        "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id)
         VALUES ($1, $2, $3, 'acme', 'widgets', 7)",
    )
    .bind(Uuid::now_v7())
    .bind(workspace)
    .bind(connection)
    .execute(pool)
    .await?;
    Ok((workspace, repository))
}

fn issue() -> IssueNode {
    IssueNode {
        fields: ItemFields {
            native_id: 11,
            node_id: "I_11".into(),
            number: 1,
            title: "a title".into(),
            body: "a body".into(),
            state: "open".into(),
            author: Some("octocat".into()),
            locked: Some(false),
            lock_reason: None,
            comment_count: Some(0),
            created_at: at(0),
            updated_at: at(10),
            closed_at: None,
        },
        state_reason: None,
    }
}

/// Mirrors the issue in `repository` and records its opening under `vendor`; returns whether
/// it was new.
async fn opened(pool: &PgPool, vendor: ConnectionKind, repository: Uuid) -> Result<bool> {
    let node = issue();
    let mut txn = pool.begin().await?;
    let counts = Counts::reported(node.fields.comment_count);
    let (step, _) = items::lock_compare_write(&mut txn, repository, &node, counts, None).await?;
    let item = Item::issue(vendor, step.id, repository);
    let change = LifecycleChange::Opened {
        created_at: node.fields.created_at,
    };
    let recorded = events::record(&mut txn, &item, &change, at(10), Origin::Webhook).await?;
    txn.commit().await?;
    Ok(recorded)
}

/// The workspaces that got an activity entry, and the subjects the outbox holds.
async fn fanned_out(pool: &PgPool) -> Result<(Vec<Uuid>, Vec<String>)> {
    let workspaces = sqlx::query_scalar("SELECT workspace_id FROM activity_event ORDER BY 1")
        .fetch_all(pool)
        .await?;
    let subjects = sqlx::query_scalar("SELECT subject FROM outbox ORDER BY 1")
        .fetch_all(pool)
        .await?;
    Ok((workspaces, subjects))
}

#[tokio::test]
async fn a_gitlab_item_fans_out_to_gitlab_connections_only_and_counts_under_its_vendor()
-> Result<()> {
    let counters = Counters::default();
    metrics::set_global_recorder(counters.clone()).expect("the only recorder of this binary");
    let db = TestDb::new().await?;
    let pool = db.db.get_postgres_connection_pool();
    let (gitlab_ws, gitlab_repo) = monitored(pool, ConnectionKind::Gitlab).await?;
    let (github_ws, _) = monitored(pool, ConnectionKind::Github).await?;

    assert!(opened(pool, ConnectionKind::Gitlab, gitlab_repo).await?);
    let (workspaces, subjects) = fanned_out(pool).await?;
    assert_eq!(
        workspaces,
        vec![gitlab_ws],
        "only the GitLab workspace hears of it"
    );
    let subject = lifecycle_core::subject::events(&gitlab_ws.to_string(), "scm.issue.opened");
    assert_eq!(subjects, vec![subject]);
    assert_ne!(gitlab_ws, github_ws);

    // A second report is absorbed by the same ledger, whatever the vendor.
    assert!(!opened(pool, ConnectionKind::Gitlab, gitlab_repo).await?);
    assert_eq!(
        fanned_out(pool).await?.1.len(),
        1,
        "nothing published twice"
    );
    // The forge's change is one case of the generic ledger, scoped to its repository.
    let generic: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM integration_event
          WHERE subject_kind = 'repository' AND subject_id = $1 AND connection_id IS NULL
            AND type = 'scm.issue.opened' AND workspace_ids = ARRAY[$2]::uuid[]",
    )
    .bind(gitlab_repo)
    .bind(gitlab_ws)
    .fetch_one(pool)
    .await?;
    assert_eq!(generic, 1);

    let seen = counters.0.lock().expect("counters lock").clone();
    for outcome in ["recorded", "absorbed"] {
        let key =
            format!("item_events_total{{vendor=gitlab,name=scm.issue.opened,outcome={outcome}}}");
        assert!(seen.contains(&key), "{key} missing from {seen:?}");
    }
    assert!(
        !seen
            .iter()
            .any(|k| k.starts_with("github_item_events_total")),
        "the old vendor-named counter is gone: {seen:?}"
    );
    Ok(())
}

#[tokio::test]
async fn an_item_reported_under_another_vendor_reaches_no_workspace() -> Result<()> {
    let db = TestDb::new().await?;
    let pool = db.db.get_postgres_connection_pool();
    let (_, gitlab_repo) = monitored(pool, ConnectionKind::Gitlab).await?;
    // Fail closed: GitHub connections do not cover a GitLab instance's repository.
    assert!(opened(pool, ConnectionKind::Github, gitlab_repo).await?);
    let (workspaces, subjects) = fanned_out(pool).await?;
    assert!(workspaces.is_empty() && subjects.is_empty());
    Ok(())
}
