//! A fresh database per test.

use sea_orm::{ConnectionTrait as _, Database, DatabaseConnection};

/// A database created for one test, dropped by [`TestDb::drop`].
pub struct TestDb {
    pub url: String,
    pub db: DatabaseConnection,
    name: String,
    admin_url: String,
}

impl TestDb {
    /// Creates an empty database; `migrate` applies the migrations.
    pub async fn create(migrate: bool) -> Self {
        runtime::install_crypto_provider();
        let admin_url = std::env::var("DATABASE_URL")
            .expect("DATABASE_URL must point at a Postgres server for these tests");
        let name = format!("rt_test_{}", uuid::Uuid::new_v4().simple());
        let admin = Database::connect(admin_url.clone()).await.unwrap();
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let _ = admin.close().await;
        let url = with_database(&admin_url, &name);
        let db = runtime::db::connect(&url, migrate).await.unwrap();
        Self {
            url,
            db,
            name,
            admin_url,
        }
    }

    /// Closes the pool and drops the database.
    pub async fn drop(self) {
        let _ = self.db.close().await;
        let admin = Database::connect(self.admin_url).await.unwrap();
        admin
            .execute_unprepared(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await
            .unwrap();
        let _ = admin.close().await;
    }
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{name}?{query}"),
        None => format!("{base}/{name}"),
    }
}
