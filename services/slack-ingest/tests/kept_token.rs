//! Activation keeps the bot token `auth.test` verified, so provider repair can revoke it once
//! the connection is disconnected: its team and bot user as target, its fingerprint as proof,
//! captured on disconnection only.

mod common;

use anyhow::Result;
use common::{TOKEN, World};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn activation_keeps_the_verified_bot_token() -> Result<()> {
    let w = World::start().await?;
    w.directory(w.a, 3).await?;
    let bot_user = w
        .sim
        .model(|m| m.team(&w.team).map(|t| t.bot_user.clone()))
        .expect("the team exists");
    let kept: Vec<(String, String, String, String, String)> = sqlx::query_as(
        "SELECT resource_kind, target, vendor_id, url_hash, captured_on
           FROM provider_registration WHERE connection_id = $1 AND state = 'adopted'",
    )
    .bind(w.a.connection_id)
    .fetch_all(&w.pool)
    .await?;
    let (target, vendor_id, proof) =
        slack_mirror::bot_token_resource(&w.team, &bot_user, TOKEN.as_bytes());
    assert_eq!(
        kept,
        vec![(
            "slack_bot_token".to_owned(),
            target,
            vendor_id,
            proof,
            "disconnect".to_owned()
        )]
    );
    Ok(())
}
