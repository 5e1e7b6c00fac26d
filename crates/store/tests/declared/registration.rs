//! A kind of vendor-side resource is declared by the vendor that creates it: `store` and the
//! schema accept any well-formed name, and read it back without knowing it.

use anyhow::Result;
use store::registration::{self, NewRegistration, RegistrationState, ResourceKind};
use uuid::Uuid;

use crate::World;

/// Declared by the test as a vendor that is not GitLab would declare it.
const OUTLINE_SUBSCRIPTION: ResourceKind = ResourceKind::new("outline_subscription");
/// GitLab's own kind, by its stored name (declared in `scm_mirror::gitlab`).
const GITLAB_GROUP_HOOK: ResourceKind = ResourceKind::new("gitlab_group_hook");

fn new(
    kind: ResourceKind,
    connection_id: Uuid,
    instance: Uuid,
    marker: &str,
) -> NewRegistration<'_> {
    NewRegistration {
        connection_id,
        provider_instance_id: instance,
        kind,
        target: "collection-1",
        marker,
        url: "https://hooks.example/outline",
        generation: registration::generation(1, 0),
        endpoint_id: None,
    }
}

#[tokio::test]
async fn a_kind_no_shared_list_names_is_recorded_and_read_back() -> Result<()> {
    let w = World::new("outline").await?;
    let (_, conn) = w.connection("outline", "active").await?;
    let mut tx = w.pool.begin().await?;
    let requested = registration::request(
        &mut tx,
        &new(OUTLINE_SUBSCRIPTION, conn, w.instance, "m-outline"),
    )
    .await?
    .expect("the first request of its generation is recorded");
    let other = registration::request(
        &mut tx,
        &new(GITLAB_GROUP_HOOK, conn, w.instance, "m-gitlab"),
    )
    .await?
    .expect("another kind at the same target is its own registration");
    tx.commit().await?;
    assert_eq!(requested.resource_kind, "outline_subscription");
    assert_eq!(requested.state, RegistrationState::Requested);
    assert_eq!(other.resource_kind, "gitlab_group_hook");
    // Each kind reads back only its own rows.
    let read = registration::of_connection(&w.pool, conn, OUTLINE_SUBSCRIPTION).await?;
    assert_eq!(read, vec![requested.clone()]);
    let live = registration::live(
        &w.pool,
        conn,
        OUTLINE_SUBSCRIPTION,
        "collection-1",
        registration::generation(1, 0),
    )
    .await?;
    assert_eq!(live, Some(requested));
    Ok(())
}

#[tokio::test]
async fn the_schema_still_refuses_a_malformed_kind() -> Result<()> {
    let w = World::new("outline").await?;
    for kind in ["Outline", "1hook", "outline-subscription", ""] {
        let refused = sqlx::query(
            "INSERT INTO provider_registration (id, connection_id, provider_instance_id,
                 resource_kind, target, marker, url_hash, connection_version, lifecycle_generation)
             VALUES ($1, $1, $2, $3, 't', $1::text, 'h', 1, 0)",
        )
        .bind(Uuid::now_v7())
        .bind(w.instance)
        .bind(kind)
        .execute(&w.pool)
        .await;
        match refused {
            // check_violation
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23514") => {}
            other => panic!("{kind:?} was not refused by the format check: {other:?}"),
        }
    }
    Ok(())
}

/// Adoption takes the identity lock and reads the identity's fence under it: a resource whose
/// removal was fenced is never adopted, even by the generation that asked for it.
#[tokio::test]
async fn a_fenced_identity_is_never_adopted() -> Result<()> {
    let w = World::new("outline").await?;
    let (_, conn) = w.connection("outline", "active").await?;
    sqlx::query("UPDATE connection SET version = 1, lifecycle_generation = 0 WHERE id = $1")
        .bind(conn)
        .execute(&w.pool)
        .await?;
    let mut tx = w.pool.begin().await?;
    let fenced =
        registration::request(&mut tx, &new(OUTLINE_SUBSCRIPTION, conn, w.instance, "m-1"))
            .await?
            .expect("recorded");
    tx.commit().await?;
    // A removal of `sub-old` was captured earlier (by another connection's disconnect).
    sqlx::query(
        "INSERT INTO provider_resource_repair (id, provider, instance, resource, identity_hash,
             resource_kind, target, vendor_id)
         VALUES ($1, 'outline', '', 'outline_subscription:sub-old', 1, 'outline_subscription',
                 'collection-1', 'sub-old')",
    )
    .bind(Uuid::now_v7())
    .execute(&w.pool)
    .await?;
    let resolved = registration::resolve_created(&w.pool, fenced.id, "sub-old").await?;
    let registration::Resolved::RemovalTarget(reg) = resolved else {
        panic!("a fenced identity was adopted: {resolved:?}");
    };
    assert_eq!(reg.state, RegistrationState::Created);

    // The same generation's next request (the fenced one no longer counts as its live
    // registration), answered with a fresh id, is adopted.
    let mut tx = w.pool.begin().await?;
    let fresh = registration::request(&mut tx, &new(OUTLINE_SUBSCRIPTION, conn, w.instance, "m-2"))
        .await?
        .expect("recorded");
    tx.commit().await?;
    let resolved = registration::resolve_created(&w.pool, fresh.id, "sub-new").await?;
    assert!(
        matches!(resolved, registration::Resolved::Adopted(_)),
        "{resolved:?}"
    );
    Ok(())
}
