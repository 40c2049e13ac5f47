//! Node addresses as CONNECT names them: a RoCE GID, from an IP address or a host name.

use std::net::{IpAddr, ToSocketAddrs};

use krcore_abi::errno::Errno;

use crate::Error;

/// The GID of `node`: an IPv4 address is its IPv4-mapped GID (`::ffff:a.b.c.d`, RoCE
/// v2's), an IPv6 address is itself, and anything else is resolved as a host name (the
/// first address it has).
pub fn gid_of(node: &str) -> Result<[u8; 16], Error> {
    let ip = match node.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) => (node, 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(|a| a.ip())
            .ok_or_else(|| Error::errno("resolve node name", Errno::EHOSTUNREACH))?,
    };
    Ok(match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    })
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
}
