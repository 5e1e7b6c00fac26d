//! The organization tier's own guard, against real Postgres and NATS: a disconnected
//! connection's organization tier (teams, memberships) stays while another live workspace binds
//! the same organization, and goes with the last binding; the organization row is only unlinked.

use anyhow::Result;
use eraser::{Eraser, Outcome};
use lifecycle_core::erasure::ErasureTrigger;
use scm_mirror::organization::{self, Member, MembersOf};
use time::OffsetDateTime;
use uuid::Uuid;

struct Tier {
    env: testkit::TestEnv,
    eraser: Eraser,
    /// Two workspaces' GitLab connections binding the same organization.
    a: Uuid,
    b: Uuid,
}

impl Tier {
    fn pool(&self) -> &sqlx::PgPool {
        self.env.db.db.get_postgres_connection_pool()
    }

    async fn count(&self, table: &str) -> Result<i64> {
        Ok(
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(self.pool())
                .await?,
        )
    }

    /// (organizations, bindings, organization members, teams, team members).
    async fn counts(&self) -> Result<[i64; 5]> {
        Ok([
            self.count("organization").await?,
            self.count("organization_binding").await?,
            self.count("organization_membership").await?,
            self.count("team").await?,
            self.count("team_membership").await?,
        ])
    }

    async fn disconnect_and_erase(&self, connection_id: Uuid) -> Result<Outcome> {
        sqlx::query("UPDATE connection SET status = 'disconnected' WHERE id = $1")
            .bind(connection_id)
            .execute(self.pool())
            .await?;
        Ok(self
            .eraser
            .erase_connection(connection_id, ErasureTrigger::AdminDisconnect)
            .await?)
    }
}

/// Two GitLab connections (workspaces A and B) bound to organization `acme`, which has a member
/// and a team with a member.
async fn tier() -> Result<Tier> {
    let env = testkit::TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();
    let instance = Uuid::now_v7();
    sqlx::query("INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)")
        .bind(instance)
        .bind("https://gitlab.example.com")
        .execute(&pool)
        .await?;
    let settings = serde_json::json!({"group": "acme"});
    let mut connections = Vec::new();
    for _ in 0..2 {
        let (workspace, connection) =
            testkit::active_connection(&env.db.db, "gitlab", instance, settings.clone(), None)
                .await?;
        let mut tx = pool.begin().await?;
        let org = organization::bind(&mut tx, connection, workspace, instance, 7, "acme").await?;
        let team = organization::team(&mut tx, org, 8, "acme/team").await?;
        let now = OffsetDateTime::now_utc();
        let member = |id: i64, name: &str| Member {
            user_native_id: id,
            username: name.to_owned(),
            access_level: 30,
        };
        organization::apply_listing(
            &mut tx,
            MembersOf::Organization(org),
            &[member(1, "alice")],
            true,
            now,
        )
        .await?;
        organization::apply_listing(
            &mut tx,
            MembersOf::Team(team),
            &[member(2, "bob")],
            true,
            now,
        )
        .await?;
        tx.commit().await?;
        connections.push(connection);
    }
    let eraser = Eraser {
        db: env.db.db.clone(),
        bus: env.bus.clone(),
        holders: vendors::holders(),
    };
    Ok(Tier {
        eraser,
        a: connections[0],
        b: connections[1],
        env,
    })
}

#[tokio::test]
async fn the_organization_tier_stays_while_another_live_workspace_binds_it() -> Result<()> {
    let t = tier().await?;
    assert_eq!(t.counts().await?, [1, 2, 1, 1, 1]);
    // A goes: B still binds acme, so its tier stays; only A's binding is unlinked.
    assert_eq!(t.disconnect_and_erase(t.a).await?, Outcome::Erased);
    assert_eq!(t.counts().await?, [1, 1, 1, 1, 1]);
    // B goes too: nobody binds acme any more; the tier is erased, the organization row stays.
    assert_eq!(t.disconnect_and_erase(t.b).await?, Outcome::Erased);
    assert_eq!(t.counts().await?, [1, 0, 0, 0, 0]);
    Ok(())
}

#[tokio::test]
async fn a_workspace_being_purged_no_longer_keeps_the_tier() -> Result<()> {
    let t = tier().await?;
    // B's workspace is being purged (its connection not erased yet): it binds nothing live.
    sqlx::query(
        "UPDATE workspace SET status = 'purging'
          WHERE id = (SELECT workspace_id FROM connection WHERE id = $1)",
    )
    .bind(t.b)
    .execute(t.pool())
    .await?;
    t.disconnect_and_erase(t.a).await?;
    assert_eq!(t.counts().await?, [1, 1, 0, 0, 0]);
    Ok(())
}
