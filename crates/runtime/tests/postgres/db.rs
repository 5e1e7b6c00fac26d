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
