//! provider-repair against the Slack simulator over HTTP, with real Postgres and JetStream: a
//! bot token is captured only by a disconnection and revoked only after `auth.test` names its
//! team and bot user; another connection holding the same bot user keeps it from revocation;
//! each fault ends in its rule's status, and only that attempt's receipt (or an admin)
//! resolves.

mod support;

use anyhow::Result;
use lifecycle_core::connection::Transition;
use lifecycle_core::repair::FenceStatus;
use store::repair::{Kept, KeptResource};
use support::Stack;
use uuid::Uuid;
use vendor_sim::slack::{Fault, Model, SlackFault, SlackSim, methods};

struct Slack {
    s: Stack,
    sim: SlackSim,
    instance: Uuid,
    team: String,
    bot_user: String,
}

impl Slack {
    async fn start() -> Result<Slack> {
        let mut model = Model::default();
        let team = model.add_team("acme");
        let bot_user = model.team(&team).expect("added").bot_user.clone();
        let sim = SlackSim::start(model).await?;
        let s = Stack::start(&[format!("--slack-api-url={}", sim.api_url())]).await?;
        let instance = s.instance("slack", None).await?;
        Ok(Slack {
            s,
            sim,
            instance,
            team,
            bot_user,
        })
    }

    /// An active Slack connection whose bot token is `token` (one Slack accepts when
    /// `accepted`), kept as slack-ingest keeps it once stored.
    async fn connected(&self, token: &str, accepted: bool) -> Result<Uuid> {
        if accepted {
            self.sim.model(|m| m.add_token(token, &self.team));
        }
        let conn = self
            .s
            .connection("slack", self.instance, Some(token))
            .await?;
        let (target, vendor_id, proof) =
            slack_mirror::bot_token_resource(&self.team, &self.bot_user, token.as_bytes());
        let kept = self
            .s
            .keep(&KeptResource {
                connection_id: conn,
                kind: slack_mirror::BOT_TOKEN,
                target: &target,
                vendor_id: &vendor_id,
                proof: &proof,
            })
            .await?;
        assert!(matches!(kept, Kept::Recorded(_)), "{kept:?}");
        Ok(conn)
    }

    /// Whether Slack still accepts `token`.
    async fn live(&self, token: &str) -> Result<bool> {
        let settings = slack_client::Settings {
            base_url: self.sim.api_url(),
            ..slack_client::Settings::default()
        };
        let client = slack_client::SlackClient::new(&settings, token)?;
        Ok(client.auth_test().await.is_ok())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_disconnection_revokes_the_bot_token() -> Result<()> {
    let sl = Slack::start().await?;
    let a = sl.connected("xoxb-a", true).await?;
    // A suspended holder keeps its bot identity: nothing is captured, neither by the
    // transition nor by the schedule's lost-wake scan (it runs every second).
    sl.s.transition(a, Transition::Suspend).await?;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert!(sl.s.fences(a).await?.is_empty());
    sl.s.transition(a, Transition::Disconnect).await?;
    let fence =
        sl.s.fence_when(a, |f| f.fence.status() == FenceStatus::Resolved)
            .await?;
    assert!(
        fence
            .resource
            .starts_with(&format!("slack_bot_token:{}:{}:", sl.team, sl.bot_user))
    );
    assert!(!sl.live("xoxb-a").await?, "the token is revoked");
    assert_eq!(sl.sim.calls(methods::AUTH_REVOKE), 1);
    // The token is gone from the connection and from the reference.
    assert!(
        store::repair::credential(sl.s.pool(), fence.id)
            .await?
            .is_none()
    );
    // A fenced identity is never kept again; a reconnection's new token is a fresh one.
    let b =
        sl.s.connection("slack", sl.instance, Some("xoxb-a"))
            .await?;
    let (target, vendor_id, proof) =
        slack_mirror::bot_token_resource(&sl.team, &sl.bot_user, b"xoxb-a");
    let again = KeptResource {
        connection_id: b,
        kind: slack_mirror::BOT_TOKEN,
        target: &target,
        vendor_id: &vendor_id,
        proof: &proof,
    };
    assert_eq!(sl.s.keep(&again).await?, Kept::Fenced);
    sl.connected("xoxb-fresh", true).await?;
    sl.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_connection_of_the_same_bot_user_keeps_it_from_revocation() -> Result<()> {
    let sl = Slack::start().await?;
    let a = sl.connected("xoxb-a", true).await?;
    // Attack: a second workspace's connection holds a token of the same team and bot user.
    sl.connected("xoxb-b", true).await?;
    sl.s.transition(a, Transition::Disconnect).await?;
    let fence =
        sl.s.fence_when(a, |f| {
            f.last_outcome.as_deref() == Some("held by an active connection")
        })
        .await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending);
    assert_eq!(fence.fence.stored().attempts, 0, "no permit taken");
    assert_eq!(sl.sim.calls(methods::AUTH_REVOKE), 0);
    assert!(sl.live("xoxb-a").await? && sl.live("xoxb-b").await?);
    sl.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_needs_authorization() -> Result<()> {
    let sl = Slack::start().await?;
    // Slack answers invalid_auth for it.
    let a = sl.connected("xoxb-unknown", false).await?;
    sl.s.transition(a, Transition::Disconnect).await?;
    let fence =
        sl.s.fence_when(a, |f| f.fence.status() == FenceStatus::NeedsAuthorization)
            .await?;
    assert!(!fence.fence.ever_dispatched());
    assert!(fence.next_attempt_at.is_some());
    assert_eq!(sl.sim.calls(methods::AUTH_REVOKE), 0);
    sl.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_applied_then_lost_awaits_an_admin() -> Result<()> {
    let sl = Slack::start().await?;
    let a = sl.connected("xoxb-a", true).await?;
    // Slack revokes it, then the answer is lost (a 504).
    sl.sim
        .inject(Fault::always(methods::AUTH_REVOKE, SlackFault::Lost(504)));
    sl.s.transition(a, Transition::Disconnect).await?;
    let fence = sl.s.fence_when(a, Stack::attempted).await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending, "{fence:?}");
    assert!(!sl.live("xoxb-a").await?, "the revocation landed");
    // The retry's auth.test says token_revoked: absence, which proves nothing about the lost
    // attempt.
    sl.s.due_now(fence.id).await?;
    let fence =
        sl.s.fence_when(a, |f| f.fence.status() == FenceStatus::AwaitingAdmin)
            .await?;
    assert_eq!(fence.next_attempt_at, None);
    assert_eq!(fence.fence.uncertain().collect::<Vec<_>>(), vec![0]);
    sl.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_is_uncertain_and_a_later_receipt_settles_only_its_own_attempt() -> Result<()> {
    let sl = Slack::start().await?;
    let a = sl.connected("xoxb-a", true).await?;
    // The first revocation fails at Slack's edge (nothing done); the second succeeds.
    sl.sim
        .inject(Fault::nth(methods::AUTH_REVOKE, 1, SlackFault::Status(503)));
    sl.s.transition(a, Transition::Disconnect).await?;
    let fence = sl.s.fence_when(a, Stack::attempted).await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending, "{fence:?}");
    assert!(sl.live("xoxb-a").await?);
    sl.s.due_now(fence.id).await?;
    let fence =
        sl.s.fence_when(a, |f| f.fence.status() == FenceStatus::AwaitingAdmin)
            .await?;
    assert!(!sl.live("xoxb-a").await?);
    assert_eq!(fence.fence.stored().attempts, 2);
    assert_eq!(fence.fence.uncertain().collect::<Vec<_>>(), vec![0]);
    sl.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_before_any_dispatch_resolves() -> Result<()> {
    let sl = Slack::start().await?;
    let a = sl.connected("xoxb-a", true).await?;
    // The customer uninstalled the app: Slack revoked the token itself.
    sl.sim.model(|m| m.revoke_token("xoxb-a"));
    sl.s.transition(a, Transition::Disconnect).await?;
    let fence =
        sl.s.fence_when(a, |f| f.fence.status() == FenceStatus::Resolved)
            .await?;
    assert_eq!(fence.fence.stored().attempts, 0);
    assert_eq!(sl.sim.calls(methods::AUTH_REVOKE), 0);
    sl.s.stop().await
}
