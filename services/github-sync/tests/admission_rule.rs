//! The code hosts' write-admission rules (`scm_mirror::admission`) through the shared entry
//! (`store::admission::admit`) case by case, against real Postgres: what admits a delivery, and
//! the reason each other case is refused.

use anyhow::Result;
use scm_mirror::admission::{
    GithubInstallation, GithubRepository, GitlabProject, INSTALLATION_NOT_VERIFIED,
    NOT_APP_ENDPOINT, record_github_installation,
};
use sqlx::PgPool;
use store::admission::{AdmissionRule, Origin, Refusal, admit};
use uuid::Uuid;

const NATIVE: i64 = 4711;
const INSTALLATION: i64 = 99;

struct World {
    _db: testkit::TestDb,
    pool: PgPool,
    instance: Uuid,
}

async fn world() -> Result<World> {
    let db = testkit::TestDb::new().await?;
    let pool = db.db.get_postgres_connection_pool().clone();
    let instance = Uuid::now_v7();
    sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'github')")
        .bind(instance)
        .execute(&pool)
        .await?;
    Ok(World {
        _db: db,
        pool,
        instance,
    })
}

impl World {
    /// A workspace with one connection of `kind` in `status`; returns (workspace, connection).
    async fn connection(&self, kind: &str, status: &str) -> Result<(Uuid, Uuid)> {
        let (ws, conn) = (Uuid::now_v7(), Uuid::now_v7());
        sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'w')")
            .bind(ws)
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(conn)
        .bind(ws)
        .bind(kind)
        .bind(status)
        .bind(self.instance)
        .execute(&self.pool)
        .await?;
        Ok((ws, conn))
    }

    async fn monitor(&self, ws: Uuid, conn: Uuid, native_id: Option<i64>) -> Result<()> {
        sqlx::query(
            "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id)
             VALUES ($1, $2, $3, 'acme', 'widgets', $4)",
        )
        .bind(Uuid::now_v7())
        .bind(ws)
        .bind(conn)
        .bind(native_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A delivery received by an endpoint of `conn` registered as `registration`.
    async fn delivery(&self, ws: Uuid, conn: Uuid, registration: &str) -> Result<Uuid> {
        let (endpoint, message) = (Uuid::now_v7(), Uuid::now_v7());
        sqlx::query(
            "INSERT INTO inbound_endpoint (id, workspace_id, connection_id, kind, registration,
                                           secret_current)
             VALUES ($1, $2, $3, 'github', $4, 'webhook_secret')",
        )
        .bind(endpoint)
        .bind(ws)
        .bind(conn)
        .bind(registration)
        .execute(&self.pool)
        .await?;
        sqlx::query(
            "INSERT INTO inbound_message (id, endpoint_id, workspace_id, connection_id, kind,
                                          verification, body_digest, event, subject, msg_id,
                                          outbox_id, tenant_signed)
             VALUES ($1, $2, $3, $4, 'github', 'hmac', 'd', 'installation', 's', $1::text, $1,
                     false)",
        )
        .bind(message)
        .bind(endpoint)
        .bind(ws)
        .bind(conn)
        .execute(&self.pool)
        .await?;
        Ok(message)
    }

    async fn admit(
        &self,
        connection_id: Uuid,
        delivery_id: Option<Uuid>,
        scope: impl AdmissionRule,
    ) -> Result<Result<Uuid, Refusal>> {
        let mut conn = self.pool.acquire().await?;
        let origin = Origin {
            connection_id,
            delivery_id,
        };
        Ok(admit(&mut conn, &origin, scope)
            .await?
            .map(|a| a.workspace_id))
    }
}

fn repository() -> GithubRepository {
    GithubRepository { native_id: NATIVE }
}

fn installation() -> GithubInstallation {
    GithubInstallation {
        installation_id: INSTALLATION,
    }
}

#[tokio::test]
async fn a_repository_write_is_admitted_only_by_an_id_bound_monitor_of_the_delivering_connection()
-> Result<()> {
    let w = world().await?;
    let (a_ws, a) = w.connection("github", "active").await?;
    let (b_ws, b) = w.connection("github", "active").await?;
    w.monitor(a_ws, a, Some(NATIVE)).await?;
    // B names the same repository, but only by name.
    w.monitor(b_ws, b, None).await?;
    assert_eq!(w.admit(a, None, repository()).await?, Ok(a_ws));
    // Another connection's monitor admits nothing for B, nor does B's name-only one.
    assert_eq!(
        w.admit(b, None, repository()).await?,
        Err(Refusal::NotMonitored)
    );
    // A monitor bound to another id admits nothing for this one.
    assert_eq!(
        w.admit(a, None, GithubRepository { native_id: 1 }).await?,
        Err(Refusal::NotMonitored)
    );
    // Unknown connection, or one of another kind: refused.
    assert_eq!(
        w.admit(Uuid::now_v7(), None, repository()).await?,
        Err(Refusal::NoConnection)
    );
    let (g_ws, g) = w.connection("gitlab", "active").await?;
    w.monitor(g_ws, g, Some(NATIVE)).await?;
    assert_eq!(
        w.admit(g, None, repository()).await?,
        Err(Refusal::NoConnection)
    );
    // GitLab projects follow the same rule, each scope for its own kind of connection.
    let project = GitlabProject { native_id: NATIVE };
    assert_eq!(w.admit(g, None, project).await?, Ok(g_ws));
    assert_eq!(w.admit(a, None, project).await?, Err(Refusal::NoConnection));
    Ok(())
}

#[tokio::test]
async fn a_connection_that_does_not_authorise_writes_admits_nothing() -> Result<()> {
    let w = world().await?;
    for (status, admitted) in [
        ("active", true),
        ("suspended", true),
        ("pending", false),
        ("paused", false),
        ("uninstalled", false),
        ("disconnected", false),
    ] {
        let (ws, conn) = w.connection("github", status).await?;
        w.monitor(ws, conn, Some(NATIVE)).await?;
        let got = w.admit(conn, None, repository()).await?;
        if admitted {
            assert_eq!(got, Ok(ws), "{status}");
        } else {
            assert_eq!(got, Err(Refusal::NotAuthorised), "{status}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn installation_events_need_the_app_endpoint_and_the_installation_the_connection_verified()
-> Result<()> {
    let w = world().await?;
    let (ws, conn) = w.connection("github", "active").await?;
    let registered = w.delivery(ws, conn, "registered").await?;
    let app = w.delivery(ws, conn, "app").await?;
    assert_eq!(
        w.admit(conn, None, installation()).await?,
        Err(NOT_APP_ENDPOINT)
    );
    assert_eq!(
        w.admit(conn, Some(registered), installation()).await?,
        Err(NOT_APP_ENDPOINT)
    );
    // Another connection's App endpoint does not speak for this one.
    let (other_ws, other) = w.connection("github", "active").await?;
    let others_app = w.delivery(other_ws, other, "app").await?;
    assert_eq!(
        w.admit(conn, Some(others_app), installation()).await?,
        Err(NOT_APP_ENDPOINT)
    );
    // Nothing verified yet, then another installation verified: refused.
    assert_eq!(
        w.admit(conn, Some(app), installation()).await?,
        Err(INSTALLATION_NOT_VERIFIED)
    );
    let mut c = w.pool.acquire().await?;
    record_github_installation(&mut c, conn, 7).await?;
    assert_eq!(
        w.admit(conn, Some(app), installation()).await?,
        Err(INSTALLATION_NOT_VERIFIED)
    );
    record_github_installation(&mut c, conn, u64::try_from(INSTALLATION)?).await?;
    assert_eq!(w.admit(conn, Some(app), installation()).await?, Ok(ws));
    Ok(())
}

#[tokio::test]
async fn installation_events_concern_a_connection_until_it_has_ended() -> Result<()> {
    let w = world().await?;
    for (status, admitted) in [
        ("active", true),
        ("suspended", true),
        ("pending", true),
        ("paused", true),
        ("uninstalled", false),
        ("disconnected", false),
    ] {
        let (ws, conn) = w.connection("github", status).await?;
        let app = w.delivery(ws, conn, "app").await?;
        let mut c = w.pool.acquire().await?;
        record_github_installation(&mut c, conn, u64::try_from(INSTALLATION)?).await?;
        let got = w.admit(conn, Some(app), installation()).await?;
        if admitted {
            assert_eq!(got, Ok(ws), "{status}");
        } else {
            assert_eq!(got, Err(Refusal::NotAuthorised), "{status}");
        }
    }
    // GitHub's own refusals keep their labels.
    assert_eq!(NOT_APP_ENDPOINT.as_str(), "not_app_endpoint");
    assert_eq!(
        INSTALLATION_NOT_VERIFIED.as_str(),
        "installation_not_verified"
    );
    Ok(())
}
