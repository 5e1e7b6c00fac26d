//! Notes through gitlab-sync's passes on the sync engine, against real Postgres and the
//! simulated GitLab over HTTP: what a pass reads gets its notes mirrored (issue notes by REST,
//! merge request discussions with diff threads by GraphQL), and only a RECONCILIATION
//! tombstones notes, those a clean REST listing omits and a direct read confirms gone, within the
//! engine's blast radius. Every doubt keeps the parent as stored.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use gitlab_client::{ClientConfig, GitlabClient, RetryPolicy};
use gitlab_sync::source::{ClientFactory, GitlabSource, Settings};
use gitlab_sync::sync::GitlabVendor;
use lifecycle_core::deletion::BlastRadius;
use sqlx::PgPool;
use store::entity::ConnectionKind;
use sync_engine::{Engine, JobOutcome, Jobs};
use uuid::Uuid;
use vendor_http::egress::Egress;
use vendor_sim::gitlab::{
    DiffPosition, Fault, GitlabFault, GitlabSim, Model, NewIssue, NewMergeRequest, NoteOn, ops,
};

const TOKEN: &str = "glpat-notes";

/// Upstream: project `top/p` with issue #1 and merge request !2.
struct Notes {
    issue_kept: u64,
    issue_gone: u64,
    mr_lone: u64,
    /// A diff thread: its first note and two replies.
    diff: u64,
    replies: [u64; 2],
    /// A diff thread of one note.
    single: u64,
}

struct Fixture {
    db: testkit::TestDb,
    config: gitlab_sync::Config,
    pool: PgPool,
    sim: GitlabSim,
    project: u64,
    connection_id: Uuid,
    workspace_id: Uuid,
    provider_instance_id: Uuid,
    notes: Notes,
    /// The engine's blast radius in this fixture's jobs.
    blast_radius: BlastRadius,
}

async fn fixture() -> Result<Fixture> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut m = Model::default();
    m.add_token(TOKEN);
    let top = m.add_group(None, "top");
    let project = m.add_project(top, "p");
    let at = |s| vendor_sim::github::EPOCH + time::Duration::seconds(s);
    let issue = m.add_issue(
        project,
        NewIssue {
            title: "issue".into(),
            updated_at: at(1000),
        },
    );
    let mr = m.add_merge_request(
        project,
        NewMergeRequest {
            title: "mr".into(),
            updated_at: at(1000),
        },
    );
    let (i, r) = (
        NoteOn::Issue(project, issue),
        NoteOn::MergeRequest(project, mr),
    );
    let head = m.merge_requests[&(project, mr)]
        .diff_head_sha
        .clone()
        .unwrap();
    let issue_kept = m.add_note(i, "kept", false, None);
    let issue_gone = m.add_note(i, "to be deleted", false, None);
    m.add_note(i, "changed the title", true, None);
    let mr_lone = m.add_note(r, "lone", false, None);
    m.add_note(r, "approved this merge request", true, None);
    let diff = m.add_diff_note(r, "off by one", DiffPosition::line("src/a.rs", 3, &head));
    let replies = [
        m.add_reply(diff, "where?").unwrap(),
        m.add_reply(diff, "line 3").unwrap(),
    ];
    let single = m.add_diff_note(r, "typo", DiffPosition::line("src/b.rs", 9, &head));
    let sim = GitlabSim::start(m).await?;

    let db = testkit::TestDb::new().await?;
    let pool = db.db.get_postgres_connection_pool().clone();
    let (workspace_id, provider_instance_id, connection_id) =
        (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'acme')")
        .bind(workspace_id)
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'gitlab')")
        .bind(provider_instance_id)
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id) VALUES ($1, $2, 'gitlab', 'active', $3)")
        .bind(connection_id).bind(workspace_id).bind(provider_instance_id).execute(&pool).await?;
    sqlx::query("INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id) VALUES ($1, $2, $3, 'top', 'p', $4)")
        .bind(Uuid::now_v7()).bind(workspace_id).bind(connection_id).bind(project as i64).execute(&pool).await?;
    Ok(Fixture {
        config: testkit::config(
            db.common_args()?,
            &[format!("--secret-key={}", testkit::secret_key())],
        )?,
        db,
        pool,
        sim,
        project,
        connection_id,
        workspace_id,
        provider_instance_id,
        notes: Notes {
            issue_kept,
            issue_gone,
            mr_lone,
            diff,
            replies,
            single,
        },
        blast_radius: BlastRadius::default(),
    })
}

impl Fixture {
    fn client(&self) -> GitlabClient {
        let mut config = ClientConfig::new(self.sim.base_url()).with_egress(Egress::unrestricted());
        config.retry = RetryPolicy {
            max_retries: 1,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            max_retry_after: Duration::from_secs(1),
            deadline: vendor_http::DEFAULT_CALL_DEADLINE,
        };
        GitlabClient::new(&config, TOKEN).unwrap()
    }

    fn engine(&self) -> Engine<GitlabVendor> {
        Engine {
            pool: self.pool.clone(),
            jobs: Jobs::new(
                ConnectionKind::Gitlab,
                self.pool.clone(),
                "replica-a",
                Duration::from_secs(30),
            ),
            vendor: Arc::new(GitlabVendor {
                pool: self.pool.clone(),
                factory: ClientFactory {
                    db: self.db.db.clone(),
                    secret_key: store::secrets::Keyring::parse(&testkit::secret_key()).unwrap(),
                    request_timeout: Duration::from_secs(5),
                    egress: Egress::unrestricted(),
                    retry: RetryPolicy::default(),
                },
                backfill: self.config.backfill_batches(),
                activator: None,
            }),
            settings: sync_engine::SyncSettings {
                blast_radius: self.blast_radius,
                ..self.config.sync.sync_settings()
            },
        }
    }

    async fn queue(&self, job_type: &str, trigger: &str) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO sync_job (id, connection_id, workspace_id, kind, job_type, trigger) VALUES ($1, $2, $3, 'gitlab', $4, $5)")
            .bind(id).bind(self.connection_id).bind(self.workspace_id).bind(job_type).bind(trigger).execute(&self.pool).await?;
        Ok(id)
    }

    async fn run(&self, job_type: &str, trigger: &str) -> Result<JobOutcome> {
        let id = self.queue(job_type, trigger).await?;
        self.run_queued(id).await
    }

    async fn run_queued(&self, id: Uuid) -> Result<JobOutcome> {
        let engine = self.engine();
        let job = engine.jobs.claim(id).await?.job().expect("claimable");
        let source = GitlabSource {
            client: self.client(),
            settings: Settings {
                group: "top".into(),
                projects: None,
                min_remaining: None,
            },
        };
        Ok(engine.run(&job, self.provider_instance_id, source).await?)
    }

    /// Adds `n` issues upstream, each with one note, and returns their notes' ids.
    fn add_issues_with_a_note(&self, n: usize) -> Vec<u64> {
        let project = self.project;
        self.sim.model(|m| {
            (0..n)
                .map(|k| {
                    let at = m.issues[&(project, 1)].updated_at;
                    let iid = m.add_issue(
                        project,
                        NewIssue {
                            title: format!("more {k}"),
                            updated_at: at,
                        },
                    );
                    m.add_note(NoteOn::Issue(project, iid), "a note", false, None)
                })
                .collect()
        })
    }

    /// Runs an INITIAL whose notes answer slowly; `interrupt` runs against the job's row once
    /// the first note listing is asked for. Returns the outcome and how many note listings
    /// were asked for by then.
    async fn initial_interrupted_in_its_notes(
        &self,
        interrupt: impl AsyncFnOnce(Uuid),
    ) -> Result<(JobOutcome, u64)> {
        self.sim.inject(Fault::always(
            ops::LIST_NOTES,
            GitlabFault::Delay(Duration::from_millis(300)),
        ));
        let id = self.queue("INITIAL", "manual").await?;
        let watch = async {
            while self.sim.calls(ops::LIST_NOTES) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let asked = self.sim.calls(ops::LIST_NOTES);
            interrupt(id).await;
            asked
        };
        let (outcome, asked) = tokio::join!(self.run_queued(id), watch);
        Ok((outcome?, asked))
    }

    async fn watermark(&self, class: &str) -> Result<Option<time::OffsetDateTime>> {
        Ok(
            sqlx::query_scalar("SELECT watermark FROM listing_state WHERE class = $1")
                .bind(class)
                .fetch_optional(&self.pool)
                .await?
                .flatten(),
        )
    }

    async fn initial(&self) -> Result<()> {
        let outcome = self.run("INITIAL", "manual").await?;
        assert!(matches!(outcome, JobOutcome::Succeeded), "{outcome:?}");
        Ok(())
    }

    async fn reconcile(&self) -> Result<()> {
        self.run("RECONCILIATION", "manual").await?;
        Ok(())
    }

    /// Native ids of live mirrored comments, and of live review comments.
    async fn mirrored(&self) -> Result<(Vec<i64>, Vec<i64>)> {
        let comments: Vec<(i64,)> = sqlx::query_as(
            "SELECT native_id FROM comment WHERE deleted_at IS NULL ORDER BY native_id",
        )
        .fetch_all(&self.pool)
        .await?;
        let reviews: Vec<(i64,)> = sqlx::query_as(
            "SELECT native_id FROM review_comment WHERE deleted_at IS NULL ORDER BY native_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok((
            comments.into_iter().map(|(n,)| n).collect(),
            reviews.into_iter().map(|(n,)| n).collect(),
        ))
    }

    /// Native ids of tombstoned notes (comments and review comments), each with its content
    /// cleared and its `deleted_at` set; a note deleted otherwise would be missing here.
    async fn tombstoned(&self) -> Result<Vec<u64>> {
        let rows: Vec<(i64,)> = sqlx::query_as(
            "SELECT native_id FROM comment WHERE deleted_at IS NOT NULL AND body IS NULL
             UNION ALL
             SELECT native_id FROM review_comment WHERE deleted_at IS NOT NULL AND body IS NULL
             ORDER BY 1",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(n,)| n as u64).collect())
    }

    async fn threads(&self) -> Result<i64> {
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM review_thread")
            .fetch_one(&self.pool)
            .await?;
        Ok(n)
    }

    /// Deletes upstream: one issue note, the lone MR note, the first note of the diff thread with
    /// replies and the single-note diff thread.
    fn delete_upstream(&self) -> Vec<u64> {
        let n = &self.notes;
        let gone = vec![n.issue_gone, n.mr_lone, n.diff, n.single];
        self.sim.model(|m| {
            for id in &gone {
                m.notes.remove(id);
            }
        });
        gone
    }

    fn all_user_notes(&self) -> (Vec<i64>, Vec<i64>) {
        let n = &self.notes;
        let mut reviews = vec![n.diff as i64, n.single as i64];
        reviews.extend(n.replies.iter().map(|r| *r as i64));
        reviews.sort();
        let mut comments = vec![n.issue_kept as i64, n.issue_gone as i64, n.mr_lone as i64];
        comments.sort();
        (comments, reviews)
    }
}

#[tokio::test]
async fn initial_mirrors_issue_notes_and_merge_request_threads_without_system_notes() -> Result<()>
{
    let f = fixture().await?;
    f.initial().await?;
    assert_eq!(f.mirrored().await?, f.all_user_notes());
    assert_eq!(f.threads().await?, 2, "one thread per diff discussion");
    let n = &f.notes;
    let row: (
        Option<i64>,
        Option<String>,
        Option<i32>,
        Option<String>,
        bool,
    ) = sqlx::query_as(
        "SELECT c.in_reply_to, c.path, c.line, c.commit_sha, c.thread_id = f.thread_id
           FROM review_comment c JOIN review_comment f ON f.native_id = $2
          WHERE c.native_id = $1",
    )
    .bind(n.replies[1] as i64)
    .bind(n.diff as i64)
    .fetch_one(&f.pool)
    .await?;
    assert_eq!(
        row.0,
        Some(n.diff as i64),
        "a reply refers to its thread's first note"
    );
    assert_eq!((row.1.as_deref(), row.2), (Some("src/a.rs"), Some(3)));
    assert_eq!(row.3.map(|s| s.len()), Some(40));
    assert!(row.4, "replies share their thread");
    Ok(())
}

#[tokio::test]
async fn clean_reconcile_tombstones_exactly_the_deleted_notes_and_no_late_copy_restores_them()
-> Result<()> {
    let f = fixture().await?;
    f.initial().await?;
    let (mr,): (Uuid,) = sqlx::query_as("SELECT id FROM pull_request")
        .fetch_one(&f.pool)
        .await?;
    // A past item event of the merge request stays whatever happens to its notes.
    sqlx::query("INSERT INTO item_event (id, pull_request_id, name, source_key, version, origin) VALUES ($1, $2, 'scm.comment.edited', 'past', now(), 'sync')")
        .bind(Uuid::now_v7()).bind(mr).execute(&f.pool).await?;
    let copies: Vec<vendor_sim::gitlab::Note> = f.sim.model(|m| {
        let n = &f.notes;
        [n.issue_gone, n.mr_lone, n.diff, n.single]
            .iter()
            .map(|id| m.notes[id].clone())
            .collect()
    });
    let mut gone = f.delete_upstream();
    gone.sort();

    // INITIAL never tombstones a note.
    f.initial().await?;
    assert_eq!(f.mirrored().await?, f.all_user_notes());
    assert!(f.tombstoned().await?.is_empty());

    f.reconcile().await?;
    let n = &f.notes;
    let (comments, reviews) = f.mirrored().await?;
    assert_eq!(comments, [n.issue_kept as i64]);
    let mut replies: Vec<i64> = n.replies.iter().map(|r| *r as i64).collect();
    replies.sort();
    assert_eq!(reviews, replies, "tombstoned: {gone:?}");
    assert_eq!(f.tombstoned().await?, gone, "a tombstone, not a deletion");
    // A tombstone keeps its place: its thread and the replies' references to it stay.
    assert_eq!(f.threads().await?, 2);
    let (reference,): (Option<i64>,) =
        sqlx::query_as("SELECT in_reply_to FROM review_comment WHERE native_id = $1")
            .bind(n.replies[0] as i64)
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(reference, Some(n.diff as i64));
    let (events,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM item_event WHERE source_key = 'past'")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(events, 1);

    // A late copy of the deleted notes (GitLab lists them again) brings none of them back.
    f.sim.model(|m| {
        for note in copies {
            m.notes.insert(note.id, note);
        }
    });
    f.initial().await?;
    assert_eq!(f.mirrored().await?, (comments, reviews));
    assert_eq!(f.tombstoned().await?, gone);
    Ok(())
}

/// A parent's note sweep past the blast radius waits for an operator: nothing of that parent is
/// tombstoned, the hold is counted as the engine's held sweep of class `note`, and a parent
/// within the radius is reconciled as usual.
#[tokio::test]
async fn a_blast_radius_hold_stops_a_parents_note_sweep() -> Result<()> {
    let mut f = fixture().await?;
    // More than half of a parent's notes, however few.
    f.blast_radius = BlastRadius {
        numerator: 1,
        denominator: 2,
        min_rows: 0,
    };
    f.initial().await?;
    let before = f.mirrored().await?;
    f.delete_upstream();
    f.reconcile().await?;
    let n = &f.notes;
    // The merge request loses 3 of its 5 notes: held, all stay live.
    let (comments, reviews) = f.mirrored().await?;
    assert!(comments.contains(&(n.mr_lone as i64)), "{comments:?}");
    assert!(reviews.contains(&(n.diff as i64)), "{reviews:?}");
    assert!(reviews.contains(&(n.single as i64)), "{reviews:?}");
    assert_eq!(reviews, before.1);
    // The issue loses 1 of its 2: within the radius, tombstoned.
    assert_eq!(f.tombstoned().await?, [n.issue_gone]);
    let held: Vec<(serde_json::Value,)> = sqlx::query_as(
        "SELECT detail FROM connection_activity WHERE activity = 'sweep_held' ORDER BY created_at",
    )
    .fetch_all(&f.pool)
    .await?;
    assert_eq!(held.len(), 1, "{held:?}");
    let detail = &held[0].0;
    assert_eq!(detail["class"], "note");
    assert!(
        detail["parent"]
            .as_str()
            .is_some_and(|p| p.starts_with('!')),
        "the merge request: {detail}"
    );
    assert_eq!(
        (&detail["would_tombstone"], &detail["class_size"]),
        (&serde_json::json!(3), &serde_json::json!(5))
    );
    Ok(())
}

/// Each doubt about a parent's listing keeps every note of that parent.
#[tokio::test]
async fn each_fault_removes_no_note() -> Result<()> {
    let f = fixture().await?;
    f.initial().await?;
    let before = f.mirrored().await?;
    let n = &f.notes;
    f.delete_upstream();
    let hidden_issue_note = n.issue_kept;
    let faults: Vec<(&str, Fault<GitlabFault>)> = vec![
        (
            "no X-Total",
            Fault::always(ops::LIST_NOTES, GitlabFault::OmitHeaders(vec!["x-total"])),
        ),
        (
            "no X-Next-Page",
            Fault::always(
                ops::LIST_NOTES,
                GitlabFault::OmitHeaders(vec!["x-next-page"]),
            ),
        ),
        (
            "X-Total wrong",
            Fault::always(ops::LIST_NOTES, GitlabFault::TotalOffBy(1)),
        ),
        (
            "a page fails",
            Fault::always(ops::LIST_NOTES, GitlabFault::Status(500)),
        ),
        (
            "short page",
            Fault::always(ops::LIST_NOTES, GitlabFault::ShortPage { keep: 0 }),
        ),
        (
            "confirmation fails",
            Fault::always(ops::GET_NOTE, GitlabFault::Status(502)),
        ),
    ];
    for (name, fault) in faults {
        f.sim.clear_faults();
        f.sim.inject(fault);
        f.reconcile().await?;
        assert_eq!(f.mirrored().await?, before, "{name} tombstoned a note");
        assert!(f.tombstoned().await?.is_empty(), "{name} tombstoned a note");
        assert_eq!(f.threads().await?, 2, "{name} removed a thread");
    }
    // A note missing from the listing that still reads by id keeps its whole parent: the
    // issue's truly deleted note stays too.
    f.sim.clear_faults();
    f.sim.inject(Fault::always(
        ops::LIST_NOTES,
        GitlabFault::HideNote(hidden_issue_note),
    ));
    f.reconcile().await?;
    let (comments, reviews) = f.mirrored().await?;
    assert!(comments.contains(&(n.issue_gone as i64)), "{comments:?}");
    assert!(comments.contains(&(n.issue_kept as i64)));
    // The merge request's listing was clean: its deletions went through.
    assert!(!comments.contains(&(n.mr_lone as i64)));
    assert!(!reviews.contains(&(n.single as i64)));
    Ok(())
}

#[tokio::test]
async fn a_note_deleted_mid_listing_removes_nothing_until_a_clean_pass() -> Result<()> {
    let f = fixture().await?;
    // Two pages of issue notes: 100 more after the fixture's.
    let on = NoteOn::Issue(f.project, 1);
    f.sim.model(|m| {
        for k in 0..100 {
            m.add_note(on, &format!("filler {k}"), false, None);
        }
    });
    f.initial().await?;
    let n = &f.notes;
    f.sim.model(|m| m.notes.remove(&n.issue_gone));
    // The kept note vanishes between the first and the second page of the issue's listing (the
    // merge request's listing comes after): the total changes, the pages shift.
    f.sim.inject(Fault::nth(
        ops::LIST_NOTES,
        2,
        GitlabFault::DeleteNote(n.issue_kept),
    ));
    let before = f.mirrored().await?;
    f.reconcile().await?;
    let (comments, _) = f.mirrored().await?;
    assert_eq!(
        comments, before.0,
        "a listing that changed under us removes nothing"
    );
    f.reconcile().await?;
    let (comments, _) = f.mirrored().await?;
    assert!(!comments.contains(&(n.issue_gone as i64)));
    assert!(!comments.contains(&(n.issue_kept as i64)));
    assert_eq!(comments.len(), before.0.len() - 2);
    Ok(())
}

#[tokio::test]
async fn past_ten_thousand_notes_gitlab_sends_no_total_and_the_parent_stays() -> Result<()> {
    let f = fixture().await?;
    f.initial().await?;
    let n = &f.notes;
    let on = NoteOn::Issue(f.project, 1);
    // Added after INITIAL and never mirrored: the listing alone is past GitLab's count limit.
    f.sim.model(|m| {
        m.notes.remove(&n.issue_gone);
        for _ in 0..10_000 {
            m.add_note(on, "x", true, None);
        }
    });
    f.reconcile().await?;
    let (comments, _) = f.mirrored().await?;
    assert!(comments.contains(&(n.issue_gone as i64)));
    Ok(())
}

#[tokio::test]
async fn an_error_at_one_merge_requests_note_count_still_syncs_its_discussions() -> Result<()> {
    let f = fixture().await?;
    f.sim.inject(Fault::always(
        ops::PROJECT_MERGE_REQUESTS,
        GitlabFault::FieldError {
            path: "project.mergeRequests.nodes.0.userNotesCount".into(),
            message: "timeout".into(),
        },
    ));
    f.run("INITIAL", "manual").await?;
    let (_, reviews) = f.mirrored().await?;
    assert_eq!(reviews, f.all_user_notes().1);
    Ok(())
}

#[tokio::test]
async fn a_saved_note_touches_its_merge_request_and_the_incremental_pass_mirrors_it() -> Result<()>
{
    let f = fixture().await?;
    // A later merge request sets the watermark well after !2's last update.
    f.sim.model(|m| {
        let late = m.merge_requests[&(f.project, 2)].updated_at + time::Duration::hours(1);
        m.add_merge_request(
            f.project,
            NewMergeRequest {
                title: "later".into(),
                updated_at: late,
            },
        )
    });
    f.initial().await?;
    f.reconcile().await?;
    let reply = f
        .sim
        .model(|m| m.add_reply(f.notes.single, "done").unwrap());
    // A scheduled reconcile within the cooldown reads only what changed since the watermark.
    f.run("RECONCILIATION", "scheduled").await?;
    let (_, reviews) = f.mirrored().await?;
    assert!(reviews.contains(&(reply as i64)), "{reviews:?}");
    Ok(())
}

#[tokio::test]
async fn a_cancel_during_the_notes_pass_ends_the_job_and_reads_no_further_parent() -> Result<()> {
    let f = fixture().await?;
    f.add_issues_with_a_note(20);
    let started = std::time::Instant::now();
    let (outcome, asked) = f
        .initial_interrupted_in_its_notes(async |id| {
            sqlx::query("UPDATE sync_job SET status = 'canceled' WHERE id = $1")
                .bind(id)
                .execute(&f.pool)
                .await
                .unwrap();
        })
        .await?;
    assert_eq!(outcome, JobOutcome::Canceled);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "21 issues' notes at 300 ms each were not all read"
    );
    assert_eq!(
        f.sim.calls(ops::LIST_NOTES),
        asked,
        "no parent's notes are asked for after the cancel"
    );
    assert_eq!(f.sim.calls(ops::MERGE_REQUEST_DISCUSSIONS), 0);
    let (status, finished): (String, bool) =
        sqlx::query_as("SELECT status, finished_at IS NOT NULL FROM sync_job")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!((status.as_str(), finished), ("canceled", true));
    Ok(())
}

#[tokio::test]
async fn a_lease_lost_during_the_notes_pass_writes_nothing_more() -> Result<()> {
    let f = fixture().await?;
    let more = f.add_issues_with_a_note(20);
    let b = Jobs::new(
        ConnectionKind::Gitlab,
        f.pool.clone(),
        "replica-b",
        Duration::from_secs(30),
    );
    // Replica a's lease lapses while it reads its first parent's notes; b takes the job over.
    let (outcome, _) = f
        .initial_interrupted_in_its_notes(async |id| {
            sqlx::query(
                "UPDATE sync_job SET lease_until = now() - interval '1 second' WHERE id = $1",
            )
            .bind(id)
            .execute(&f.pool)
            .await
            .unwrap();
            assert!(b.claim(id).await.unwrap().job().is_some(), "b takes over");
        })
        .await?;
    assert_eq!(outcome, JobOutcome::Failed("lost the job's lease".into()));
    let (comments, reviews) = f.mirrored().await?;
    let written = more
        .iter()
        .filter(|n| comments.contains(&(**n as i64)))
        .count();
    assert!(
        comments.len() <= 2 && written <= 1,
        "only the parent in hand when the lease lapsed may be written: {comments:?}"
    );
    assert!(reviews.is_empty(), "no merge request's notes: {reviews:?}");
    assert_eq!(
        f.watermark("issue").await?,
        None,
        "no watermark is written for a job it no longer holds"
    );
    let (status, claimed_by): (String, String) =
        sqlx::query_as("SELECT status, claimed_by FROM sync_job")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(
        (status.as_str(), claimed_by.as_str()),
        ("running", "replica-b")
    );
    Ok(())
}

#[tokio::test]
async fn notes_not_read_whole_hold_the_watermark_until_a_filtered_pass_reads_them() -> Result<()> {
    let f = fixture().await?;
    f.initial().await?;
    // A whole reconcile: the scheduled one after it is within the cooldown, so filtered.
    f.reconcile().await?;
    let project = f.project;
    // A missed note touches issue #1; a later issue moves the listing's newest past it.
    let (missed, touched_at) = f.sim.model(|m| {
        let note = m.add_note(NoteOn::Issue(project, 1), "missed", false, None);
        let at = m.issues[&(project, 1)].updated_at;
        m.add_issue(
            project,
            NewIssue {
                title: "later".into(),
                updated_at: at + time::Duration::hours(1),
            },
        );
        (note, at)
    });
    f.sim
        .inject(Fault::always(ops::LIST_NOTES, GitlabFault::Status(500)));
    f.run("RECONCILIATION", "scheduled").await?;
    let (comments, _) = f.mirrored().await?;
    assert!(!comments.contains(&(missed as i64)));
    let watermark = f.watermark("issue").await?.expect("a watermark");
    assert!(
        watermark <= touched_at,
        "the watermark {watermark} passed the issue whose notes failed ({touched_at})"
    );

    f.sim.clear_faults();
    f.run("RECONCILIATION", "scheduled").await?;
    let (comments, _) = f.mirrored().await?;
    assert!(comments.contains(&(missed as i64)), "{comments:?}");
    assert!(
        f.watermark("issue").await?.expect("a watermark") > touched_at,
        "read whole, the watermark moves on"
    );
    Ok(())
}
