//! Node addresses as CONNECT names them: a RoCE GID, from an IP address or a host name.

use std::net::{IpAddr, ToSocketAddrs};

use krcore_abi::errno::Errno;

use crate::Error;

/// The GID of `node`: an IPv4 address is its IPv4-mapped GID (`::ffff:a.b.c.d`, RoCE
/// v2's), an IPv6 address is itself, and anything else is resolved as a host name (its
/// first IPv4 address, as the module serves RoCE v2 over IPv4; else its first). The
/// lookup blocks: async code has `AsyncRing::connect_to` (feature `tokio`), which
/// resolves through tokio.
pub fn gid_of(node: &str) -> Result<[u8; 16], Error> {
    let ip = match node.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) => pick((node, 0).to_socket_addrs().ok().into_iter().flatten().map(|a| a.ip()))?,
    };
    Ok(gid_of_ip(ip))
}

/// As [`gid_of`], resolving a host name without blocking the executor.
#[cfg(feature = "tokio")]
pub(crate) async fn gid_of_async(node: &str) -> Result<[u8; 16], Error> {
    let ip = match node.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) => pick(tokio::net::lookup_host((node, 0)).await.ok().into_iter().flatten().map(|a| a.ip()))?,
    };
    Ok(gid_of_ip(ip))
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

fn gid_of_ip(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names_become_gids() {
        let v4 = gid_of("10.0.0.2").unwrap();
        assert_eq!(&v4[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&v4[12..], &[10, 0, 0, 2]);
        assert_eq!(gid_of("fe80::1").unwrap()[15], 1);
        assert_eq!(gid_of("localhost").unwrap()[15], 1, "a name resolves");
        let e = gid_of("no-such-host.invalid").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EHOSTUNREACH));
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
