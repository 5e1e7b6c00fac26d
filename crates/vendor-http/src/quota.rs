//! What a vendor said is left of a rate-limit pool, as gauges:
//! `vendor_quota_remaining{vendor, resource, connection}` and
//! `vendor_quota_limit{vendor, resource, connection}`.
//!
//! `connection` is the forgesync connection id the client reads for: bounded by the number of
//! connections (a tenant cannot mint values), and a pool is per connection, so this is the
//! label an operator needs. A connection removed keeps its last values until the process
//! restarts.

/// Reports one client's pools; a client without one reports nothing.
#[derive(Debug, Clone)]
pub struct QuotaGauge {
    vendor: &'static str,
    connection: String,
}

impl QuotaGauge {
    /// Reports the pools of `vendor`'s client reading for `connection`.
    pub fn new(vendor: &'static str, connection: impl Into<String>) -> Self {
        Self {
            vendor,
            connection: connection.into(),
        }
    }

    /// Sets what is left of `resource` (`graphql`, `rest`, ...) and the window's size.
    pub fn report(&self, resource: &'static str, remaining: u32, limit: u32) {
        let labels = [
            ("vendor", self.vendor.to_owned()),
            ("resource", resource.to_owned()),
            ("connection", self.connection.clone()),
        ];
        metrics::gauge!("vendor_quota_remaining", &labels).set(f64::from(remaining));
        metrics::gauge!("vendor_quota_limit", &labels).set(f64::from(limit));
    }
}
