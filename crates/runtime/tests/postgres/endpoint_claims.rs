//! m0013 on a database that already holds duplicate claims of a vendor id: the first claim
//! stays enabled, later ones are disabled (not deleted) and audited, and the index then holds.

use migrations::{Migrator, MigratorTrait as _};
use sea_orm::{ConnectionTrait as _, DbBackend, Statement};
use testkit::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m0013_keeps_the_first_claim_and_disables_later_duplicates() {
    let test = TestDb::empty().await.unwrap();
    let db = &test.db;
    let before = Migrator::migrations()
        .iter()
        .position(|m| m.name() == "m0013_endpoint_provider_ref_unique")
        .expect("m0013 is a migration");
    Migrator::up(db, Some(before as u32)).await.unwrap();

    // Workspaces A and B, each a GitHub connection; A claimed hook 77 first, B later. Two
    // registered GitLab routes of one group are not claims and stay as they are.
    let setup = r#"
        INSERT INTO workspace (id, name, status) VALUES
            ('00000000-0000-0000-0000-00000000000a', 'alpha', 'active'),
            ('00000000-0000-0000-0000-00000000000b', 'bravo', 'active');
        INSERT INTO provider_instance (id, kind, server_url) VALUES
            ('00000000-0000-0000-0000-0000000000f1', 'github', NULL),
            ('00000000-0000-0000-0000-0000000000f2', 'gitlab', NULL);
        INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id) VALUES
            ('00000000-0000-0000-0000-0000000000ca', '00000000-0000-0000-0000-00000000000a', 'github', 'active', '00000000-0000-0000-0000-0000000000f1'),
            ('00000000-0000-0000-0000-0000000000cb', '00000000-0000-0000-0000-00000000000b', 'github', 'active', '00000000-0000-0000-0000-0000000000f1'),
            ('00000000-0000-0000-0000-0000000000cc', '00000000-0000-0000-0000-00000000000a', 'gitlab', 'active', '00000000-0000-0000-0000-0000000000f2');
        INSERT INTO inbound_endpoint (id, workspace_id, connection_id, kind, registration, provider_ref, secret_current, created_at) VALUES
            ('00000000-0000-0000-0000-0000000000ea', '00000000-0000-0000-0000-00000000000a', '00000000-0000-0000-0000-0000000000ca', 'github', 'operator', '77', 's', now() - interval '2 days'),
            ('00000000-0000-0000-0000-0000000000eb', '00000000-0000-0000-0000-00000000000b', '00000000-0000-0000-0000-0000000000cb', 'github', 'operator', '77', 's', now() - interval '1 day'),
            ('00000000-0000-0000-0000-0000000000e1', '00000000-0000-0000-0000-00000000000a', '00000000-0000-0000-0000-0000000000cc', 'gitlab', 'registered', 'acme', 's', now()),
            ('00000000-0000-0000-0000-0000000000e2', '00000000-0000-0000-0000-00000000000a', '00000000-0000-0000-0000-0000000000cc', 'gitlab', 'registered', 'acme', 's', now());
    "#;
    db.execute_unprepared(setup).await.unwrap();
    Migrator::up(db, None).await.unwrap();

    let rows = db
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT right(id::text, 2) AS id, status FROM inbound_endpoint ORDER BY id",
        ))
        .await
        .unwrap();
    let statuses: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r.try_get("", "id").unwrap(),
                r.try_get("", "status").unwrap(),
            )
        })
        .collect();
    let expected = [
        ("e1", "active"),
        ("e2", "active"),
        ("ea", "active"),
        ("eb", "disabled"),
    ];
    assert_eq!(
        statuses,
        expected.map(|(a, b)| (a.to_owned(), b.to_owned())).to_vec()
    );
    let audit = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) FROM connection_audit WHERE actor = 'migration:m0013' \
             AND connection_id = '00000000-0000-0000-0000-0000000000cb'",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(audit.try_get_by_index::<i64>(0).unwrap(), 1);

    // From now on the index refuses a second enabled claim.
    let again = db
        .execute_unprepared(
            "UPDATE inbound_endpoint SET status = 'active' \
             WHERE id = '00000000-0000-0000-0000-0000000000eb'",
        )
        .await;
    assert!(
        again.is_err(),
        "a second enabled claim of hook 77 is refused"
    );
    test.drop().await;
}
