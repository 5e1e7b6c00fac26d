//! `store::admission::admit` with a rule declared here, for a vendor that is not a forge (a
//! Slack channel, from a table this test creates): the shared entry checks the kind and the
//! state, holds the connection row, and asks the vendor's rule only then.

use std::sync::Mutex;

use anyhow::Result;
use lifecycle_core::connection::ConnectionState;
use sqlx::{PgConnection, PgPool};
use store::admission::{AdmissionRule, Delivering, Origin, Refusal, VendorRefusal, admit};
use store::entity::ConnectionKind;
use uuid::Uuid;

use crate::World;

const NOT_A_MEMBER: Refusal = Refusal::Vendor(VendorRefusal {
    label: "not_a_member",
    reason: "the connection's bot is not a member of the channel",
});

/// What the rule saw each time it was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Asked {
    connection_id: Uuid,
    state: ConnectionState,
    /// Whether another session could not take the connection row for update meanwhile.
    row_held: bool,
}

struct Probe {
    pool: PgPool,
    asked: Mutex<Vec<Asked>>,
}

impl Probe {
    fn asked(&self) -> Vec<Asked> {
        std::mem::take(&mut *self.asked.lock().unwrap())
    }
}

/// Whether another session is kept from locking connection `id` for update.
async fn held(pool: &PgPool, id: Uuid) -> Result<bool, sqlx::Error> {
    let mut other = pool.begin().await?;
    let taken = sqlx::query("SELECT 1 FROM connection WHERE id = $1 FOR UPDATE NOWAIT")
        .bind(id)
        .execute(&mut *other)
        .await;
    other.rollback().await?;
    match taken {
        Ok(_) => Ok(false),
        // lock_not_available
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => Ok(true),
        Err(e) => Err(e),
    }
}

/// A Slack channel the delivering connection's bot is a member of.
struct SlackChannel<'a> {
    channel: &'static str,
    probe: &'a Probe,
}

impl AdmissionRule for SlackChannel<'_> {
    const KIND: ConnectionKind = ConnectionKind::Slack;

    // Rule (test vendor): only a channel the connection's bot joined admits.
    async fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> Result<Result<(), Refusal>, sqlx::Error> {
        let connection_id = delivering.admitted.connection_id;
        let row_held = held(&self.probe.pool, connection_id).await?;
        self.probe.asked.lock().unwrap().push(Asked {
            connection_id,
            state: delivering.state,
            row_held,
        });
        let member: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM test_slack_member WHERE connection_id = $1 AND channel = $2",
        )
        .bind(connection_id)
        .bind(self.channel)
        .fetch_optional(&mut *conn)
        .await?;
        Ok(member.map(|_| ()).ok_or(NOT_A_MEMBER))
    }
}

/// The same channel, for a rule that also hears a paused connection.
struct PausedToo<'a>(SlackChannel<'a>);

impl AdmissionRule for PausedToo<'_> {
    const KIND: ConnectionKind = ConnectionKind::Slack;

    fn authorised(state: ConnectionState) -> bool {
        state.authorises_writes() || state == ConnectionState::Paused
    }

    async fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> Result<Result<(), Refusal>, sqlx::Error> {
        self.0.decide(conn, delivering).await
    }
}

async fn world() -> Result<(World, Probe)> {
    let w = World::new("slack").await?;
    sqlx::query(
        "CREATE TABLE test_slack_member (connection_id uuid NOT NULL, channel text NOT NULL)",
    )
    .execute(&w.pool)
    .await?;
    let probe = Probe {
        pool: w.pool.clone(),
        asked: Mutex::new(Vec::new()),
    };
    Ok((w, probe))
}

impl World {
    async fn member(&self, conn: Uuid, channel: &str) -> Result<()> {
        sqlx::query("INSERT INTO test_slack_member (connection_id, channel) VALUES ($1, $2)")
            .bind(conn)
            .bind(channel)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn admit(
        &self,
        connection_id: Uuid,
        scope: impl AdmissionRule,
    ) -> Result<Result<Uuid, Refusal>> {
        let mut tx = self.pool.begin().await?;
        let origin = Origin {
            connection_id,
            delivery_id: None,
        };
        let got = admit(&mut tx, &origin, scope).await?;
        tx.commit().await?;
        Ok(got.map(|a| a.workspace_id))
    }
}

#[tokio::test]
async fn a_declared_rule_decides_for_its_own_kind_of_connection_only() -> Result<()> {
    let (w, probe) = world().await?;
    let (ws, slack) = w.connection("slack", "active").await?;
    w.member(slack, "C1").await?;
    let channel = |channel| SlackChannel {
        channel,
        probe: &probe,
    };
    assert_eq!(w.admit(slack, channel("C1")).await?, Ok(ws));
    // The rule's own refusal, with its own label.
    let refused = w.admit(slack, channel("C2")).await?;
    assert_eq!(refused, Err(NOT_A_MEMBER));
    assert_eq!(refused.unwrap_err().as_str(), "not_a_member");
    assert_eq!(probe.asked().len(), 2);
    // Another kind of connection, even one the table names, or no connection: the rule is not
    // asked.
    let (_, github) = w.connection("github", "active").await?;
    w.member(github, "C1").await?;
    assert_eq!(
        w.admit(github, channel("C1")).await?,
        Err(Refusal::NoConnection)
    );
    assert_eq!(
        w.admit(Uuid::now_v7(), channel("C1")).await?,
        Err(Refusal::NoConnection)
    );
    assert_eq!(probe.asked(), vec![]);
    Ok(())
}

#[tokio::test]
async fn a_declared_rule_is_asked_only_for_a_state_it_authorises() -> Result<()> {
    let (w, probe) = world().await?;
    for (status, state, writes) in [
        ("active", ConnectionState::Active, true),
        ("suspended", ConnectionState::Suspended, true),
        ("pending", ConnectionState::Pending, false),
        ("paused", ConnectionState::Paused, false),
        ("uninstalled", ConnectionState::Uninstalled, false),
        ("disconnected", ConnectionState::Disconnected, false),
    ] {
        let (ws, conn) = w.connection("slack", status).await?;
        w.member(conn, "C1").await?;
        let scope = SlackChannel {
            channel: "C1",
            probe: &probe,
        };
        let got = w.admit(conn, scope).await?;
        if writes {
            assert_eq!(got, Ok(ws), "{status}");
            let asked = probe.asked();
            assert_eq!(asked.len(), 1, "{status}");
            assert_eq!(asked[0].state, state, "{status}");
        } else {
            assert_eq!(got, Err(Refusal::NotAuthorised), "{status}");
            assert_eq!(probe.asked(), vec![], "{status}");
        }
        // A rule that declares more states is asked for them, and only for them.
        let lenient = PausedToo(SlackChannel {
            channel: "C1",
            probe: &probe,
        });
        let got = w.admit(conn, lenient).await?;
        if writes || status == "paused" {
            assert_eq!(got, Ok(ws), "{status}");
            assert_eq!(probe.asked().len(), 1, "{status}");
        } else {
            assert_eq!(got, Err(Refusal::NotAuthorised), "{status}");
            assert_eq!(probe.asked(), vec![], "{status}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn the_connection_row_is_held_while_the_rule_decides_and_until_the_caller_commits()
-> Result<()> {
    let (w, probe) = world().await?;
    let (ws, conn) = w.connection("slack", "active").await?;
    w.member(conn, "C1").await?;
    let mut tx = w.pool.begin().await?;
    let origin = Origin {
        connection_id: conn,
        delivery_id: None,
    };
    let scope = SlackChannel {
        channel: "C1",
        probe: &probe,
    };
    let admitted = admit(&mut tx, &origin, scope).await?;
    assert_eq!(admitted.map(|a| a.workspace_id), Ok(ws));
    assert_eq!(
        probe.asked(),
        vec![Asked {
            connection_id: conn,
            state: ConnectionState::Active,
            row_held: true,
        }]
    );
    // A disconnect cannot slip in before the caller's writes commit.
    assert!(held(&w.pool, conn).await?);
    tx.commit().await?;
    assert!(!held(&w.pool, conn).await?);
    Ok(())
}
