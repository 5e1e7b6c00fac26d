//! Where a vendor call may go. A tenant names its vendor's server (`server_url`), so a call to
//! it must never reach what only we can reach: loopback, link-local (cloud metadata), private
//! and CGNAT ranges, unique-local IPv6, or the cluster's own services. Hosts are resolved and
//! refused when any address is such a one at creation ([`Egress::check_server`]), and every
//! connection resolves through [`Egress::apply`]'s resolver, which only ever hands the
//! connector public addresses, so a name that later resolves elsewhere (DNS rebinding) still
//! reaches nothing inside. A host written as an address is checked at each request
//! ([`Egress::check_url`]), since no resolver sees it. The operator may allow ranges (the local
//! stack allows loopback, where its simulators listen).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

/// The addresses vendor calls may reach: public ones, plus the ranges the operator allows.
#[derive(Debug, Clone)]
pub struct Egress {
    /// `None`: anything (a client used outside a service, against a known server).
    allowed: Option<Arc<[IpNet]>>,
}

impl Default for Egress {
    /// Public addresses only.
    fn default() -> Self {
        Egress::public_only()
    }
}

/// A vendor call refused because of where it would go. Its `Display` is what a tenant may be
/// told ("vendor unreachable"); [`Refused::detail`] is for logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    host: String,
    why: String,
}

impl Refused {
    /// The host and why it was refused, for logs and operators, never for tenants.
    pub fn detail(&self) -> String {
        format!("{}: {}", self.host, self.why)
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("vendor unreachable")
    }
}

impl std::error::Error for Refused {}

impl Egress {
    /// Public addresses only.
    pub fn public_only() -> Self {
        Egress {
            allowed: Some(Arc::from(Vec::new())),
        }
    }

    /// Any address: for a client a test or a tool points at a server of its own.
    pub fn unrestricted() -> Self {
        Egress { allowed: None }
    }

    /// Public addresses and the comma-separated CIDR ranges of `spec` (`127.0.0.0/8,::1/128`).
    pub fn allowing(spec: &str) -> Result<Self, String> {
        let ranges = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("{s:?} is not an address range such as 10.0.0.0/8"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Egress {
            allowed: Some(Arc::from(ranges)),
        })
    }

    /// Whether a call may connect to `ip`.
    pub fn permits(&self, ip: IpAddr) -> bool {
        match &self.allowed {
            None => true,
            Some(allowed) => {
                let ip = canonical(ip);
                internal(ip).is_none() || allowed.iter().any(|net| net.contains(&ip))
            }
        }
    }

    fn refuse(&self, host: &str, ip: IpAddr) -> Result<(), Refused> {
        if self.permits(ip) {
            return Ok(());
        }
        let kind = internal(canonical(ip)).unwrap_or("internal");
        Err(Refused {
            host: host.to_owned(),
            why: format!("{ip} is a {kind} address (allow its range with FORGESYNC_EGRESS_ALLOW)"),
        })
    }

    /// Refuses `url` when its host is written as an address that may not be reached (a named
    /// host is checked by the resolver when it connects).
    pub fn check_url(&self, url: &reqwest::Url) -> Result<(), Refused> {
        match literal(url) {
            Some(ip) => self.refuse(&ip.to_string(), ip),
            None => Ok(()),
        }
    }

    /// [`Egress::check_url`] of a URL as text; text that is no URL is left to the client.
    pub fn check_str(&self, url: &str) -> Result<(), Refused> {
        match reqwest::Url::parse(url) {
            Ok(url) => self.check_url(&url),
            Err(_) => Ok(()),
        }
    }

    /// At creation: `server_url` must name a host whose every address may be reached (resolved
    /// now; the resolver checks again at every connect, which also covers a host that does not
    /// resolve yet).
    pub async fn check_server(&self, server_url: &str) -> Result<(), Refused> {
        if self.allowed.is_none() {
            return Ok(());
        }
        let url = reqwest::Url::parse(server_url).map_err(|e| Refused {
            host: server_url.to_owned(),
            why: format!("not a URL: {e}"),
        })?;
        self.check_url(&url)?;
        let Some(host) = url.host_str().filter(|_| literal(&url).is_none()) else {
            return Ok(());
        };
        let port = url.port_or_known_default().unwrap_or(443);
        // A host that does not resolve yet is no address of ours; the resolver decides when it
        // is connected to.
        let Ok(addrs) = tokio::net::lookup_host((host, port)).await else {
            return Ok(());
        };
        for addr in addrs {
            self.refuse(host, addr.ip())?;
        }
        Ok(())
    }

    /// `builder` connecting only where this policy permits: named hosts resolve to permitted
    /// addresses only, and a name with none fails to connect, naming why in the error's source.
    pub fn apply(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        if self.allowed.is_none() {
            return builder;
        }
        // A proxy from the environment (`HTTP_PROXY`, ...) would resolve the host itself,
        // where this policy cannot see the address: a restricted client uses none.
        builder
            .no_proxy()
            .dns_resolver(Arc::new(Guarded(self.clone())))
    }
}

/// The egress refusal behind a failed request (the resolver's, deep in the transport error's
/// sources), if that is why it failed.
pub fn refused_in(error: &(dyn std::error::Error + 'static)) -> Option<Refused> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(refused) = e.downcast_ref::<Refused>() {
            return Some(refused.clone());
        }
        next = e.source();
    }
    None
}

/// The resolver that hands the connector permitted addresses only.
struct Guarded(Egress);

impl reqwest::dns::Resolve for Guarded {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let egress = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let permitted: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match egress.refuse(&host, a.ip()) {
                    Ok(()) => true,
                    Err(r) => {
                        refused.get_or_insert(r);
                        false
                    }
                })
                .collect();
            if permitted.is_empty()
                && let Some(refused) = refused
            {
                tracing::warn!(detail = %refused.detail(), "vendor call refused by the egress policy");
                return Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(permitted.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The address `url`'s host is written as, if it is one.
fn literal(url: &reqwest::Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// An IPv4 address written as IPv6 (`::ffff:127.0.0.1`) is that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// What kind of address only we (or our network) can reach `ip` is, or `None` for a public one.
fn internal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

fn internal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_private() {
        Some("private")
    } else if a == 100 && (64..128).contains(&b) {
        Some("CGNAT")
    } else if ip.is_unspecified() || a == 0 {
        Some("unspecified")
    } else if ip.is_broadcast() || ip.is_multicast() || a >= 240 {
        Some("broadcast, multicast or reserved")
    } else if a == 192 && b == 0 && ip.octets()[2] == 0 {
        Some("IETF protocol")
    } else if a == 198 && (18..20).contains(&b) {
        Some("benchmarking")
    } else {
        None
    }
}

fn internal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if first & 0xfe00 == 0xfc00 {
        Some("unique-local")
    } else if first & 0xff00 == 0xff00 {
        Some("multicast")
    } else if let Some(v4) = ip.to_ipv4() {
        // IPv4-compatible and NAT64 forms reach the IPv4 address they carry.
        internal_v4(v4)
    } else if ip.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., c, d] = ip.segments();
        internal_v4(Ipv4Addr::from(((c as u32) << 16) | d as u32))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_ranges_are_refused_and_public_ones_reached() {
        let e = Egress::public_only();
        for refused in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "fc12::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!e.permits(ip(refused)), "{refused} was permitted");
        }
        for public in [
            "140.82.112.3",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:140.82.112.3",
        ] {
            assert!(e.permits(ip(public)), "{public} was refused");
        }
    }

    #[test]
    fn the_operator_allows_ranges_and_nothing_else() {
        let e = Egress::allowing("127.0.0.0/8, ::1").unwrap();
        assert!(e.permits(ip("127.0.0.1")));
        assert!(e.permits(ip("::1")));
        assert!(!e.permits(ip("10.0.0.1")));
        assert!(!e.permits(ip("169.254.169.254")));
        assert!(Egress::allowing("localhost").is_err());
        assert!(Egress::unrestricted().permits(ip("10.0.0.1")));
    }

    #[test]
    fn an_address_written_in_the_url_is_checked_and_the_tenant_learns_nothing_of_it() {
        let e = Egress::public_only();
        let url = reqwest::Url::parse("http://169.254.169.254/latest/meta-data").unwrap();
        let refused = e.check_url(&url).unwrap_err();
        assert_eq!(refused.to_string(), "vendor unreachable");
        assert!(
            refused.detail().contains("link-local"),
            "{}",
            refused.detail()
        );
        let v6 = reqwest::Url::parse("http://[::1]:8080/").unwrap();
        assert!(e.check_url(&v6).is_err());
        let named = reqwest::Url::parse("https://github.example.com/").unwrap();
        assert!(e.check_url(&named).is_ok(), "names are the resolver's");
    }
}
