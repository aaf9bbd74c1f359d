//! Who sent a request: the address a login's failures are counted against.
//!
//! Behind the TLS-terminating proxy the README recommends, every request's TCP peer is the proxy:
//! counted by peer, one client could make every login on the site wait. The proxy says who the
//! client is in `X-Forwarded-For`, but so can anybody else: the header is believed only from
//! `TRUSTED_PROXIES`. Each proxy appends the address it got the request from, so the chain is read
//! from the right, skipping trusted proxies; the first address that is not one is the client. What
//! lies further left was written by the client itself and is never believed.
//!
//! An IPv6 client holds a whole /64 (a home or a phone gets at least that), so counting single
//! IPv6 addresses would give it 2^64 allowances: [`ClientAddress`] is the /64 then.

use std::fmt;
use std::net::IpAddr;

use ipnet::{IpNet, Ipv6Net};

/// The address a request is counted against: an IPv4 address, or an IPv6 /64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientAddress(IpNet);

impl ClientAddress {
    /// `address` as counted: IPv4 (also when written IPv4-mapped in IPv6) as itself, IPv6 as its
    /// /64.
    pub fn of(address: IpAddr) -> Self {
        match address.to_canonical() {
            IpAddr::V4(v4) => Self(IpNet::from(IpAddr::V4(v4))),
            IpAddr::V6(v6) => {
                Self(IpNet::V6(Ipv6Net::new(v6, 64).map_or_else(|_| Ipv6Net::from(v6), |net| net.trunc())))
            }
        }
    }

    /// The client of a request whose TCP peer is `peer` and whose `X-Forwarded-For` headers say
    /// `forwarded_for` (every header's hops, in order): the right-most hop that is not a trusted
    /// proxy when the peer is one, else the peer.
    pub fn from_hops<'a>(
        peer: IpAddr,
        forwarded_for: impl IntoIterator<Item = &'a str>,
        trusted: &[IpNet],
    ) -> Self {
        let is_trusted = |a: &IpAddr| trusted.iter().any(|net| net.contains(&a.to_canonical()));
        if !is_trusted(&peer) {
            return Self::of(peer);
        }
        let hops: Vec<&str> = forwarded_for.into_iter().flat_map(|h| h.split(',')).collect();
        let mut client = peer;
        for hop in hops.iter().rev() {
            match parse_hop(hop) {
                Some(address) if is_trusted(&address) => client = address,
                Some(address) => return Self::of(address),
                // Garbage a trusted proxy passed on: what is left of it is the client's own
                // writing, so the last address vouched for is as far as we can see.
                None => break,
            }
        }
        Self::of(client)
    }

    /// [`from_hops`](Self::from_hops) for an actix request.
    pub fn of_request(req: &actix_web::HttpRequest, trusted: &[IpNet]) -> Option<Self> {
        let peer = req.peer_addr()?.ip();
        let headers = req.headers().get_all("x-forwarded-for").filter_map(|v| v.to_str().ok());
        Some(Self::from_hops(peer, headers, trusted))
    }
}

/// One hop of `X-Forwarded-For`: an address, possibly with a port (`192.0.2.1:4711`,
/// `[2001:db8::1]:4711`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    hop.parse::<IpAddr>().ok().or_else(|| hop.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()))
}

/// `192.0.2.1` or `2001:db8:1:2::/64`: the text the failures are stored under.
impl fmt::Display for ClientAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpNet::V4(v4) => write!(f, "{}", v4.addr()),
            IpNet::V6(v6) => write!(f, "{v6}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().expect("CIDR")).collect()
    }

    fn client(peer: &str, hops: &[&str], trusted: &[&str]) -> String {
        ClientAddress::from_hops(peer.parse().expect("address"), hops.iter().copied(), &nets(trusted))
            .to_string()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        assert_eq!(client("198.51.100.9", &["192.0.2.1"], &[]), "198.51.100.9");
        assert_eq!(client("198.51.100.9", &["192.0.2.1"], &["10.0.0.0/8"]), "198.51.100.9");
    }

    #[test]
    fn a_trusted_peer_names_the_client_in_the_right_most_untrusted_hop() {
        let trusted = ["10.0.0.0/8", "127.0.0.1/32"];
        assert_eq!(client("127.0.0.1", &["192.0.2.1"], &trusted), "192.0.2.1");
        // The client wrote 6.6.6.6 itself; our proxies appended 192.0.2.1 and 10.1.1.1.
        assert_eq!(client("10.0.0.2", &["6.6.6.6, 192.0.2.1, 10.1.1.1"], &trusted), "192.0.2.1");
        // Several headers are one chain, in order.
        assert_eq!(client("10.0.0.2", &["6.6.6.6", "192.0.2.1", "10.1.1.1"], &trusted), "192.0.2.1");
        assert_eq!(client("10.0.0.2", &["192.0.2.1:4711"], &trusted), "192.0.2.1");
    }

    #[test]
    fn a_trusted_peer_without_a_usable_hop_is_counted_as_itself_or_its_last_trusted_hop() {
        let trusted = ["10.0.0.0/8"];
        assert_eq!(client("10.0.0.2", &[], &trusted), "10.0.0.2");
        assert_eq!(client("10.0.0.2", &["10.0.0.3"], &trusted), "10.0.0.3");
        assert_eq!(client("10.0.0.2", &["192.0.2.1, not-an-address, 10.0.0.3"], &trusted), "10.0.0.3");
    }

    #[test]
    fn ipv6_clients_are_counted_per_64() {
        let trusted = ["::1/128"];
        let a = client("::1", &["2001:db8:1:2:aaaa::1"], &trusted);
        let b = client("::1", &["[2001:db8:1:2:bbbb::2]:443"], &trusted);
        assert_eq!(a, "2001:db8:1:2::/64");
        assert_eq!(a, b, "one /64, one count");
        assert_ne!(a, client("::1", &["2001:db8:1:3::1"], &trusted), "the next /64 is another");
        assert_eq!(client("2001:db8:9:9:1::1", &[], &[]), "2001:db8:9:9::/64", "an IPv6 peer too");
    }

    #[test]
    fn ipv4_mapped_addresses_are_ipv4() {
        assert_eq!(client("::ffff:10.0.0.2", &["192.0.2.1"], &["10.0.0.0/8"]), "192.0.2.1");
        assert_eq!(client("::ffff:192.0.2.7", &[], &[]), "192.0.2.7");
    }
}
