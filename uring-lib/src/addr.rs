//! Node addresses as CONNECT names them: a RoCE GID, from an IP address or a host name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use krcore_abi::errno::Errno;

use crate::Error;

/// A node as [`Ring::connect`](crate::Ring::connect) names it: anything address-like.
///
/// - An IPv4 address is its IPv4-mapped GID (`::ffff:a.b.c.d`, RoCE v2's), and an
///   IPv6 address is itself.
/// - A socket address is its IP's node: the port plays no part (a krcore service is
///   its own number). So a peer met over TCP is `stream.peer_addr()`.
/// - A GID (`[u8; 16]`) is taken as it is.
/// - A string is an address, or else a host name, resolved when the CONNECT is made:
///   to its first IPv4 address, the family the module serves, else its first. The
///   blocking [`Ring`](crate::Ring) resolves in place; `AsyncRing` (feature `tokio`)
///   through tokio, never blocking the executor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A GID.
    Gid([u8; 16]),
    /// A host name, not yet resolved.
    Host(String),
}

impl From<[u8; 16]> for Node {
    fn from(gid: [u8; 16]) -> Node {
        Node::Gid(gid)
    }
}

impl From<IpAddr> for Node {
    fn from(ip: IpAddr) -> Node {
        Node::Gid(match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        })
    }
}

impl From<Ipv4Addr> for Node {
    fn from(ip: Ipv4Addr) -> Node {
        IpAddr::V4(ip).into()
    }
}

impl From<Ipv6Addr> for Node {
    fn from(ip: Ipv6Addr) -> Node {
        IpAddr::V6(ip).into()
    }
}

impl From<SocketAddr> for Node {
    fn from(a: SocketAddr) -> Node {
        a.ip().into()
    }
}

impl From<&str> for Node {
    fn from(s: &str) -> Node {
        match s.parse::<IpAddr>() {
            Ok(ip) => ip.into(),
            Err(_) => Node::Host(s.to_owned()),
        }
    }
}

impl From<String> for Node {
    fn from(s: String) -> Node {
        s.as_str().into()
    }
}

impl From<&String> for Node {
    fn from(s: &String) -> Node {
        s.as_str().into()
    }
}

impl Node {
    /// Its GID; a host name is resolved here, blocking (`EHOSTUNREACH` if it has no
    /// address).
    pub fn gid(&self) -> Result<[u8; 16], Error> {
        match self {
            Node::Gid(g) => Ok(*g),
            Node::Host(h) => {
                let addrs = (h.as_str(), 0).to_socket_addrs().ok();
                Ok(Node::from(pick(addrs.into_iter().flatten().map(|a| a.ip()))?).gid_now())
            }
        }
    }

    /// As [`gid`](Self::gid), resolving a host name without blocking the executor.
    #[cfg(feature = "tokio")]
    pub(crate) async fn gid_async(&self) -> Result<[u8; 16], Error> {
        match self {
            Node::Gid(g) => Ok(*g),
            Node::Host(h) => {
                let addrs = tokio::net::lookup_host((h.as_str(), 0)).await.ok();
                Ok(Node::from(pick(addrs.into_iter().flatten().map(|a| a.ip()))?).gid_now())
            }
        }
    }

    /// The GID of a node made from an address.
    fn gid_now(&self) -> [u8; 16] {
        match self {
            Node::Gid(g) => *g,
            Node::Host(_) => unreachable!("made from an address"),
        }
    }
}

/// The address a name's lookup gave that CONNECT uses: the first IPv4 one, else the
/// first.
fn pick(addrs: impl Iterator<Item = IpAddr>) -> Result<IpAddr, Error> {
    let mut first = None;
    for a in addrs {
        if a.is_ipv4() {
            return Ok(a);
        }
        first.get_or_insert(a);
    }
    first.ok_or_else(|| Error::errno("resolve node name", Errno::EHOSTUNREACH))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid_of(n: impl Into<Node>) -> Result<[u8; 16], Error> {
        n.into().gid()
    }

    #[test]
    fn addresses_and_names_become_gids() {
        let v4 = gid_of("10.0.0.2").unwrap();
        assert_eq!(&v4[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&v4[12..], &[10, 0, 0, 2]);
        assert_eq!(gid_of(Ipv4Addr::new(10, 0, 0, 2)).unwrap(), v4);
        let sock: SocketAddr = "10.0.0.2:9999".parse().unwrap();
        assert_eq!(
            gid_of(sock).unwrap(),
            v4,
            "a socket address is its IP's node"
        );
        assert_eq!(gid_of(v4).unwrap(), v4, "a GID is itself");
        assert_eq!(gid_of("fe80::1").unwrap()[15], 1);
        assert_eq!(gid_of("localhost").unwrap()[15], 1, "a name resolves");
        assert_eq!(
            Node::from("localhost"),
            Node::Host("localhost".into()),
            "when used"
        );
        let e = gid_of("no-such-host.invalid").unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(krcore_abi::errno::Errno::EHOSTUNREACH.0)
        );
    }

    /// A name with an IPv6 address first (as resolvers often order them) still
    /// connects over IPv4, the only family the module serves. Before, the first won.
    #[test]
    fn a_name_resolves_to_its_ipv4_address_first() {
        let v6: IpAddr = "fe80::1".parse().unwrap();
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(pick([v6, v4].into_iter()).unwrap(), v4);
        assert_eq!(pick([v6].into_iter()).unwrap(), v6, "only IPv6: as it is");
    }
}
