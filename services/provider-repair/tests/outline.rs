//! provider-repair against the Outline simulator over HTTP, with real Postgres and JetStream:
//! a subscription is removed only on the team's whole listing with our URL; another
//! workspace's subscription on the same team survives; each fault ends in its rule's status,
//! and only that attempt's receipt (or an admin) resolves.

mod support;

use anyhow::Result;
use lifecycle_core::connection::Transition;
use lifecycle_core::repair::FenceStatus;
use support::Stack;
use uuid::Uuid;
use vendor_sim::outline::{Fault, Model, OutlineFault, OutlineSim, methods};

const TOKEN: &str = "ol_api_provider_repair";

struct Outline {
    s: Stack,
    sim: OutlineSim,
    instance: Uuid,
}

impl Outline {
    async fn start() -> Result<Outline> {
        let mut model = Model::default();
        model.add_token(TOKEN);
        let sim = OutlineSim::start(model).await?;
        let s = Stack::start(&[format!("--outline-api-url={}", sim.base_url())]).await?;
        // No server of its own: the configured API base.
        let instance = s.instance("outline", None).await?;
        Ok(Outline { s, sim, instance })
    }

    /// An active Outline connection whose token is `token`, holding the subscription it
    /// registered at the team: (connection, subscription id).
    async fn subscribed(&self, token: &str) -> Result<(Uuid, String)> {
        let conn = self
            .s
            .connection("outline", self.instance, Some(token))
            .await?;
        let url = format!("https://hooks.example/webhooks/outline/{}", Uuid::now_v7());
        let sub = self.sim.model(|m| {
            m.create_subscription(
                &format!("forgesync {}", Uuid::now_v7()),
                &url,
                &["documents".to_owned()],
                Some("s3cret"),
            )
        })?;
        // The team, as auth.info names it (the remover lists the token's whole team).
        self.s
            .adopted(conn, outline_mirror::SUBSCRIPTION, "team", &url, &sub.id)
            .await?;
        Ok((conn, sub.id))
    }

    fn listed(&self) -> Vec<String> {
        self.sim
            .model(|m| m.subscriptions().map(|s| s.id.clone()).collect())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_removes_its_subscription_and_spares_another_workspaces() -> Result<()> {
    let o = Outline::start().await?;
    let (a, sub_a) = o.subscribed(TOKEN).await?;
    // Attack: a second workspace's subscription on the same team, listed by the same token.
    let (_, sub_b) = o.subscribed(TOKEN).await?;
    o.s.transition(a, Transition::Disconnect).await?;
    let fence =
        o.s.fence_when(a, |f| f.fence.status() == FenceStatus::Resolved)
            .await?;
    assert_eq!(fence.resource, format!("outline_subscription:{sub_a}"));
    assert_eq!(o.listed(), vec![sub_b], "only its own subscription is gone");
    assert!(
        store::repair::credential(o.s.pool(), fence.id)
            .await?
            .is_none()
    );
    o.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspension_captures_the_subscription_and_a_refused_token_needs_authorization() -> Result<()>
{
    let o = Outline::start().await?;
    // A token Outline answers 401.
    let (a, sub) = o.subscribed("ol_api_revoked").await?;
    o.s.transition(a, Transition::Suspend).await?;
    let fence =
        o.s.fence_when(a, |f| f.fence.status() == FenceStatus::NeedsAuthorization)
            .await?;
    assert!(!fence.fence.ever_dispatched());
    assert!(
        fence.next_attempt_at.is_some(),
        "it keeps retrying, backing off"
    );
    assert_eq!(o.listed(), vec![sub]);
    o.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_listing_proves_nothing_and_sends_nothing() -> Result<()> {
    let o = Outline::start().await?;
    let (a, sub) = o.subscribed(TOKEN).await?;
    o.sim.inject(Fault::always(
        methods::WEBHOOK_SUBSCRIPTIONS_LIST,
        OutlineFault::Status(502),
    ));
    o.s.transition(a, Transition::Disconnect).await?;
    let fence =
        o.s.fence_when(a, |f| {
            f.last_outcome
                .as_deref()
                .is_some_and(|o| o.contains("listed whole"))
        })
        .await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending);
    assert_eq!(fence.fence.stored().attempts, 0, "no permit taken");
    assert_eq!(o.sim.calls(methods::WEBHOOK_SUBSCRIPTIONS_DELETE), 0);
    assert_eq!(o.listed(), vec![sub]);
    o.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_applied_then_lost_awaits_an_admin() -> Result<()> {
    let o = Outline::start().await?;
    let (a, _) = o.subscribed(TOKEN).await?;
    // Outline deletes it, then the answer is lost (a proxy's 504).
    o.sim.inject(Fault::always(
        methods::WEBHOOK_SUBSCRIPTIONS_DELETE,
        OutlineFault::lost_with(504),
    ));
    o.s.transition(a, Transition::Disconnect).await?;
    let fence = o.s.fence_when(a, Stack::attempted).await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending, "{fence:?}");
    assert!(o.listed().is_empty(), "the delete landed");
    // The retry's whole listing lacks it, which proves nothing about the lost attempt.
    o.s.due_now(fence.id).await?;
    let fence =
        o.s.fence_when(a, |f| f.fence.status() == FenceStatus::AwaitingAdmin)
            .await?;
    assert_eq!(fence.next_attempt_at, None, "automatic polling stopped");
    assert_eq!(fence.fence.uncertain().collect::<Vec<_>>(), vec![0]);
    o.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_is_uncertain_and_a_later_receipt_settles_only_its_own_attempt() -> Result<()> {
    let o = Outline::start().await?;
    let (a, _) = o.subscribed(TOKEN).await?;
    // The first delete fails on Outline's side (nothing done); the second succeeds.
    o.sim.inject(Fault::nth(
        methods::WEBHOOK_SUBSCRIPTIONS_DELETE,
        1,
        OutlineFault::Status(500),
    ));
    o.s.transition(a, Transition::Disconnect).await?;
    let fence = o.s.fence_when(a, Stack::attempted).await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending, "{fence:?}");
    assert_eq!(o.listed().len(), 1);
    o.s.due_now(fence.id).await?;
    // Still listed with our URL: a second attempt is sent and receipted, but the first one's
    // fate stays unknown.
    let fence =
        o.s.fence_when(a, |f| f.fence.status() == FenceStatus::AwaitingAdmin)
            .await?;
    assert!(o.listed().is_empty());
    assert_eq!(fence.fence.stored().attempts, 2);
    assert_eq!(fence.fence.uncertain().collect::<Vec<_>>(), vec![0]);
    o.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_404_on_delete_is_no_receipt() -> Result<()> {
    let o = Outline::start().await?;
    let (a, sub) = o.subscribed(TOKEN).await?;
    // The subscription is there, but the delete answers 404 (hidden from this request).
    o.sim.inject(Fault::always(
        methods::WEBHOOK_SUBSCRIPTIONS_DELETE,
        OutlineFault::Status(404),
    ));
    o.s.transition(a, Transition::Disconnect).await?;
    let fence =
        o.s.fence_when(a, |f| {
            f.fence.stored().attempts > 0 && f.last_outcome.as_deref() != Some("dispatched")
        })
        .await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending, "{fence:?}");
    assert!(
        !fence.fence.ever_dispatched(),
        "a refused request can never land late"
    );
    assert!(fence.next_attempt_at.is_some());
    assert_eq!(o.listed(), vec![sub]);
    o.s.stop().await
}
