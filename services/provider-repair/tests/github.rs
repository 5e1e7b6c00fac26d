//! provider-repair against the GitHub simulator over HTTP, with real Postgres and JetStream: an
//! App installation is captured only by a disconnection and uninstalled as the configured App
//! (no connection credential); each fault ends in its rule's status (a 202 is no receipt), and
//! only that attempt's receipt (or an admin) resolves.

mod support;

use std::time::Duration;

use anyhow::Result;
use lifecycle_core::connection::Transition;
use lifecycle_core::repair::FenceStatus;
use store::repair::{Kept, KeptResource};
use support::Stack;
use uuid::Uuid;
use vendor_sim::github::{Fault, FaultKind, GithubSim, Model, ops};

const APP_ID: u64 = 4242;
const PRIVATE: &str = include_str!("fixtures/test-app-key.pem");

struct Github {
    s: Stack,
    sim: GithubSim,
    instance: Uuid,
}

impl Github {
    async fn start() -> Result<Github> {
        Github::start_as(APP_ID).await
    }

    /// provider-repair configured with App `app_id`; the simulator serves App [`APP_ID`].
    async fn start_as(app_id: u64) -> Result<Github> {
        let mut model = Model::default();
        model.set_app_id(APP_ID.to_string());
        let sim = GithubSim::start(model).await?;
        let s = Stack::start(&[
            format!("--github-app-id={app_id}"),
            format!("--github-app-private-key={PRIVATE}"),
        ])
        .await?;
        let instance = s.instance("github", Some(sim.base_url())).await?;
        Ok(Github { s, sim, instance })
    }

    /// An active GitHub connection bound to a new installation of the App, kept as the
    /// connection binds it (no secret: the App's credentials remove it): (connection, id).
    async fn installed(&self) -> Result<(Uuid, u64)> {
        let installation = self.sim.model(|m| m.add_installation("acme"));
        let conn = self.s.connection("github", self.instance, None).await?;
        let id = installation.to_string();
        let kept = self
            .s
            .keep(&KeptResource {
                connection_id: conn,
                kind: scm_mirror::github::APP_INSTALLATION,
                target: &id,
                vendor_id: &id,
                proof: &APP_ID.to_string(),
            })
            .await?;
        assert!(matches!(kept, Kept::Recorded(_)), "{kept:?}");
        Ok((conn, installation))
    }

    fn installed_ids(&self) -> Vec<u64> {
        self.sim
            .model(|m| m.installations().map(|i| i.id).collect())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_disconnection_uninstalls_and_a_204_resolves() -> Result<()> {
    let g = Github::start().await?;
    let (a, installation) = g.installed().await?;
    let (_, other) = g.installed().await?;
    // A suspended holder keeps its installation: nothing is captured.
    g.s.transition(a, Transition::Suspend).await?;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(g.s.fences(a).await?.is_empty());
    g.s.transition(a, Transition::Disconnect).await?;
    let fence =
        g.s.fence_when(a, |f| f.fence.status() == FenceStatus::Resolved)
            .await?;
    assert_eq!(
        fence.resource,
        format!("github_app_installation:{installation}")
    );
    assert_eq!(
        g.installed_ids(),
        vec![other],
        "only its own installation is gone"
    );
    g.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_202_is_no_receipt_and_awaits_an_admin() -> Result<()> {
    let g = Github::start().await?;
    let (a, _) = g.installed().await?;
    g.sim
        .inject(Fault::always(ops::DELETE_INSTALLATION, FaultKind::Accepted));
    g.s.transition(a, Transition::Disconnect).await?;
    let fence = g.s.fence_when(a, Stack::attempted).await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending, "{fence:?}");
    // The retry's App-scoped 404 after a possible dispatch: an admin must confirm.
    g.s.due_now(fence.id).await?;
    let fence =
        g.s.fence_when(a, |f| f.fence.status() == FenceStatus::AwaitingAdmin)
            .await?;
    assert_eq!(fence.next_attempt_at, None);
    assert_eq!(fence.fence.uncertain().collect::<Vec<_>>(), vec![0]);
    // Only an admin's confirmation of that very attempt resolves it.
    let wrong = store::repair_admin::settle(
        g.s.pool(),
        fence.id,
        store::repair_admin::AdminAction::Confirm { attempt: 1 },
        "operator",
        "checked the App's settings page",
    )
    .await;
    assert!(wrong.is_err(), "attempt 1 was never uncertain");
    let settled = store::repair_admin::settle(
        g.s.pool(),
        fence.id,
        store::repair_admin::AdminAction::Confirm { attempt: 0 },
        "operator",
        "the App is no longer installed on acme",
    )
    .await?;
    assert_eq!(settled.fence.status(), FenceStatus::Resolved);
    let state: String =
        sqlx::query_scalar("SELECT state FROM provider_registration WHERE connection_id = $1")
            .bind(a)
            .fetch_one(g.s.pool())
            .await?;
    assert_eq!(state, "removed");
    g.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uninstall_applied_then_timed_out_awaits_an_admin() -> Result<()> {
    let g = Github::start().await?;
    let (a, _) = g.installed().await?;
    g.sim.inject(Fault::always(
        ops::DELETE_INSTALLATION,
        FaultKind::AnswerLate(Duration::from_secs(3)),
    ));
    g.s.transition(a, Transition::Disconnect).await?;
    let fence = g.s.fence_when(a, Stack::attempted).await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending, "{fence:?}");
    assert!(g.installed_ids().is_empty(), "the uninstall landed");
    g.s.due_now(fence.id).await?;
    let fence =
        g.s.fence_when(a, |f| f.fence.status() == FenceStatus::AwaitingAdmin)
            .await?;
    assert_eq!(fence.fence.uncertain().collect::<Vec<_>>(), vec![0]);
    g.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_404_on_delete_is_no_receipt_and_a_5xx_is_uncertain() -> Result<()> {
    let g = Github::start().await?;
    let (a, installation) = g.installed().await?;
    // The first DELETE answers 404 though the installation is there (nothing done), the
    // second 502 (nothing done, unknown to us), the third 204.
    g.sim.inject(Fault::nth(
        ops::DELETE_INSTALLATION,
        1,
        FaultKind::Status(404),
    ));
    g.sim.inject(Fault::nth(
        ops::DELETE_INSTALLATION,
        2,
        FaultKind::Status(502),
    ));
    g.s.transition(a, Transition::Disconnect).await?;
    let fence =
        g.s.fence_when(a, |f| {
            f.fence.stored().attempts == 1 && f.last_outcome.as_deref() != Some("dispatched")
        })
        .await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending, "{fence:?}");
    assert!(
        !fence.fence.ever_dispatched(),
        "a refused request never lands late"
    );
    assert_eq!(g.installed_ids(), vec![installation]);
    g.s.due_now(fence.id).await?;
    let fence = g.s.fence_when(a, Stack::attempted).await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending, "{fence:?}");
    assert_eq!(fence.fence.uncertain().collect::<Vec<_>>(), vec![1]);
    g.s.due_now(fence.id).await?;
    // The third attempt's 204 is its own receipt; the second's fate stays unknown.
    let fence =
        g.s.fence_when(a, |f| f.fence.status() == FenceStatus::AwaitingAdmin)
            .await?;
    assert!(g.installed_ids().is_empty());
    assert_eq!(fence.fence.stored().attempts, 3);
    assert_eq!(fence.fence.uncertain().collect::<Vec<_>>(), vec![1]);
    g.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_app_credential_needs_authorization() -> Result<()> {
    let g = Github::start().await?;
    let (a, installation) = g.installed().await?;
    g.sim.inject(Fault::always(
        ops::GET_INSTALLATION,
        FaultKind::BadCredentials,
    ));
    g.s.transition(a, Transition::Disconnect).await?;
    let fence =
        g.s.fence_when(a, |f| f.fence.status() == FenceStatus::NeedsAuthorization)
            .await?;
    assert_eq!(fence.fence.stored().attempts, 0);
    assert_eq!(g.installed_ids(), vec![installation]);
    g.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_apps_credentials_prove_nothing() -> Result<()> {
    // Configured with another App: its 404 would not be App-scoped for ours.
    let g = Github::start_as(7).await?;
    let (a, installation) = g.installed().await?;
    g.s.transition(a, Transition::Disconnect).await?;
    let fence =
        g.s.fence_when(a, |f| f.fence.status() == FenceStatus::NeedsAuthorization)
            .await?;
    assert_eq!(fence.fence.stored().attempts, 0);
    assert_eq!(g.sim.calls(ops::GET_INSTALLATION), 0);
    assert_eq!(g.installed_ids(), vec![installation]);
    g.s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_scoped_404_before_any_dispatch_resolves() -> Result<()> {
    let g = Github::start().await?;
    let (a, installation) = g.installed().await?;
    // The customer uninstalled the App themselves.
    assert!(g.sim.model(|m| m.remove_installation(installation)));
    g.s.transition(a, Transition::Disconnect).await?;
    let fence =
        g.s.fence_when(a, |f| f.fence.status() == FenceStatus::Resolved)
            .await?;
    assert_eq!(fence.fence.stored().attempts, 0);
    assert_eq!(g.sim.calls(ops::DELETE_INSTALLATION), 0);
    g.s.stop().await
}
