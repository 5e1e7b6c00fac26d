//! Migrations at start are safe when several replicas start at once.

use migrations::{Migrator, MigratorTrait as _};

use testkit::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_migrating_at_once_take_turns() {
    let test = TestDb::empty().await.unwrap();
    let starts =
        (0..3).map(|_| runtime::db::connect(&test.url, true, runtime::db::DEFAULT_POOL_SIZE));
    for started in futures::future::join_all(starts).await {
        started.expect("every replica starts");
    }
    let pending = Migrator::get_pending_migrations(&test.db).await.unwrap();
    assert!(pending.is_empty());
    test.drop().await;
}

/// Rows dated in the future before vendor times were bounded (a forged 2099 edit) are repaired
/// by m0029: their versions move back so that the next genuine version passes the forward-only
/// step, and a future watermark is cleared; rows dated now are left as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_migration_unfreezes_rows_dated_in_the_future() {
    use sea_orm::ConnectionTrait as _;
    let test = TestDb::empty().await.unwrap();
    // Every migration before the repair.
    let before = Migrator::migrations()
        .iter()
        .position(|m| m.name() == "m0029_future_versions")
        .expect("the repair migration is listed");
    let before = u32::try_from(before).unwrap();
    Migrator::up(&test.db, Some(before)).await.unwrap();
    test.db
        .execute_unprepared(
            "INSERT INTO provider_instance (id, kind) VALUES ('00000000-0000-0000-0000-000000000001', 'github');
             INSERT INTO repository (id, provider_instance_id, native_id, node_id, owner, name)
               VALUES ('00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-000000000001', 1, 'R1', 'acme', 'api');
             INSERT INTO issue (id, repository_id, native_id, node_id, number, state, upstream_created_at, upstream_updated_at)
               VALUES ('00000000-0000-0000-0000-000000000003', '00000000-0000-0000-0000-000000000002', 10, 'I10', 1, 'open', '2026-01-01', '2099-01-01'),
                      ('00000000-0000-0000-0000-000000000004', '00000000-0000-0000-0000-000000000002', 11, 'I11', 2, 'open', '2026-01-01', now());
             INSERT INTO listing_state (scope_kind, scope_id, class, watermark)
               VALUES ('repository', '00000000-0000-0000-0000-000000000002', 'issue', '2099-01-01'),
                      ('repository', '00000000-0000-0000-0000-000000000002', 'merge_request', '2026-01-01');",
        )
        .await
        .unwrap();
    Migrator::up(&test.db, None).await.unwrap();
    let versions = test
        .db
        .query_all_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT native_id, upstream_updated_at < now() + interval '5 minutes',
                    upstream_updated_at = 'epoch'
               FROM issue ORDER BY native_id"
                .to_owned(),
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.try_get_by_index::<i64>(0).unwrap(),
                r.try_get_by_index::<bool>(1).unwrap(),
                r.try_get_by_index::<bool>(2).unwrap(),
            )
        })
        .collect::<Vec<_>>();
    assert_eq!(versions, [(10, true, true), (11, true, false)]);
    let watermarks = test
        .db
        .query_all_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT class, watermark IS NULL FROM listing_state ORDER BY class".to_owned(),
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.try_get_by_index::<String>(0).unwrap(),
                r.try_get_by_index::<bool>(1).unwrap(),
            )
        })
        .collect::<Vec<_>>();
    assert_eq!(
        watermarks,
        [
            ("issue".to_owned(), true),
            ("merge_request".to_owned(), false)
        ]
    );
    test.drop().await;
}
