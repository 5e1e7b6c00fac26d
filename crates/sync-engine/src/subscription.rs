//! Subscription-first registration of what we create at a vendor so that it delivers to us (a
//! GitLab group hook, an Outline webhook subscription), written once for every vendor.
//!
//! The order is the rule: the vendor's own preconditions first (discovery read to its end, the
//! durable consumer confirmed on the server: [`confirm_consumer`]), so that no delivery can
//! arrive before something takes it; then the endpoint the resource delivers to, with a fresh
//! secret of ours; then the `provider_registration` row with its marker, committed before the
//! create call; then the create. A create whose outcome is unknown is settled by listing the
//! vendor's resources for the marker (only a whole listing says it is absent), never by creating
//! again. A returned resource is adopted only by the connection version and lifecycle generation
//! that asked; anything else is left for provider repair. A refusal closes the endpoint.
//!
//! A vendor implements [`VendorResource`] (create, list, find the marker) and calls
//! [`Registrar::ensure`] from its [`crate::Vendor::activate`]. How the endpoint is reached and
//! bound is the resource's to declare: by a route built from the endpoint's id (GitLab), or by
//! an address token of its own with the vendor's id as its `provider_ref` once adopted
//! (Outline, whose deliveries name the subscription the vendor assigned).

use std::sync::Arc;

use bus::Bus;
use bus::consumer::ConsumerSpec;
use lifecycle_core::subject::filter_covers;
use sea_orm::DatabaseConnection;
use serde_json::json;
use sqlx::PgPool;
use store::entity::connection;
use store::entity::inbound_endpoint::Registration as EndpointRegistration;
use store::registration::{
    self, NewRegistration, Registration, RegistrationState, Resolved, ResourceKind,
};
use store::secrets::Keyring;
use uuid::Uuid;

/// Where the connection's resource stands after [`Registrar::ensure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceState {
    /// Adopted (now or earlier), with the vendor's id.
    Open(String),
    /// Not registered, and why.
    Missing(String),
}

/// How a create call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateFailure {
    /// The vendor certainly created nothing (it refused, or the call was never sent): the
    /// registration fails with this reason and its endpoint closes.
    Refused(String),
    /// The resource may exist (a timeout, a lost answer): settled by its marker.
    Unknown(String),
}

/// A target's resources as listed: every page, or as far as the listing got and why it stopped.
#[derive(Debug)]
pub enum ResourceListing<T> {
    Whole(Vec<T>),
    Partial { items: Vec<T>, why: String },
}

impl<T> ResourceListing<T> {
    fn items(&self) -> &[T] {
        match self {
            ResourceListing::Whole(items) | ResourceListing::Partial { items, .. } => items,
        }
    }
}

/// What a vendor creates at its side to deliver to us.
#[async_trait::async_trait]
pub trait VendorResource: Send + Sync {
    /// One resource as the vendor lists it.
    type Listed: Send + Sync;
    /// What the vendor calls it, in reasons (`hook`, `subscription`).
    const NOUN: &'static str;
    /// The prefix of the activity entries recorded (`<prefix>_requested`, `<prefix>_resolved`).
    const ACTIVITY: &'static str;

    /// Whether the new endpoint gets a random address token, its only route (a vendor route
    /// such as `/webhooks/outline/{token}`); it is given to [`url`](Self::url) as
    /// [`Address::token`].
    const ADDRESSED_BY_TOKEN: bool = false;

    /// Whether the endpoint's `provider_ref` becomes the vendor's id of the resource once it is
    /// adopted (the vendor assigns it, and ingress and admission take only deliveries naming
    /// it). Otherwise it stays the [`Request::provider_ref`] it was created with.
    const ENDPOINT_REF_IS_VENDOR_ID: bool = false;

    /// The resource kind its registrations are stored under.
    fn kind(&self) -> ResourceKind;

    /// Whether registration is configured at all (a public URL, a routing key); why not.
    fn configured(&self) -> Result<(), String>;

    /// The URL the resource calls, for the connection's new endpoint at `address`.
    fn url(&self, conn: &connection::Model, address: &Address<'_>) -> String;

    /// Creates the resource in `target`, delivering to `url`, signed with `secret` where the
    /// vendor signs with a secret we give it; the vendor's id of what it created.
    async fn create(
        &self,
        conn: &connection::Model,
        target: &str,
        marker: &str,
        url: &str,
        secret: &str,
    ) -> Result<String, CreateFailure>;

    /// The target's resources, every page of them when it can.
    async fn list(&self, target: &str) -> ResourceListing<Self::Listed>;

    /// The vendor id of `listed` when it carries `marker` for `connection_id`.
    fn marked(&self, listed: &Self::Listed, connection_id: Uuid, marker: &str) -> Option<String>;

    /// Records what a listing shows of an adopted resource (its health), if the vendor keeps it.
    async fn observed(
        &self,
        _conn: &connection::Model,
        _listed: &Self::Listed,
    ) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Where the connection's new endpoint is reached: what a resource builds its URL from.
#[derive(Debug, Clone, Copy)]
pub struct Address<'a> {
    /// The endpoint's id, also the registration's marker.
    pub marker: &'a str,
    /// Its address token, when the resource is [`VendorResource::ADDRESSED_BY_TOKEN`].
    pub token: Option<&'a str>,
}

/// One registration attempt, as the vendor's activation asks for it.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub conn: &'a connection::Model,
    /// The vendor-side place (a group id, the team), or why it is unknown; an earlier
    /// registration's target stands in while it is.
    pub target: Result<String, String>,
    /// Whether everything that must come first is done (discovery, the consumer), or the reason
    /// a create must wait.
    pub ready: Result<(), String>,
    /// The `provider_ref` of the endpoint created for it.
    pub provider_ref: Option<String>,
}

/// Runs registrations (see the module's rule).
#[derive(Clone)]
pub struct Registrar {
    pub db: DatabaseConnection,
    pub pool: PgPool,
    pub keyring: Arc<Keyring>,
}

/// Confirms on the NATS server that the durable consumer `spec` takes `filter`, adding it when
/// it does not; the reason when it cannot be confirmed.
pub async fn confirm_consumer(bus: &Bus, spec: &ConsumerSpec, filter: &str) -> Result<(), String> {
    match bus::consumer::ensure_filter(bus, spec, filter).await {
        Ok(held) if held.iter().any(|f| filter_covers(f, filter)) => Ok(()),
        Ok(held) => Err(format!(
            "the server's consumer takes {held:?}, not {filter}"
        )),
        Err(e) => Err(format!("the consumer could not be confirmed: {e}")),
    }
}

impl Registrar {
    /// Makes sure the connection's current generation has its resource: settles one already
    /// requested or adopted, otherwise creates one when the request is ready.
    #[tracing::instrument(skip_all, fields(connection_id = %req.conn.id, noun = R::NOUN))]
    pub async fn ensure<R: VendorResource>(
        &self,
        resource: &R,
        req: Request<'_>,
    ) -> anyhow::Result<ResourceState> {
        let conn = req.conn;
        let noun = R::NOUN;
        let generation = registration::generation(conn.version, conn.lifecycle_generation);
        let earlier = registration::of_connection(&self.pool, conn.id, resource.kind()).await?;
        let target = match req.target {
            Ok(target) => Ok(target),
            Err(why) => earlier.first().map(|r| r.target.clone()).ok_or(why),
        };
        if let Ok(target) = &target
            && let Some(live) =
                registration::live(&self.pool, conn.id, resource.kind(), target, generation).await?
        {
            return self.settle(resource, conn, live).await;
        }
        if let Err(reason) = req.ready {
            return Ok(ResourceState::Missing(reason));
        }
        if let Err(reason) = resource.configured() {
            return Ok(ResourceState::Missing(reason));
        }
        let target = match target {
            Ok(target) => target,
            Err(reason) => return Ok(ResourceState::Missing(reason)),
        };

        // The endpoint it delivers to, with a secret of ours; its id is the marker.
        let secret = store::inbound::random_token()?;
        let address_token = if R::ADDRESSED_BY_TOKEN {
            Some(store::inbound::random_token()?)
        } else {
            None
        };
        let endpoint = store::inbound::create_endpoint(
            &self.db,
            &self.keyring,
            store::inbound::NewEndpoint {
                workspace_id: conn.workspace_id,
                connection_id: conn.id,
                kind: conn.kind,
                registration: EndpointRegistration::Registered,
                provider_ref: req.provider_ref,
                address_token: address_token.clone(),
                // Registered by forgesync with a secret it generated and shows no one.
                tenant_keyed: false,
            },
            secret.as_bytes(),
        )
        .await?;
        let marker = endpoint.id.to_string();
        let url = resource.url(
            conn,
            &Address {
                marker: &marker,
                token: address_token.as_deref(),
            },
        );
        // Committed before the create call: an unknown outcome is found by this marker.
        let mut tx = self.pool.begin().await?;
        let requested = registration::request(
            &mut tx,
            &NewRegistration {
                connection_id: conn.id,
                provider_instance_id: conn.provider_instance_id,
                kind: resource.kind(),
                target: &target,
                marker: &marker,
                url: &url,
                generation,
                endpoint_id: Some(endpoint.id),
            },
        )
        .await?;
        tx.commit().await?;
        let Some(reg) = requested else {
            // Another replica asked first for this generation: its registration decides.
            disable_endpoint(&self.pool, endpoint.id).await?;
            return Ok(ResourceState::Missing(format!(
                "another activation of this generation is registering the {noun}"
            )));
        };
        self.log(
            conn,
            &format!("{}_requested", R::ACTIVITY),
            json!({"registration_id": reg.id, "target": target, "url_hash": reg.url_hash}),
        )
        .await?;
        match resource.create(conn, &target, &marker, &url, &secret).await {
            Ok(vendor_id) => self.resolved::<R>(conn, reg.id, &vendor_id).await,
            Err(CreateFailure::Refused(reason)) => {
                registration::fail(&self.pool, reg.id, &reason).await?;
                disable_endpoint(&self.pool, endpoint.id).await?;
                Ok(ResourceState::Missing(reason))
            }
            Err(CreateFailure::Unknown(detail)) => {
                tracing::warn!(error = %detail, registration_id = %reg.id,
                    "the create's outcome is unknown; looking for its marker");
                self.settle(resource, conn, reg).await
            }
        }
    }

    /// Settles a registration of the current generation: an unknown one by its marker in the
    /// target's listing, an adopted one by reading what the listing shows of it.
    async fn settle<R: VendorResource>(
        &self,
        resource: &R,
        conn: &connection::Model,
        reg: Registration,
    ) -> anyhow::Result<ResourceState> {
        let noun = R::NOUN;
        let listing = resource.list(&reg.target).await;
        let found = listing
            .items()
            .iter()
            .find_map(|l| resource.marked(l, conn.id, &reg.marker).map(|id| (l, id)));
        match reg.state {
            RegistrationState::Adopted => {
                if let Some((listed, _)) = found {
                    resource.observed(conn, listed).await?;
                }
                // Heals an adoption whose endpoint was not bound yet (a crash in between).
                self.bind_endpoint::<R>(conn, &reg).await
            }
            // Only a whole listing says the marker is not there; a partial one says nothing.
            RegistrationState::Requested => match (found, &listing) {
                (Some((_, id)), _) => self.resolved::<R>(conn, reg.id, &id).await,
                (None, ResourceListing::Whole(_)) => Ok(ResourceState::Missing(format!(
                    "the {noun} create's outcome is unknown and its marker is not listed yet \
                     (registration {}); it is never created twice, the next reconcile looks again",
                    reg.id
                ))),
                (None, ResourceListing::Partial { why, .. }) => {
                    Ok(ResourceState::Missing(format!(
                        "the {noun} create's outcome is unknown and the {noun}s could not be \
                         listed whole ({why}); its marker is not found yet (registration {}), it \
                         is never created twice, the next reconcile looks again",
                        reg.id
                    )))
                }
            },
            RegistrationState::Created | RegistrationState::Failed | RegistrationState::Removed => {
                Ok(ResourceState::Missing(format!(
                    "the {noun} registration was settled elsewhere"
                )))
            }
        }
    }

    /// Records the vendor's id for a registration: adopted by the generation that asked, a
    /// removal target otherwise (its endpoint closes).
    async fn resolved<R: VendorResource>(
        &self,
        conn: &connection::Model,
        registration_id: Uuid,
        vendor_id: &str,
    ) -> anyhow::Result<ResourceState> {
        let noun = R::NOUN;
        let resolved =
            registration::resolve_created(&self.pool, registration_id, vendor_id).await?;
        let (state, reg) = match &resolved {
            Resolved::Adopted(r) => (ResourceState::Open(vendor_id.to_owned()), r),
            Resolved::Already(r) if r.state == RegistrationState::Adopted => (
                ResourceState::Open(r.vendor_id.clone().unwrap_or_default()),
                r,
            ),
            Resolved::RemovalTarget(r) | Resolved::Already(r) => (
                ResourceState::Missing(format!(
                    "the {noun} was created for a connection version or generation that is no \
                     longer current; it is left for provider repair to remove"
                )),
                r,
            ),
        };
        if !matches!(state, ResourceState::Open(_))
            && let Some(endpoint) = reg.endpoint_id
        {
            disable_endpoint(&self.pool, endpoint).await?;
        }
        self.log(
            conn,
            &format!("{}_resolved", R::ACTIVITY),
            json!({"registration_id": reg.id, "vendor_id": vendor_id,
                   "state": reg.state, "adopted": matches!(state, ResourceState::Open(_))}),
        )
        .await?;
        match state {
            ResourceState::Open(_) => self.bind_endpoint::<R>(conn, reg).await,
            missing => Ok(missing),
        }
    }

    /// The state of an adopted registration, its endpoint's `provider_ref` set to the vendor's
    /// id first when the resource asks for it (only then does a delivery naming it pass).
    async fn bind_endpoint<R: VendorResource>(
        &self,
        conn: &connection::Model,
        reg: &Registration,
    ) -> anyhow::Result<ResourceState> {
        let vendor_id = reg.vendor_id.clone().unwrap_or_default();
        let (true, Some(endpoint_id)) = (R::ENDPOINT_REF_IS_VENDOR_ID, reg.endpoint_id) else {
            return Ok(ResourceState::Open(vendor_id));
        };
        let bound = sqlx::query(
            "UPDATE inbound_endpoint SET provider_ref = $2, updated_at = now()
              WHERE id = $1 AND provider_ref IS DISTINCT FROM $2",
        )
        .bind(endpoint_id)
        .bind(&vendor_id)
        .execute(&self.pool)
        .await;
        match bound {
            Ok(_) => Ok(ResourceState::Open(vendor_id)),
            // One enabled endpoint per workspace takes a vendor id: another one holds it.
            Err(sqlx::Error::Database(e))
                if e.constraint() == Some(store::inbound::OUTLINE_SUBSCRIPTION_INDEX)
                    || e.constraint() == Some(store::inbound::PROVIDER_REF_INDEX) =>
            {
                let reason = format!(
                    "the {} {vendor_id} is adopted, but another enabled endpoint of the \
                     workspace already takes its deliveries; disable that endpoint and the next \
                     reconcile binds this one",
                    R::NOUN
                );
                self.log(
                    conn,
                    &format!("{}_unbound", R::ACTIVITY),
                    json!({"registration_id": reg.id, "vendor_id": vendor_id,
                           "endpoint_id": endpoint_id, "reason": reason}),
                )
                .await?;
                Ok(ResourceState::Missing(reason))
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn log(
        &self,
        conn: &connection::Model,
        activity: &str,
        detail: serde_json::Value,
    ) -> Result<(), sqlx::Error> {
        tracing::info!(connection_id = %conn.id, workspace_id = %conn.workspace_id,
            step = activity, %detail, "registration step");
        store::activity::record(&self.pool, conn.id, conn.workspace_id, activity, detail).await
    }
}

/// Closes an endpoint no resource of ours will deliver to.
async fn disable_endpoint(pool: &PgPool, endpoint_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE inbound_endpoint SET status = 'disabled', updated_at = now() WHERE id = $1",
    )
    .bind(endpoint_id)
    .execute(pool)
    .await?;
    Ok(())
}
