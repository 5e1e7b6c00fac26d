//! Outline's admission rule: a delivery writes only to the delivering connection's own rows, and
//! only when it names the connection's own webhook subscription, the `provider_ref` of the
//! Outline endpoint ingress received it on. Every row is the connection's alone, so the rule
//! guards against a delivery carried to this connection that another subscription produced.

use sqlx::PgConnection;
use store::admission::{AdmissionRule, Delivering, Refusal, VendorRefusal};
use store::entity::ConnectionKind;

/// The delivery names a subscription that is not the one its endpoint was made for.
pub const FOREIGN_SUBSCRIPTION: VendorRefusal = VendorRefusal {
    label: "foreign_subscription",
    reason: "the delivery names a webhook subscription that is not the connection's own",
};

/// A delivery of subscription `webhookSubscriptionId`, for any of the connection's collections
/// and documents.
pub struct Subscription<'a> {
    pub id: &'a str,
}

impl AdmissionRule for Subscription<'_> {
    const KIND: ConnectionKind = ConnectionKind::Outline;

    async fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> Result<Result<(), Refusal>, sqlx::Error> {
        // Only ingress's record says which endpoint verified it; without one, nothing proves the
        // subscription is the connection's.
        let Some(delivery_id) = delivering.origin.delivery_id else {
            return Ok(Err(Refusal::Vendor(FOREIGN_SUBSCRIPTION)));
        };
        let own: Option<(Option<String>,)> = sqlx::query_as(
            "SELECT e.provider_ref FROM inbound_message m
               JOIN inbound_endpoint e ON e.id = m.endpoint_id
              WHERE m.id = $1 AND m.connection_id = $2 AND e.connection_id = $2
                AND e.kind = 'outline'",
        )
        .bind(delivery_id)
        .bind(delivering.admitted.connection_id)
        .fetch_optional(&mut *conn)
        .await?;
        match own {
            Some((Some(subscription),)) if subscription == self.id => Ok(Ok(())),
            _ => Ok(Err(Refusal::Vendor(FOREIGN_SUBSCRIPTION))),
        }
    }
}
