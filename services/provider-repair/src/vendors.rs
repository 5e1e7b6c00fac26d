//! Where the removers of Outline subscriptions, Slack bot tokens and GitHub App installations
//! reach their vendors: the deployment's API bases and our GitHub App.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::{Remover, github, outline, slack};

/// The vendors' API bases and our GitHub App, as the deployment configures them.
#[derive(Clone, clap::Args)]
pub struct VendorArgs {
    /// Outline's root, for a repair whose provider instance names no server.
    #[arg(
        long = "outline-api-url",
        env = "FORGESYNC_OUTLINE_API_URL",
        value_name = "FORGESYNC_OUTLINE_API_URL",
        default_value = "https://app.getoutline.com"
    )]
    pub outline_api_url: String,

    /// Slack's Web API base, for a repair whose provider instance names none.
    #[arg(
        long = "slack-api-url",
        env = "FORGESYNC_SLACK_API_URL",
        value_name = "FORGESYNC_SLACK_API_URL",
        default_value = "https://slack.com/api/"
    )]
    pub slack_api_url: String,

    /// Our GitHub App's id: its installations are uninstalled as the App.
    #[arg(
        long = "github-app-id",
        env = "FORGESYNC_GITHUB_APP_ID",
        value_name = "FORGESYNC_GITHUB_APP_ID"
    )]
    pub github_app_id: Option<u64>,

    /// Our GitHub App's private key (PEM). Without it (or the id) GitHub installations wait
    /// in `needs_authorization`.
    #[arg(
        long = "github-app-private-key",
        env = "FORGESYNC_GITHUB_APP_PRIVATE_KEY",
        value_name = "FORGESYNC_GITHUB_APP_PRIVATE_KEY",
        hide_env_values = true
    )]
    pub github_app_private_key: Option<String>,
}

impl std::fmt::Debug for VendorArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the private key.
        f.debug_struct("VendorArgs")
            .field("outline_api_url", &self.outline_api_url)
            .field("slack_api_url", &self.slack_api_url)
            .field("github_app_id", &self.github_app_id)
            .finish_non_exhaustive()
    }
}

impl VendorArgs {
    /// The removers of Outline subscriptions, Slack bot tokens and GitHub App installations.
    pub fn removers(
        &self,
        egress: &vendor_http::egress::Egress,
        request_timeout: Duration,
    ) -> anyhow::Result<Vec<Arc<dyn Remover>>> {
        let app = match (self.github_app_id, &self.github_app_private_key) {
            (Some(id), Some(pem)) => Some(
                github_client::AppCredentials::from_pem(id, pem.as_bytes())
                    .context("FORGESYNC_GITHUB_APP_PRIVATE_KEY")?,
            ),
            _ => None,
        };
        Ok(vec![
            Arc::new(outline::Subscriptions {
                api_url: self.outline_api_url.clone(),
                egress: egress.clone(),
                request_timeout,
                page_cap: outline::PAGE_CAP,
            }),
            Arc::new(slack::BotTokens {
                api_url: self.slack_api_url.clone(),
                request_timeout,
            }),
            Arc::new(github::AppInstallations {
                app,
                egress: egress.clone(),
                request_timeout,
            }),
        ])
    }
}
