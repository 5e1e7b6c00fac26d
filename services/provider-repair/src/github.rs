//! GitHub App installations: read as the App (`GET /app/installations/{id}`, its JWT), then
//! `DELETE /app/installations/{id}` once, never retried inside the attempt. The credential is
//! the App's, from the deployment's configuration, not a connection's secret: a repair of this
//! kind needs no sealed credential. Only `204` is a receipt; a `202` leaves the attempt
//! uncertain.

use std::time::Duration;

use github_client::{
    AppCredentials, ClientConfig, Error as GithubError, GithubApp, InstallationDeleted,
};
use lifecycle_core::repair::{DispatchOutcome, Ownership};
use store::registration::ResourceKind;
use store::repair::Repair;

use crate::{Inspected, Remover};

/// Uninstalls the App from the installations of disconnected GitHub connections.
pub struct AppInstallations {
    /// Our App (`FORGESYNC_GITHUB_APP_ID`, `FORGESYNC_GITHUB_APP_PRIVATE_KEY`); `None`: not
    /// configured, every repair waits for it.
    pub app: Option<AppCredentials>,
    pub egress: vendor_http::egress::Egress,
    pub request_timeout: Duration,
}

impl AppInstallations {
    /// The App's client for the repair's server, or why there is none. The App must be the one
    /// the installation was captured for (its proof): another App's read would answer 404 for
    /// an installation it cannot see, which proves nothing.
    fn app(&self, repair: &Repair) -> Result<GithubApp, Inspected> {
        let refused = |detail: String| Inspected {
            ownership: Ownership::CredentialRefused,
            detail,
        };
        let Some(credentials) = &self.app else {
            return Err(refused("no GitHub App is configured".into()));
        };
        if repair.url_hash.as_deref() != Some(credentials.app_id().to_string().as_str()) {
            return Err(refused(format!(
                "the installation belongs to App {}, not the configured App {}",
                repair.url_hash.as_deref().unwrap_or("?"),
                credentials.app_id()
            )));
        }
        let server = (!repair.instance.is_empty()).then_some(repair.instance.as_str());
        let mut config = ClientConfig::for_server(server).with_egress(self.egress.clone());
        config.timeout = self.request_timeout;
        config.retry = crate::one_attempt();
        GithubApp::new(&config, credentials.clone()).map_err(|e| Inspected {
            ownership: Ownership::Unproven,
            detail: e.to_string(),
        })
    }
}

fn installation_id(repair: &Repair) -> Option<u64> {
    repair.vendor_id.parse().ok()
}

#[async_trait::async_trait]
impl Remover for AppInstallations {
    fn kind(&self) -> ResourceKind {
        scm_mirror::github::APP_INSTALLATION
    }

    fn needs_credential(&self) -> bool {
        // The App's own JWT removes it.
        false
    }

    async fn inspect(&self, repair: &Repair, _: &[u8]) -> Inspected {
        let Some(id) = installation_id(repair) else {
            return Inspected {
                ownership: Ownership::Unproven,
                detail: "the stored installation id is not a number".into(),
            };
        };
        let app = match self.app(repair) {
            Ok(app) => app,
            Err(inspected) => return inspected,
        };
        match app.installation(id).await {
            Ok(Some(i))
                if i.id == id && i.app_id.is_none_or(|a| a == app.credentials().app_id()) =>
            {
                Inspected {
                    ownership: Ownership::Ours,
                    detail: "the App reads its installation".into(),
                }
            }
            Ok(Some(_)) => Inspected {
                ownership: Ownership::ForeignOwner,
                detail: "the installation read belongs to another App".into(),
            },
            // App-scoped not-found: the App has no installation of this id.
            Ok(None) => Inspected {
                ownership: Ownership::GithubAppNotFound,
                detail: "the App has no installation of this id".into(),
            },
            Err(e @ (GithubError::Auth { .. } | GithubError::Forbidden { .. })) => Inspected {
                ownership: Ownership::CredentialRefused,
                detail: format!("GitHub refused the App's credentials: {e}"),
            },
            Err(e) => Inspected {
                ownership: Ownership::Unproven,
                detail: format!("the installation could not be read: {e}"),
            },
        }
    }

    async fn remove(&self, repair: &Repair, _: &[u8]) -> (DispatchOutcome, String) {
        let Some(id) = installation_id(repair) else {
            return (
                DispatchOutcome::Refused,
                "the stored installation id is not a number".into(),
            );
        };
        let app = match self.app(repair) {
            Ok(app) => app,
            Err(inspected) => return (DispatchOutcome::Refused, inspected.detail),
        };
        match app.delete_installation(id).await {
            Ok(InstallationDeleted::Deleted) => {
                (DispatchOutcome::TerminalReceipt, "deleted".into())
            }
            // Accepted is not done.
            Ok(InstallationDeleted::Accepted(status)) => (
                DispatchOutcome::of_response(Some(status)),
                format!("GitHub answered {status}"),
            ),
            // A 404 is no receipt of this attempt.
            Ok(InstallationDeleted::NotFound) => (
                DispatchOutcome::of_response(Some(404)),
                "GitHub answered 404".into(),
            ),
            Err(e) => {
                let outcome = match &e {
                    GithubError::Auth { .. } | GithubError::Forbidden { .. } => {
                        DispatchOutcome::Unauthorized
                    }
                    GithubError::Http { status, .. } => DispatchOutcome::of_response(Some(*status)),
                    GithubError::RateLimited { .. } => DispatchOutcome::of_response(Some(429)),
                    // Nothing was sent, or the answer refused it.
                    GithubError::BudgetExhausted(_)
                    | GithubError::Unreachable(_)
                    | GithubError::Redirected { .. } => DispatchOutcome::Refused,
                    // No answer, or one we could not read: it may have landed.
                    _ => DispatchOutcome::Uncertain,
                };
                (outcome, e.to_string())
            }
        }
    }
}
