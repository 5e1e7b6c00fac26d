//! The one test harness: every integration test gets a fresh database cloned from a migrated
//! template and its own JetStream namespace on the shared NATS server, so tests run in parallel
//! under nextest against real Postgres and NATS.
//!
//! `DATABASE_URL` and `NATS_URL` come from `cargo xtask test`, which provisions both.
#![forbid(unsafe_code)]

use anyhow::{Context as _, Result};
use bus::{Bus, Namespace, StreamSettings};
use migrations::{Migrator, MigratorTrait};
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection};

/// A database of one's own, cloned from the migrated template.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub db: DatabaseConnection,
}

fn env_url(var: &str) -> Result<String> {
    std::env::var(var).with_context(|| {
        format!("{var} is not set: run the tests through `cargo xtask test`, which provisions it")
    })
}

/// Replaces the database name in a Postgres URL.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let root = match base.rfind('/') {
        Some(i) if base[..i].contains("://") && i > base.find("://").unwrap_or(0) + 2 => &base[..i],
        _ => base,
    };
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}

async fn connect(url: &str, max: u32) -> Result<DatabaseConnection> {
    let mut opts = ConnectOptions::new(url.to_owned());
    opts.max_connections(max)
        .min_connections(0)
        .sqlx_logging(false);
    Database::connect(opts)
        .await
        .with_context(|| format!("connecting to {url}"))
}

/// The template's name changes whenever the set of migrations does.
fn template_name() -> String {
    let names: Vec<String> = Migrator::migrations()
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in names.join(",").bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    format!("forgesync_template_{h:016x}")
}

impl TestDb {
    /// A fresh, migrated database.
    pub async fn new() -> Result<TestDb> {
        let admin_url = env_url("DATABASE_URL")?;
        let admin = connect(&admin_url, 2).await?;
        let template = template_name();
        // One process migrates the template; the others wait on the advisory lock.
        admin
            .execute_unprepared("SELECT pg_advisory_lock(7210451)")
            .await?;
        let exists = admin
            .query_one_raw(sea_orm::Statement::from_string(
                sea_orm::DbBackend::Postgres,
                format!("SELECT 1 FROM pg_database WHERE datname = '{template}'"),
            ))
            .await?
            .is_some();
        let made = async {
            if !exists {
                admin
                    .execute_unprepared(&format!("CREATE DATABASE {template}"))
                    .await?;
                let t = connect(&with_database(&admin_url, &template), 1).await?;
                Migrator::up(&t, None)
                    .await
                    .context("migrating the test template")?;
                t.close().await?;
            }
            anyhow::Ok(())
        }
        .await;
        admin
            .execute_unprepared("SELECT pg_advisory_unlock(7210451)")
            .await?;
        made?;
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .await
            .context("cloning the template (is another session connected to it?)")?;
        admin.close().await?;
        let url = with_database(&admin_url, &name);
        let db = connect(&url, 10).await?;
        Ok(TestDb { name, url, db })
    }
}

/// A JetStream namespace of one's own with every stream declared.
pub async fn test_bus() -> Result<Bus> {
    let url = env_url("NATS_URL")?;
    let ns = Namespace::new(&format!(
        "t{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    ))
    .map_err(anyhow::Error::msg)?;
    let bus = Bus::connect(&url, ns, StreamSettings::default()).await?;
    bus.declare_streams().await?;
    Ok(bus)
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_name_is_replaced_keeping_the_query() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "t_1"),
            "postgres://postgres@127.0.0.1:5432/t_1"
        );
        assert_eq!(
            with_database("postgres://u:p@h:1/db?sslmode=disable", "x"),
            "postgres://u:p@h:1/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:1", "x"), "postgres://h:1/x");
    }
}
