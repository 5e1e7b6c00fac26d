//! m0040 against real Postgres: GitLab review threads a Note Hook keyed by the bare discussion
//! hex take the discussion's global id, a twin pair of one merge request becomes one thread
//! holding every comment, and nothing else is touched (GitHub threads, other GitLab ids); a rerun
//! changes nothing.

use migrations::{Migrator, MigratorTrait as _};
use sqlx::PgPool;
use uuid::Uuid;

const MIGRATION: &str = "m0040_gitlab_thread_ids";
const HEX_A: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
const HEX_B: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f001234567";

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

/// Every thread as (pull request, node id, path) and every comment as (native id, thread node
/// id, in reply to), sorted.
type Snapshot = (
    Vec<(Uuid, String, Option<String>)>,
    Vec<(i64, Option<String>, Option<i64>)>,
);

async fn snapshot(pool: &PgPool) -> Snapshot {
    let threads = sqlx::query_as(
        "SELECT pull_request_id, node_id, path FROM review_thread ORDER BY pull_request_id, node_id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let comments = sqlx::query_as(
        "SELECT c.native_id, t.node_id, c.in_reply_to
           FROM review_comment c LEFT JOIN review_thread t ON t.id = c.thread_id
          ORDER BY c.native_id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    (threads, comments)
}

async fn thread(pool: &PgPool, pr: Uuid, thread: Uuid, node_id: &str, path: Option<&str>) {
    sqlx::query(
        "INSERT INTO review_thread (id, pull_request_id, node_id, path) VALUES ($1, $2, $3, $4)",
    )
    .bind(thread)
    .bind(pr)
    .bind(node_id)
    .bind(path)
    .execute(pool)
    .await
    .unwrap();
}

async fn comment(pool: &PgPool, pr: Uuid, thread: Uuid, native_id: i64, reply_to: Option<i64>) {
    sqlx::query(
        "INSERT INTO review_comment
           (id, pull_request_id, thread_id, native_id, in_reply_to, body,
            upstream_created_at, upstream_updated_at)
         VALUES ($1, $2, $3, $4, $5, 'b',
                 '2026-01-01'::timestamptz + make_interval(secs => $4),
                 '2026-01-01'::timestamptz + make_interval(secs => $4))",
    )
    .bind(Uuid::new_v4())
    .bind(pr)
    .bind(thread)
    .bind(native_id)
    .bind(reply_to)
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_hex_gitlab_threads_take_the_global_id_and_twins_merge() {
    let test = testkit::TestDb::empty().await.unwrap();
    let before = Migrator::migrations()
        .iter()
        .position(|m| m.name() == MIGRATION)
        .expect("the migration is listed");
    Migrator::up(&test.db, Some(u32::try_from(before).unwrap()))
        .await
        .unwrap();
    let pool = PgPool::connect(&test.url).await.unwrap();
    let (gitlab_mr, other_mr, github_pr) = (id(0x30), id(0x31), id(0x32));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO provider_instance (id, kind) VALUES ('{gl}', 'gitlab'), ('{gh}', 'github');
         INSERT INTO repository (id, provider_instance_id, native_id, node_id, owner, name)
           VALUES ('{rgl}', '{gl}', 1, 'gid://gitlab/Project/1', 'top', 'p'),
                  ('{rgh}', '{gh}', 1, 'R_1', 'acme', 'api');
         INSERT INTO pull_request (id, repository_id, native_id, node_id, number, state,
                                   upstream_created_at, upstream_updated_at)
           VALUES ('{gitlab_mr}', '{rgl}', 10, 'gid://gitlab/MergeRequest/10', 1, 'open', '2026-01-01', '2026-01-01'),
                  ('{other_mr}', '{rgl}', 11, 'gid://gitlab/MergeRequest/11', 2, 'open', '2026-01-01', '2026-01-01'),
                  ('{github_pr}', '{rgh}', 12, 'PR_12', 1, 'open', '2026-01-01', '2026-01-01');",
        gl = id(0x10),
        gh = id(0x11),
        rgl = id(0x20),
        rgh = id(0x21),
    )))
    .execute(&pool)
    .await
    .unwrap();
    let gid_a = format!("gid://gitlab/Discussion/{HEX_A}");
    // Discussion A on the GitLab MR twice: the hook's hex thread holds notes 1 and 3, the sync's
    // global-id thread (no path yet) note 2.
    thread(&pool, gitlab_mr, id(0x40), HEX_A, Some("src/lib.rs")).await;
    comment(&pool, gitlab_mr, id(0x40), 1, None).await;
    comment(&pool, gitlab_mr, id(0x40), 3, Some(1)).await;
    thread(&pool, gitlab_mr, id(0x41), &gid_a, None).await;
    comment(&pool, gitlab_mr, id(0x41), 2, None).await;
    // Discussion B on the GitLab MR, only by its hex.
    thread(&pool, gitlab_mr, id(0x42), HEX_B, Some("b.rs")).await;
    comment(&pool, gitlab_mr, id(0x42), 4, None).await;
    // A diff note without a discussion id keyed its thread by the note's global id.
    thread(&pool, other_mr, id(0x43), "gid://gitlab/Note/7", None).await;
    comment(&pool, other_mr, id(0x43), 7, None).await;
    // GitHub: a thread id that happens to be 40 hex digits is GitHub's own.
    thread(&pool, github_pr, id(0x44), HEX_A, None).await;
    comment(&pool, github_pr, id(0x44), 8, None).await;

    Migrator::up(&test.db, None).await.unwrap();

    let migrated = snapshot(&pool).await;
    let gid_b = format!("gid://gitlab/Discussion/{HEX_B}");
    let mut threads = vec![
        (gitlab_mr, gid_b.clone(), Some("b.rs".to_owned())),
        (gitlab_mr, gid_a.clone(), Some("src/lib.rs".to_owned())),
        (other_mr, "gid://gitlab/Note/7".to_owned(), None),
        (github_pr, HEX_A.to_owned(), None),
    ];
    threads.sort();
    assert_eq!(migrated.0, threads);
    assert_eq!(
        migrated.1,
        [
            // The merged thread: every comment, replies to its first.
            (1, Some(gid_a.clone()), None),
            (2, Some(gid_a.clone()), Some(1)),
            (3, Some(gid_a.clone()), Some(1)),
            (4, Some(gid_b), None),
            (7, Some("gid://gitlab/Note/7".to_owned()), None),
            (8, Some(HEX_A.to_owned()), None),
        ]
    );
    // The hex twin is gone, the global-id row kept its identity.
    let kept: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM review_thread WHERE pull_request_id = $1 ORDER BY node_id",
    )
    .bind(gitlab_mr)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(kept, [id(0x42), id(0x41)]);

    // Applying it again changes nothing.
    sqlx::query("DELETE FROM seaql_migrations WHERE version = $1")
        .bind(MIGRATION)
        .execute(&pool)
        .await
        .unwrap();
    Migrator::up(&test.db, None).await.unwrap();
    assert_eq!(snapshot(&pool).await, migrated);

    pool.close().await;
    test.drop().await;
}
