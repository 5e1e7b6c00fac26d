//! The Postgres connection pool, and migrations at start under an advisory lock.

use std::time::Duration;

use anyhow::Context as _;
use migrations::{Migrator, MigratorTrait as _};
use sea_orm::{ConnectOptions, ConnectionTrait as _, Database, DatabaseConnection};

/// Advisory lock key held while migrating (ASCII "fsmigrat"), shared by every replica.
pub const MIGRATION_LOCK_KEY: i64 = 0x6673_6d69_6772_6174;

/// Postgres connections a service holds at most unless `FORGESYNC_DB_POOL_SIZE` says otherwise.
pub const DEFAULT_POOL_SIZE: u32 = 10;

/// Connects a pool of up to `pool_size` connections to `url`; with `migrate`, first applies
/// pending migrations.
///
/// Several replicas may start at once with `migrate`: they take turns under a Postgres
/// advisory lock, and the later ones find nothing pending.
pub async fn connect(
    url: &str,
    migrate: bool,
    pool_size: u32,
) -> anyhow::Result<DatabaseConnection> {
    // TLS to Postgres goes through rustls.
    crate::crypto::install_crypto_provider();
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(pool_size)
        .min_connections(1)
        .connect_timeout(Duration::from_secs(10))
        .acquire_timeout(Duration::from_secs(10))
        .idle_timeout(Duration::from_secs(300))
        .max_lifetime(Duration::from_secs(1800))
        .sqlx_logging(false);
    let db = Database::connect(options)
        .await
        .context("connecting to Postgres (DATABASE_URL)")?;
    if migrate {
        run_migrations(url, &db).await?;
    }
    Ok(db)
}

/// Applies pending migrations to `db` while holding [`MIGRATION_LOCK_KEY`].
pub async fn run_migrations(url: &str, db: &DatabaseConnection) -> anyhow::Result<()> {
    // A session lock must stay on one connection: a one-connection pool of its own holds it.
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(1)
        .min_connections(1)
        .connect_timeout(Duration::from_secs(10))
        .sqlx_logging(false);
    let lock = Database::connect(options)
        .await
        .context("connecting to Postgres for the migration lock (DATABASE_URL)")?;
    lock.execute_unprepared(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"))
        .await
        .context("taking the migration lock")?;
    let migrated = Migrator::up(db, None).await.context("applying migrations");
    let unlocked = lock
        .execute_unprepared(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"))
        .await;
    // Closing the session releases the lock even if the unlock failed.
    let _ = lock.close().await;
    migrated?;
    unlocked.context("releasing the migration lock")?;
    tracing::info!("database migrations are current");
    Ok(())
}
