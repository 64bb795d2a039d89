//! The client's address behind trusted proxies (an ingress controller, a load balancer).
//!
//! The gateway knows its clients by address for the per-address rate limit, the stream cap of
//! unsigned callers, and the `X-Forwarded-For` it passes to oauth-service. Behind a proxy the
//! TCP peer is the proxy, so when the peer is within `trusted_proxies` the client is the
//! right-most `X-Forwarded-For` entry that is not itself a trusted proxy (entries further left
//! are whatever the client claimed). [`apply`] puts that address into the request's
//! `ConnectInfo`, so every handler that asks for the peer gets the client.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request};
use http::HeaderMap;
use ipnet::IpNet;

/// The networks whose `X-Forwarded-For` is believed (empty: nobody's).
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parse CIDRs (`10.0.0.0/8`, `fd00::/8`) or single addresses; `Err` names the bad entry.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        entries
            .iter()
            .map(|e| {
                let e = e.trim();
                e.parse::<IpNet>()
                    .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("trusted_proxies: `{e}` is not a CIDR (e.g. 10.0.0.0/8) or an address"))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client's address for a request from `peer` carrying `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        // Every X-Forwarded-For line, in order, as one list; walked from the right (the hop
        // nearest to us). An entry that is not an address ends the walk at the last good one.
        let entries: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        let mut client = peer;
        for entry in entries.iter().rev() {
            let Some(ip) = parse_entry(entry) else { break };
            client = ip;
            if !self.trusts(ip) {
                break;
            }
        }
        client
    }
}

/// An `X-Forwarded-For` entry: an address, or one with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_entry(entry: &str) -> Option<IpAddr> {
    entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .map(|ip| ip.to_canonical())
}

/// Replace the request's `ConnectInfo` with the client's address (the peer's port).
pub fn apply(proxies: &TrustedProxies, req: &mut Request) {
    if let Some(ConnectInfo(peer)) = req.extensions().get::<ConnectInfo<SocketAddr>>().copied() {
        let client = proxies.client(peer.ip(), req.headers());
        if client != peer.ip() {
            req.extensions_mut().insert(ConnectInfo(SocketAddr::new(client, peer.port())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(cidrs: &[&str]) -> TrustedProxies {
        TrustedProxies::parse(&cidrs.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>()).expect("valid")
    }

    fn xff(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append("x-forwarded-for", l.parse().expect("header value"));
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let p = proxies(&["10.0.0.0/8"]);
        assert_eq!(p.client(ip("192.0.2.7"), &xff(&["203.0.113.9"])), ip("192.0.2.7"));
        assert_eq!(TrustedProxies::default().client(ip("10.1.2.3"), &xff(&["203.0.113.9"])), ip("10.1.2.3"));
    }

    #[test]
    fn behind_a_trusted_proxy_the_right_most_untrusted_entry_is_the_client() {
        let p = proxies(&["10.0.0.0/8", "fd00::/8"]);
        // The client claimed 1.1.1.1; the ingress appended the real address; a second proxy too.
        let h = xff(&["1.1.1.1, 198.51.100.4", "10.0.0.5"]);
        assert_eq!(p.client(ip("10.9.9.9"), &h), ip("198.51.100.4"));
        assert_eq!(p.client(ip("fd00::1"), &xff(&["2001:db8::7"])), ip("2001:db8::7"));
        assert_eq!(p.client(ip("10.9.9.9"), &xff(&["198.51.100.4:4711"])), ip("198.51.100.4"), "with a port");
    }

    #[test]
    fn without_a_usable_header_the_peer_or_the_last_trusted_hop_is_the_client() {
        let p = proxies(&["10.0.0.0/8"]);
        assert_eq!(p.client(ip("10.0.0.1"), &HeaderMap::new()), ip("10.0.0.1"));
        assert_eq!(p.client(ip("10.0.0.1"), &xff(&["garbage, 10.0.0.2"])), ip("10.0.0.2"));
        assert_eq!(
            p.client(ip("10.0.0.1"), &xff(&["10.0.0.3, 10.0.0.2"])),
            ip("10.0.0.3"),
            "all trusted: the furthest"
        );
        // IPv4 peers on a dual-stack socket.
        assert_eq!(p.client(ip("::ffff:10.0.0.1"), &xff(&["192.0.2.1"])), ip("192.0.2.1"));
    }

    #[test]
    fn bad_entries_are_refused_by_name() {
        let err = TrustedProxies::parse(&["10.0.0.0/33".to_owned()]).expect_err("refused");
        assert!(err.contains("10.0.0.0/33"), "{err}");
        assert!(TrustedProxies::parse(&["192.0.2.1".to_owned(), "::1/128".to_owned()]).is_ok());
    }
}
