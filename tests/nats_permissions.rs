//! Every service as its own NATS user (issue 28): control-api, ingress, github-sync, gitlab-sync,
//! slack-ingest, outline-sync, the eraser and provider-repair run against a nats-server of the test's own that enforces `bus::permissions`,
//! each connecting with its own user and password in its NATS_URL. A GitHub App connection is
//! activated and mirrored, a signed delivery travels through ingress to github-sync, and the
//! workspace's purge is erased from every stream: a permission too narrow for any of it stops
//! the flow (or the service, whose consumers end), and the test with it.

use anyhow::Result;
use bus::Namespace;
use bus::permissions::{self, Identity};
use control_api::Role;
use forgesync_e2e::{APP_KEY, eventually, send_json};
use serde_json::{Value, json};
use testkit::{NatsSetup, OwnNats, TestDb};
use vendor_sim::github::webhook::{self, Delivery};
use vendor_sim::github::{GithubSim, NewIssue, Scenario, generate};

const HOOK_ID: u64 = 1;
const SECRET: &str = "nats-permissions-secret-0123";

fn password(identity: Identity) -> String {
    format!("{}-password", identity.user())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_service_does_its_work_as_its_own_nats_user() -> Result<()> {
    runtime::install_crypto_provider();
    let nats = OwnNats::start(&NatsSetup {
        config: permissions::authorization(&Namespace::root(), |i| format!("\"{}\"", password(i))),
        ..NatsSetup::jetstream()?
    })?;
    let db = TestDb::new().await?;
    let common = |identity: Identity| {
        let url = format!(
            "nats://{}:{}@127.0.0.1:{}",
            identity.user(),
            password(identity),
            nats.port()
        );
        testkit::common_args(&db.url, &url, None)
    };
    let generated = generate(&Scenario {
        repositories: 1,
        items: 2,
        ..Scenario::default()
    });
    let mut model = generated.model;
    model.set_app_id("4242");
    let sim = GithubSim::start(model).await?;

    let control = testkit::spawn(testkit::control_api_config(common(Identity::ControlApi))).await?;
    let ingress = testkit::spawn(testkit::ingress_config(common(Identity::Ingress))).await?;
    let github = testkit::spawn(testkit::github_sync_config(common(Identity::GithubSync))).await?;
    let gitlab = testkit::spawn(testkit::gitlab_sync_config(
        common(Identity::GitlabSync),
        None,
    ))
    .await?;
    let slack_sim = vendor_sim::slack::SlackSim::start(vendor_sim::slack::Model::default()).await?;
    let slack = testkit::spawn(testkit::slack_ingest_config(
        common(Identity::SlackIngest),
        &slack_sim.api_url(),
    ))
    .await?;
    let outline_sim =
        vendor_sim::outline::OutlineSim::start(vendor_sim::outline::Model::new("acme")).await?;
    let outline = testkit::spawn(testkit::config::<outline_sync::Config>(
        common(Identity::OutlineSync),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            format!("--outline-api-url={}", outline_sim.base_url()),
            "--reconcile-cron=off".to_owned(),
        ],
    )?)
    .await?;
    let eraser = testkit::spawn(testkit::eraser_config(common(Identity::Eraser))).await?;
    let repair = testkit::spawn(testkit::config::<provider_repair::Config>(
        common(Identity::ProviderRepair),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            "--provider-repair-cron=off".to_owned(),
        ],
    )?)
    .await?;
    let token = testkit::token(&testkit::control_api_keys()?, Role::Admin, None)?;
    let http = reqwest::Client::new();
    let post = |path: String, body: Value| {
        let request = http
            .post(format!("{}{path}", control.url()))
            .bearer_auth(&token)
            .json(&body);
        send_json(request)
    };
    let pool = db.db.get_postgres_connection_pool().clone();
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move { anyhow::Ok(sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool).await?) }
    };

    // control-api announces the activation; github-sync queues and runs INITIAL.
    let (_, ws) = post("/workspaces".into(), json!({"name": "acme"})).await?;
    let ws = ws["id"].as_str().expect("workspace created").to_owned();
    let (status, conn) = post(
        format!("/workspaces/{ws}/connections"),
        json!({
            "kind": "github",
            "server_url": sim.base_url(),
            "settings": { "auth": "app", "app_id": 4242, "installation_id": generated.installation },
            "secrets": { "private_key": String::from_utf8(APP_KEY.to_vec())? },
        }),
    )
    .await?;
    assert_eq!(status, 201, "{conn}");
    let conn = conn["id"].as_str().expect("connection created").to_owned();
    let (status, body) = post(
        format!("/workspaces/{ws}/connections/{conn}/endpoints"),
        json!({"registration": "app", "provider_ref": HOOK_ID.to_string(), "secret": SECRET}),
    )
    .await?;
    assert_eq!(status, 201, "{body}");
    post(
        format!("/workspaces/{ws}/connections/{conn}/activate"),
        json!({}),
    )
    .await?;
    eventually("INITIAL did not succeed", || async {
        Ok((count(
            "SELECT count(*) FROM sync_job WHERE job_type = 'INITIAL' AND status = 'succeeded'",
        )
        .await?
            == 1)
            .then_some(()))
    })
    .await?;

    // ingress publishes a signed delivery; github-sync consumes it.
    let repository = generated.repositories[0];
    let payload = sim.model(|m| {
        let issue = m
            .add_issue(
                repository,
                NewIssue {
                    title: "live".into(),
                    author: Some("dev".into()),
                    ..Default::default()
                },
            )
            .unwrap();
        let repo = m.repository(repository).unwrap().clone();
        webhook::issues_payload(m, "opened", &repo, &issue)
    });
    let mut delivery = Delivery::new("issues", &payload);
    delivery.hook_id = HOOK_ID;
    let status = delivery
        .send(
            &http,
            &format!("{}/webhooks/github", ingress.url()),
            SECRET.as_bytes(),
        )
        .await?;
    assert_eq!(status.as_u16(), 200);
    eventually("the delivery was not mirrored", || async {
        Ok((count("SELECT count(*) FROM issue WHERE title = 'live'").await? == 1).then_some(()))
    })
    .await?;

    // The purge goes through the eraser, which deletes from every stream.
    let (status, body) = post(format!("/workspaces/{ws}/purge"), json!({})).await?;
    assert_eq!(status, 202, "{body}");
    eventually("the workspace was not purged", || async {
        Ok(
            (count("SELECT count(*) FROM workspace WHERE status = 'purged'").await? == 1)
                .then_some(()),
        )
    })
    .await?;
    // Every row any service wrote reached its stream through a relay allowed to send it.
    eventually("outbox rows were left unpublished", || async {
        Ok((count("SELECT count(*) FROM outbox").await? == 0).then_some(()))
    })
    .await?;

    // outline-sync created its durable on WEBHOOKS_OUTLINE as its own user.
    let as_outline = bus::Bus::connect(
        &common(Identity::OutlineSync).nats_url,
        None,
        Namespace::root(),
        bus::StreamSettings::default(),
    )
    .await?;
    eventually("outline-sync's consumer was not created", || async {
        let stream = as_outline
            .jetstream()
            .get_stream(bus::Stream::WebhooksOutline.name())
            .await?;
        Ok(stream
            .consumer_info("outline-sync-events")
            .await
            .ok()
            .map(|_| ()))
    })
    .await?;

    // provider-repair created its durable on LIFECYCLE and consumed the purge's transitions as
    // its own user.
    let as_repair = bus::Bus::connect(
        &common(Identity::ProviderRepair).nats_url,
        None,
        Namespace::root(),
        bus::StreamSettings::default(),
    )
    .await?;
    eventually("provider-repair did not consume its wakes", || async {
        let stream = as_repair
            .jetstream()
            .get_stream(bus::Stream::Lifecycle.name())
            .await?;
        Ok(stream
            .consumer_info("provider-repair-wakes")
            .await
            .ok()
            .filter(|i| i.num_pending == 0 && i.num_ack_pending == 0)
            .map(|_| ()))
    })
    .await?;

    for service in [
        &control, &ingress, &github, &gitlab, &slack, &outline, &eraser, &repair,
    ] {
        let ready = http.get(format!("{}/readyz", service.url())).send().await?;
        assert_eq!(
            ready.status().as_u16(),
            200,
            "{} is not ready",
            service.url()
        );
    }
    Ok(())
}
