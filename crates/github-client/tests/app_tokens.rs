//! The App's installation tokens against the simulated GitHub: renewed before they expire, and
//! the token exchange (an App JWT call) admitted by the App's budget like any other call.

use std::time::Duration;

use github_client::{AppCredentials, Budget, ClientConfig, Error, GithubApp, TOKEN_REFRESH_MARGIN};
use vendor_http::egress::Egress;
use vendor_sim::github::{GithubSim, RateLimitBudget, RateLimitResource, Scenario, generate, ops};

const PRIVATE: &[u8] = include_bytes!("fixtures/test-app-key.pem");

/// A simulator with one installation, and that installation's id.
async fn sim(token_lifetime: Duration) -> (GithubSim, u64) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let generated = generate(&Scenario {
        repositories: 1,
        items: 2,
        ..Scenario::default()
    });
    let mut model = generated.model;
    model.set_app_id("4242");
    model.set_token_lifetime(token_lifetime);
    (
        GithubSim::start(model).await.unwrap(),
        generated.installation,
    )
}

fn app(sim: &GithubSim) -> GithubApp {
    GithubApp::new(
        &ClientConfig::new(sim.base_url()).with_egress(Egress::unrestricted()),
        AppCredentials::from_pem(4242, PRIVATE).unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_token_near_expiry_is_refreshed_before_it_expires() {
    // Fresh for two seconds beyond the refresh margin.
    let margin = Duration::try_from(TOKEN_REFRESH_MARGIN).unwrap();
    let (sim, installation) = sim(margin + Duration::from_secs(2)).await;
    let app = app(&sim);
    let first = app.installation_token(installation).await.unwrap();
    let again = app.installation_token(installation).await.unwrap();
    assert_eq!(first, again, "a fresh token is reused");
    assert_eq!(sim.calls(ops::CREATE_INSTALLATION_ACCESS_TOKEN), 1);

    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let renewed = app.installation_token(installation).await.unwrap();
    assert_ne!(renewed.token, first.token, "renewed inside the margin");
    assert!(
        first.expires_at > time::OffsetDateTime::now_utc(),
        "the old token had not expired yet"
    );
    assert_eq!(sim.calls(ops::CREATE_INSTALLATION_ACCESS_TOKEN), 2);
}

#[tokio::test]
async fn the_token_exchange_counts_against_the_app_budget() {
    // Tokens inside the refresh margin: every ask is an exchange.
    let (sim, installation) = sim(Duration::from_secs(60)).await;
    let reset_at = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    sim.model(|m| {
        m.set_rate_limit(
            RateLimitResource::Rest,
            RateLimitBudget {
                limit: 5_000,
                remaining: 11,
                reset_at,
            },
        )
    });
    let app = app(&sim).with_budget(Budget::keep(9));
    app.installation_token(installation).await.unwrap();
    assert_eq!(app.rate_limit().map(|r| r.remaining), Some(10));
    app.installation_token(installation).await.unwrap();
    assert_eq!(app.rate_limit().map(|r| r.remaining), Some(9));
    // Another exchange would leave less than the floor: refused, and nothing is sent.
    let err = app.installation_token(installation).await.unwrap_err();
    assert!(
        matches!(&err, Error::BudgetExhausted(stop) if stop.remaining == 9 && stop.min_remaining == 9),
        "{err}"
    );
    assert_eq!(sim.calls(ops::CREATE_INSTALLATION_ACCESS_TOKEN), 2);
}

#[tokio::test]
async fn a_spent_app_pool_stops_token_exchanges_until_it_resets() {
    let (sim, installation) = sim(Duration::from_secs(60)).await;
    let reset_at = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    sim.model(|m| {
        m.set_rate_limit(
            RateLimitResource::Rest,
            RateLimitBudget {
                limit: 5_000,
                remaining: 0,
                reset_at,
            },
        )
    });
    let app = app(&sim);
    let err = app.installation_token(installation).await.unwrap_err();
    assert!(matches!(err, Error::RateLimited { .. }), "{err}");
    // GitHub said the pool is spent until its reset: the next exchange is not sent.
    let err = app.installation_token(installation).await.unwrap_err();
    assert!(matches!(err, Error::BudgetExhausted(_)), "{err}");
    assert_eq!(sim.calls(ops::CREATE_INSTALLATION_ACCESS_TOKEN), 1);
}
