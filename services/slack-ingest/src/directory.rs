//! Activation and the directory: the token must belong to the connection's team (`auth.test`),
//! and every channel the bot can list is recorded (NONE until consented). A channel missing
//! from a listing is never removed for it; only `channel_deleted` removes one.

use lifecycle_core::vendor_error::VendorErrorClass;
use slack_mirror::channel::{self, Seen};
use sqlx::PgPool;
use store::entity::connection;
use time::OffsetDateTime;

use crate::source::ClientFactory;

/// Pages of `conversations.list` read at most per activation.
const MAX_PAGES: usize = 200;
const PAGE: u16 = 200;

/// Checks the token's team and records the directory. What fails for good (another team's
/// token, refused credentials) is recorded on the connection and ends here; a transient
/// failure is an error, so the activation is retried.
pub async fn activate(
    pool: &PgPool,
    factory: &ClientFactory,
    conn: &connection::Model,
) -> anyhow::Result<()> {
    let started = OffsetDateTime::now_utc();
    let source = match factory.source(conn).await {
        Ok(source) => source,
        Err(e) => {
            record(pool, conn, "slack_activation_failed", &format!("{e:#}")).await?;
            return Ok(());
        }
    };
    let auth = match source.client.auth_test().await {
        Ok(auth) => auth,
        Err(e) if e.class().refuses_credentials() => {
            let reason = format!("bad_credentials: auth.test: {e}");
            store::credentials::refuse(pool, conn.id, started, &reason).await?;
            record(pool, conn, "slack_activation_failed", &reason).await?;
            return Ok(());
        }
        Err(e) => anyhow::bail!("auth.test: {e}"),
    };
    if !source.settings.is_team(&auth.team_id) {
        let reason = format!(
            "the token belongs to Slack team {}, not to the connection's team {}",
            auth.team_id, source.settings.team_id
        );
        store::credentials::refuse(pool, conn.id, started, &reason).await?;
        record(pool, conn, "slack_activation_failed", &reason).await?;
        return Ok(());
    }
    // The bot token auth.test just verified is held for this connection: revoked by provider
    // repair once it is disconnected (team, bot user and the token's fingerprint).
    if let Some(token) =
        store::secrets::get(&factory.db, &factory.secret_key, conn.id, "token").await?
    {
        let (target, vendor_id, proof) =
            slack_mirror::bot_token_resource(&auth.team_id, &auth.user_id, &token);
        let mut txn = pool.begin().await?;
        let kept = store::repair::keep(
            &mut txn,
            &store::repair::KeptResource {
                connection_id: conn.id,
                kind: slack_mirror::BOT_TOKEN,
                target: &target,
                vendor_id: &vendor_id,
                proof: &proof,
            },
        )
        .await?;
        txn.commit().await?;
        if kept == store::repair::Kept::Fenced {
            tracing::warn!(connection_id = %conn.id,
                "the bot token's revocation is fenced; it is not adopted again");
        }
    }
    let mut cursor: Option<String> = None;
    let mut seen = 0usize;
    for _ in 0..MAX_PAGES {
        let page = match source
            .client
            .conversations_list(cursor.as_deref(), PAGE)
            .await
        {
            Ok(page) => page,
            Err(e) => {
                let reason = format!("conversations.list: {e}");
                record(pool, conn, "slack_directory_incomplete", &reason).await?;
                if e.class() == VendorErrorClass::ServerError
                    || e.class() == VendorErrorClass::RateLimited
                {
                    anyhow::bail!(reason);
                }
                return Ok(());
            }
        };
        let mut txn = pool.begin().await?;
        for c in &page.items {
            channel::upsert_seen(
                &mut txn,
                conn.id,
                conn.workspace_id,
                &Seen {
                    slack_id: &c.id,
                    name: c.name.as_deref(),
                    is_private: c.is_private,
                },
            )
            .await?;
        }
        txn.commit().await?;
        seen += page.items.len();
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => {
                tracing::info!(connection_id = %conn.id, channels = seen, "Slack directory recorded");
                return Ok(());
            }
        }
    }
    record(
        pool,
        conn,
        "slack_directory_incomplete",
        &format!(
            "more than {MAX_PAGES} pages of channels; the rest is listed at the next reconcile"
        ),
    )
    .await?;
    Ok(())
}

async fn record(
    pool: &PgPool,
    conn: &connection::Model,
    activity: &str,
    reason: &str,
) -> Result<(), sqlx::Error> {
    tracing::warn!(connection_id = %conn.id, activity, reason, "Slack activation");
    store::activity::record(
        pool,
        conn.id,
        conn.workspace_id,
        activity,
        serde_json::json!({ "reason": reason }),
    )
    .await
}
