//! The webhook half of `gitlab-sync`: Merge Request Hooks (`update`, each a new title at a later
//! version, as GitLab sends them for its group hook) recorded and published as ingress records
//! and publishes them for the connection's registered route, applied by gitlab-sync's connection
//! consumer, each followed by its readiness read against the simulator over HTTP and the short
//! transaction that writes it; beside the row-locked single-row transaction ceiling of the same
//! number of writes at the consumer's concurrency (`github_webhooks::ceiling`).

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt as _;
use sqlx::PgPool;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::{EndpointIds, NewEndpoint};
use store::outbox::OutboxMessage;
use store::secrets::Keyring;
use uuid::Uuid;
use vendor_sim::gitlab::webhook::merge_request_hook;
use vendor_sim::gitlab::{GitlabSim, ops};

use crate::github_webhooks::{publish_and_drain, record};

/// Deliveries published.
pub const HOOKS: usize = 3_000;

/// What the consumer did.
pub struct Applied {
    pub hooks: usize,
    pub seconds: f64,
    /// GitLab readiness reads the hooks caused.
    pub readiness_reads: u64,
}

/// Publishes [`HOOKS`] update hooks, one per open merge request round-robin, and waits until
/// gitlab-sync's connection consumer has handled every one; the clock runs from the consumer's
/// first delivery to its last ack.
pub async fn apply(
    env: &testkit::TestEnv,
    pool: &PgPool,
    sim: &GitlabSim,
    connection_id: Uuid,
) -> Result<Applied> {
    let bodies: Vec<Vec<u8>> = sim.model(|m| {
        let open: Vec<(u64, u64)> = m
            .merge_requests
            .values()
            .filter(|mr| mr.state == "opened")
            .map(|mr| (mr.project, mr.iid))
            .collect();
        (0..HOOKS)
            .filter_map(|i| {
                let (project, iid) = *open.get(i % open.len().max(1))?;
                let before = m.merge_requests[&(project, iid)].clone();
                m.update_merge_request(project, iid, |mr| {
                    mr.title = format!("{} (round {i})", before.title);
                });
                let mr = m.merge_requests[&(project, iid)].clone();
                serde_json::to_vec(&merge_request_hook(m, &mr, "update", Some(&before))).ok()
            })
            .collect()
    });
    ensure!(
        bodies.len() == HOOKS,
        "the simulator has no open merge request"
    );
    let endpoint = registered_endpoint(env, connection_id).await?;
    let subject =
        lifecycle_core::subject::gitlab_connection(&connection_id.to_string(), "merge_request")?;
    let db = &env.db.db;
    // Stored first, untimed, as ingress stores them.
    let recorded: Vec<(Uuid, OutboxMessage)> = futures::stream::iter(bodies)
        .map(|body| {
            let uuid = Uuid::now_v7().to_string();
            let headers = BTreeMap::from([
                ("x-gitlab-event".to_owned(), "Merge Request Hook".to_owned()),
                ("x-gitlab-event-uuid".to_owned(), uuid.clone()),
            ]);
            record(
                db,
                endpoint,
                subject.clone(),
                "merge_request",
                headers,
                uuid,
                body,
            )
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let reads_before = sim.calls(ops::MERGE_REQUEST_READINESS);
    let seconds = publish_and_drain(
        &env.bus,
        recorded,
        bus::Stream::WebhooksGitlab,
        gitlab_sync::activation::CONNECTION_EVENTS_CONSUMER,
    )
    .await?;
    let readiness_reads = sim.calls(ops::MERGE_REQUEST_READINESS) - reads_before;
    let applied: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pull_request WHERE title LIKE '%(round %'")
            .fetch_one(pool)
            .await?;
    ensure!(applied > 0, "no hook changed the mirror");
    let dead: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_message")
        .fetch_one(pool)
        .await?;
    ensure!(dead == 0, "{dead} hooks went dead; no figures");
    Ok(Applied {
        hooks: HOOKS,
        seconds,
        readiness_reads,
    })
}

/// The endpoint of the group hook gitlab-sync registered for `connection_id`: the connection
/// route, on which a delivery is admitted for the connection's monitored projects.
async fn registered_endpoint(env: &testkit::TestEnv, connection_id: Uuid) -> Result<EndpointIds> {
    let workspace_id: Uuid =
        sqlx::query_scalar("SELECT workspace_id FROM connection WHERE id = $1")
            .bind(connection_id)
            .fetch_one(env.db.db.get_postgres_connection_pool())
            .await
            .context("the bench connection")?;
    let keyring = Keyring::parse(&testkit::secret_key())?;
    let endpoint = store::inbound::create_endpoint(
        &env.db.db,
        &keyring,
        NewEndpoint {
            workspace_id,
            connection_id,
            kind: ConnectionKind::Gitlab,
            registration: Registration::Registered,
            provider_ref: None,
            address_token: Some(Uuid::now_v7().simple().to_string()),
            tenant_keyed: false,
        },
        b"bench-registered-secret",
    )
    .await?;
    Ok(EndpointIds {
        endpoint_id: endpoint.id,
        workspace_id,
        connection_id,
        kind: ConnectionKind::Gitlab,
    })
}
