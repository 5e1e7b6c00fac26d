//! Activation of an Outline connection (real Postgres and JetStream, the simulator over HTTP,
//! ingress and outline-sync running): `auth.info` first, then the team's subscription registered
//! subscription-first. Its registration row and endpoint are committed before Outline sees the
//! create; a lost answer is adopted once by its marker, never created twice, and its deliveries
//! then pass; a refusal fails the registration and closes its endpoint; a subscription created
//! for an older generation is never adopted; a refused token creates nothing.

mod common;

use std::time::Duration;

use anyhow::{Context as _, Result};
use common::{World, activator, connection, eventually, unregistered_connection};
use outline_mirror::SUBSCRIPTION;
use store::registration::{self, Registration, RegistrationState};
use sync_engine::subscription::ResourceState;
use uuid::Uuid;
use vendor_sim::outline::{Calls, Fault, NewDocument, OutlineFault, Subscription, methods};

const TOKEN: &str = "ol_api_activation";

/// The world, its simulator taking [`TOKEN`], and a connection with that token, not activated.
async fn start() -> Result<(World, Uuid)> {
    let w = World::start().await?;
    w.sim.model(|m| m.add_token(TOKEN));
    let (_, connection_id) = unregistered_connection(&w.env, w.provider_instance_id, TOKEN).await?;
    Ok((w, connection_id))
}

/// Subscriptions the activator created at the simulator (the harness's own is named
/// `forgesync` alone).
fn ours(w: &World) -> Vec<Subscription> {
    w.sim.model(|m| {
        m.subscriptions()
            .filter(|s| s.name.starts_with("forgesync "))
            .cloned()
            .collect()
    })
}

async fn registrations(w: &World, connection_id: Uuid) -> Result<Vec<Registration>> {
    Ok(registration::of_connection(&w.pool, connection_id, SUBSCRIPTION).await?)
}

/// An endpoint of the connection: `(status, provider_ref, address_token, registration)`.
type EndpointRow = (String, Option<String>, Option<String>, String);

async fn endpoint(w: &World, endpoint_id: Uuid) -> Result<EndpointRow> {
    Ok(sqlx::query_as(
        "SELECT status::text, provider_ref, address_token, registration::text
           FROM inbound_endpoint WHERE id = $1",
    )
    .bind(endpoint_id)
    .fetch_one(&w.pool)
    .await?)
}

async fn endpoints_of(w: &World, connection_id: Uuid) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM inbound_endpoint WHERE connection_id = $1")
            .bind(connection_id)
            .fetch_one(&w.pool)
            .await?,
    )
}

/// The first create's answer is lost (Outline created it) and listings are refused, so the
/// activation cannot settle it.
fn lose_the_create_and_refuse_listings(w: &World) {
    w.sim.inject(Fault::nth(
        methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
        1,
        OutlineFault::lost_with(502),
    ));
    w.sim.inject(Fault {
        operation: Some(methods::WEBHOOK_SUBSCRIPTIONS_LIST.to_owned()),
        calls: Calls::Always,
        kind: OutlineFault::Status(403),
    });
}

fn reason(state: &ResourceState) -> &str {
    match state {
        ResourceState::Missing(reason) => reason,
        ResourceState::Open(id) => panic!("expected no subscription, got {id}"),
    }
}

#[tokio::test]
async fn the_registration_and_its_endpoint_are_committed_before_outline_sees_the_create()
-> Result<()> {
    let (w, connection_id) = start().await?;
    let act = activator(&w.env, &w.sim, Some(w.ingress.url()))?;
    // Outline holds the create's answer back: what the database holds while it is in flight
    // was committed before the call.
    w.sim.inject(Fault::nth(
        methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
        1,
        OutlineFault::Delay(Duration::from_millis(1500)),
    ));
    let conn = connection(&w.env, connection_id).await?;
    let running = {
        let (act, conn) = (act.clone(), conn.clone());
        tokio::spawn(async move { act.activate(&conn).await })
    };
    eventually("the create reaches the simulator", || async {
        Ok((w.sim.calls(methods::WEBHOOK_SUBSCRIPTIONS_CREATE) == 1).then_some(()))
    })
    .await?;
    assert!(ours(&w).is_empty(), "the create is not answered yet");
    let regs = registrations(&w, connection_id).await?;
    assert_eq!(regs.len(), 1, "{regs:?}");
    let reg = &regs[0];
    assert_eq!(reg.state, RegistrationState::Requested);
    let endpoint_id = reg
        .endpoint_id
        .context("the registration names its endpoint")?;
    assert_eq!(
        reg.marker,
        endpoint_id.to_string(),
        "the marker is the endpoint"
    );
    let (status, provider_ref, token, registered) = endpoint(&w, endpoint_id).await?;
    assert_eq!(
        (status.as_str(), registered.as_str()),
        ("active", "registered")
    );
    assert_eq!(
        provider_ref, None,
        "bound only once Outline names the subscription"
    );
    let token = token.context("the endpoint is addressed by a token")?;
    // The create's body was what the row promises: its marker and the endpoint's route.
    let create = &w.sim.calls_of(methods::WEBHOOK_SUBSCRIPTIONS_CREATE)[0];
    assert_eq!(
        create.body["name"].as_str(),
        Some(format!("forgesync {}", reg.marker).as_str())
    );
    let route = format!("{}/webhooks/outline/{token}", w.ingress.url());
    assert_eq!(create.body["url"].as_str(), Some(route.as_str()));

    let state = running.await??;
    let created = ours(&w);
    assert_eq!(created.len(), 1);
    assert_eq!(state, ResourceState::Open(created[0].id.clone()));
    let reg = registrations(&w, connection_id).await?.remove(0);
    assert_eq!(reg.state, RegistrationState::Adopted);
    assert_eq!(reg.vendor_id.as_deref(), Some(created[0].id.as_str()));
    let (_, provider_ref, ..) = endpoint(&w, endpoint_id).await?;
    assert_eq!(provider_ref.as_deref(), Some(created[0].id.as_str()));
    assert!(
        created[0].secret.as_deref().is_some_and(|s| s.len() >= 32),
        "a fresh secret of ours"
    );
    Ok(())
}

#[tokio::test]
async fn a_lost_create_is_adopted_once_by_its_marker_and_its_deliveries_then_apply() -> Result<()> {
    let (w, connection_id) = start().await?;
    let act = activator(&w.env, &w.sim, Some(w.ingress.url()))?;
    lose_the_create_and_refuse_listings(&w);
    let conn = connection(&w.env, connection_id).await?;
    let first = act.activate(&conn).await?;
    assert!(
        reason(&first).contains("could not be listed whole"),
        "{first:?}"
    );
    assert_eq!(
        ours(&w).len(),
        1,
        "Outline created it though its answer was lost"
    );
    let reg = registrations(&w, connection_id).await?.remove(0);
    assert_eq!(reg.state, RegistrationState::Requested);

    // The next activation finds the marker and adopts it; nothing is created again.
    w.sim.clear_faults();
    let second = act.activate(&conn).await?;
    let created = ours(&w);
    assert_eq!(created.len(), 1, "never created twice");
    let id = created[0].id.clone();
    assert_eq!(second, ResourceState::Open(id.clone()));
    assert_eq!(act.activate(&conn).await?, ResourceState::Open(id.clone()));
    assert_eq!(w.sim.calls(methods::WEBHOOK_SUBSCRIPTIONS_CREATE), 1);
    let regs = registrations(&w, connection_id).await?;
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].state, RegistrationState::Adopted);
    assert_eq!(regs[0].vendor_id.as_deref(), Some(id.as_str()));
    let endpoint_id = regs[0].endpoint_id.context("its endpoint")?;
    let (status, provider_ref, ..) = endpoint(&w, endpoint_id).await?;
    assert_eq!(status, "active");
    assert_eq!(
        provider_ref,
        Some(id.clone()),
        "bound to the adopted subscription"
    );

    // Outline's signed delivery of the adopted subscription passes ingress and admission.
    let [eng, _] = w.collections.clone();
    let doc = w
        .sim
        .model(|m| m.add_document(NewDocument::new(&eng, "Adopted").text("v1")))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let title: Option<String> = eventually("the delivery is applied", || async {
        Ok(sqlx::query_scalar(
            "SELECT title FROM outline_document WHERE connection_id = $1 AND outline_id = $2",
        )
        .bind(connection_id)
        .bind(&doc)
        .fetch_optional(&w.pool)
        .await?)
    })
    .await?;
    assert_eq!(title.as_deref(), Some("Adopted"));
    let delivered = w
        .sim
        .deliveries()
        .into_iter()
        .filter(|d| d.subscription_id == id && d.succeeded())
        .count();
    assert!(
        delivered >= 1,
        "the sim delivered through the adopted subscription"
    );
    Ok(())
}

#[tokio::test]
async fn a_refused_create_fails_the_registration_with_its_reason_and_closes_its_endpoint()
-> Result<()> {
    let (w, connection_id) = start().await?;
    let act = activator(&w.env, &w.sim, Some(w.ingress.url()))?;
    w.sim.inject(Fault::nth(
        methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
        1,
        OutlineFault::Status(403),
    ));
    let conn = connection(&w.env, connection_id).await?;
    let state = act.activate(&conn).await?;
    assert!(reason(&state).contains("forbidden"), "{state:?}");
    assert!(ours(&w).is_empty());
    let reg = registrations(&w, connection_id).await?.remove(0);
    assert_eq!(reg.state, RegistrationState::Failed);
    assert!(
        reg.failure
            .as_deref()
            .is_some_and(|f| f.contains("forbidden")),
        "{:?}",
        reg.failure
    );
    let (status, ..) = endpoint(&w, reg.endpoint_id.context("its endpoint")?).await?;
    assert_eq!(status, "disabled");
    Ok(())
}

#[tokio::test]
async fn a_subscription_created_for_an_older_generation_is_never_adopted() -> Result<()> {
    let (w, connection_id) = start().await?;
    let act = activator(&w.env, &w.sim, Some(w.ingress.url()))?;
    lose_the_create_and_refuse_listings(&w);
    let asked = connection(&w.env, connection_id).await?;
    reason(&act.activate(&asked).await?);
    let old = ours(&w);
    assert_eq!(old.len(), 1);

    // The connection moves on before the lost create is settled.
    sqlx::query("UPDATE connection SET version = version + 1 WHERE id = $1")
        .bind(connection_id)
        .execute(&w.pool)
        .await?;
    w.sim.clear_faults();
    // The activation of the generation that asked finds its marker, but may not adopt it.
    let stale = act.activate(&asked).await?;
    assert!(reason(&stale).contains("no longer current"), "{stale:?}");
    let reg = registrations(&w, connection_id).await?.remove(0);
    assert_eq!(reg.state, RegistrationState::Created, "a removal target");
    assert_eq!(reg.vendor_id.as_deref(), Some(old[0].id.as_str()));
    let (status, provider_ref, ..) = endpoint(&w, reg.endpoint_id.context("endpoint")?).await?;
    assert_eq!((status.as_str(), provider_ref), ("disabled", None));
    assert_eq!(ours(&w).len(), 1, "left for provider repair, not deleted");

    // The current generation registers its own.
    let current = connection(&w.env, connection_id).await?;
    let ResourceState::Open(new_id) = act.activate(&current).await? else {
        anyhow::bail!("the current generation's subscription is open");
    };
    assert_ne!(new_id, old[0].id);
    let regs = registrations(&w, connection_id).await?;
    let states: Vec<_> = regs
        .iter()
        .map(|r| (r.state, r.vendor_id.clone()))
        .collect();
    assert!(
        states.contains(&(RegistrationState::Created, Some(old[0].id.clone())))
            && states.contains(&(RegistrationState::Adopted, Some(new_id.clone()))),
        "{states:?}"
    );
    assert_eq!(ours(&w).len(), 2, "the old one is never deleted here");
    Ok(())
}

#[tokio::test]
async fn a_refused_token_is_reported_as_bad_credentials_and_nothing_is_created() -> Result<()> {
    let (w, connection_id) = start().await?;
    w.sim.model(|m| m.revoke_token(TOKEN));
    let act = activator(&w.env, &w.sim, Some(w.ingress.url()))?;
    let conn = connection(&w.env, connection_id).await?;
    let state = act.activate(&conn).await?;
    assert!(reason(&state).starts_with("bad credentials"), "{state:?}");
    let class: Option<String> = sqlx::query_scalar(
        "SELECT detail ->> 'class' FROM connection_activity
          WHERE connection_id = $1 AND activity = 'outline_activation_auth'",
    )
    .bind(connection_id)
    .fetch_optional(&w.pool)
    .await?;
    assert_eq!(class.as_deref(), Some("bad_credentials"));
    assert_eq!(w.sim.calls(methods::WEBHOOK_SUBSCRIPTIONS_CREATE), 0);
    assert!(registrations(&w, connection_id).await?.is_empty());
    assert_eq!(endpoints_of(&w, connection_id).await?, 0);
    Ok(())
}

#[tokio::test]
async fn without_a_public_webhook_url_nothing_is_created() -> Result<()> {
    let (w, connection_id) = start().await?;
    let act = activator(&w.env, &w.sim, None)?;
    let conn = connection(&w.env, connection_id).await?;
    let state = act.activate(&conn).await?;
    assert!(
        reason(&state).contains("FORGESYNC_PUBLIC_WEBHOOK_URL"),
        "{state:?}"
    );
    assert_eq!(w.sim.calls(methods::WEBHOOK_SUBSCRIPTIONS_CREATE), 0);
    assert_eq!(endpoints_of(&w, connection_id).await?, 0);
    Ok(())
}
