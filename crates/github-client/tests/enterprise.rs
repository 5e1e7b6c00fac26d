//! A GitHub Enterprise Server named by its server URL: the client reaches its REST API under
//! `/api/v3` and GraphQL at `/api/graphql`, against a simulator that serves nothing at the root.

use std::sync::Arc;

use github_client::{AppCredentials, Auth, ClientConfig, GithubApp, GithubClient};
use vendor_http::egress::Egress;
use vendor_sim::github::{GithubSim, Scenario, generate, ops};

const PRIVATE: &[u8] = include_bytes!("fixtures/test-app-key.pem");

#[tokio::test]
async fn an_enterprise_server_url_reaches_its_rest_and_graphql_apis() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let generated = generate(&Scenario {
        repositories: 1,
        items: 10,
        ..Scenario::default()
    });
    let mut model = generated.model;
    model.set_app_id("4242");
    let sim = GithubSim::start_enterprise(model).await.unwrap();

    let config = ClientConfig::for_server(Some(sim.base_url())).with_egress(Egress::unrestricted());
    assert_eq!(config.base_url, sim.rest_url());
    assert_eq!(config.graphql_url, sim.graphql_url());
    let app = GithubApp::new(&config, AppCredentials::from_pem(4242, PRIVATE).unwrap()).unwrap();
    let client = GithubClient::new(
        &config,
        Auth::Installation {
            app: Arc::new(app),
            installation_id: generated.installation,
        },
    )
    .unwrap();
    // REST: the token exchange and the installation's repositories.
    let repos = client.installation_repositories(1).await.unwrap();
    assert_eq!(repos.repositories.len(), 1);
    assert_eq!(sim.calls(ops::CREATE_INSTALLATION_ACCESS_TOKEN), 1);
    // GraphQL.
    let repo = &repos.repositories[0];
    let page = client
        .issues_page(&repo.owner.login, &repo.name, 100, None)
        .await
        .unwrap();
    assert_eq!(
        page.repository.database_id.map(i64::from),
        i64::try_from(repo.id).ok()
    );
    assert_eq!(sim.calls(ops::REPOSITORY_ISSUES), 1);

    // The server URL taken as an api.github.com-style base reaches nothing there.
    let root = GithubClient::new(
        &ClientConfig::new(sim.base_url()).with_egress(Egress::unrestricted()),
        Auth::personal_token("x"),
    )
    .unwrap();
    let err = root
        .issues_page(&repo.owner.login, &repo.name, 100, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, github_client::Error::Http { status: 404, .. }),
        "{err}"
    );
    assert_eq!(sim.calls(ops::REPOSITORY_ISSUES), 1);
}
