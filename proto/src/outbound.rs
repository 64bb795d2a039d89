//! Outbound HTTP with an SSRF guard, shared by the services that fetch URLs chosen by others
//! (registry `http` tools, client metadata documents): private, loopback, link-local and other
//! non-public addresses are refused — for literal IPs, for every address a name resolves to
//! (checked when connecting, so DNS answers are covered) and for redirect targets — unless the
//! operator allows private networks.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Once};
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether an address is one the public internet can reach: not loopback, private, link-local,
/// shared (CGNAT), unspecified, broadcast, multicast, documentation or unique-local.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (b == 18 || b == 19)))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}

/// Resolves names like the system does, then drops every non-public address.
struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = addrs.into_iter().filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(format!("`{host}` resolves only to private or local addresses").into());
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

/// The refusal for a URL's literal IP host, if it has one that is not public.
pub fn literal_refused(url: &reqwest::Url) -> Option<String> {
    match url.host() {
        Some(url::Host::Ipv4(ip)) if !is_public(IpAddr::V4(ip)) => Some(format!("address {ip} is not public")),
        Some(url::Host::Ipv6(ip)) if !is_public(IpAddr::V6(ip)) => Some(format!("address {ip} is not public")),
        _ => None,
    }
}

pub fn client(allow_private: bool, timeout: Duration) -> Result<reqwest::Client, String> {
    static TLS: Once = Once::new();
    TLS.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let mut builder = reqwest::Client::builder().timeout(timeout).connect_timeout(timeout.min(Duration::from_secs(5)));
    if allow_private {
        builder = builder.redirect(reqwest::redirect::Policy::limited(5));
    } else {
        builder = builder.dns_resolver(Arc::new(PublicOnly)).redirect(reqwest::redirect::Policy::custom(|attempt| {
            if attempt.previous().len() >= 5 {
                attempt.error("too many redirects")
            } else if let Some(refused) = literal_refused(attempt.url()) {
                attempt.error(format!("redirect refused: {refused}"))
            } else {
                attempt.follow()
            }
        }));
    }
    builder.build().map_err(|e| format!("cannot build an HTTP client: {e}"))
}

/// An error with its causes, `a: b: c`, for messages that must say why a call failed.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_and_private_addresses() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::",
        ] {
            assert!(!is_public(private.parse().expect("ip")), "{private}");
        }
        for public in ["1.1.1.1", "93.184.216.34", "2606:4700:4700::1111"] {
            assert!(is_public(public.parse().expect("ip")), "{public}");
        }
    }
}
