//! RoCE v2 frames as any host on the segment sees and writes them: the CM's MADs on the
//! GSI QP (Ethernet, IPv4, UDP 4791, BTH, DETH, a 256-byte MAD) with the ICRC rdma_rxe
//! checks (drivers/infiniband/sw/rxe/rxe_icrc.c). For the tests of what a host on the
//! path can do with what crossed the wire in the clear (cm-intruder).

/// RoCE v2's UDP port.
pub const ROCE_PORT: u16 = 4791;
/// Bytes of a MAD.
pub const MAD_LEN: usize = 256;
/// Bytes of a CM message's body (the MAD after its 24-byte header).
pub const BODY_LEN: usize = MAD_LEN - MAD_HDR;
/// The CM's attributes (IBA 12.6).
pub const REQ: u16 = 0x0010;
/// A connection's reply.
pub const REP: u16 = 0x0013;
/// Ready to use: the dialer's last step.
pub const RTU: u16 = 0x0014;
/// A disconnect request.
pub const DREQ: u16 = 0x0015;

const ETH: usize = 14;
const IP: usize = 20;
const UDP: usize = 8;
const BTH: usize = 12;
const DETH: usize = 8;
const MAD_HDR: usize = 24;
const ICRC: usize = 4;
/// BTH opcode of a UD SEND only.
const UD_SEND_ONLY: u8 = 0x64;
/// The GSI QP's Q_Key.
const GSI_QKEY: u32 = 0x8001_0000;
/// The CM's management class and its version.
const CLASS_CM: u8 = 0x07;
const CLASS_VERSION: u8 = 2;
const METHOD_SEND: u8 = 0x03;
/// rxe's seed: a CRC of 8 bytes of 0xff (the masked LRH of InfiniBand) from !0.
const ICRC_SEED: u32 = 0xdebb_20e3;

/// A CM MAD seen on the segment: who sent it to whom, and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmMad {
    /// Ethernet source.
    pub eth_src: [u8; 6],
    /// Ethernet destination.
    pub eth_dst: [u8; 6],
    /// IPv4 source.
    pub ip_src: [u8; 4],
    /// IPv4 destination.
    pub ip_dst: [u8; 4],
    /// The CM attribute ([`REQ`], [`REP`], ...).
    pub attr: u16,
    /// The message after the MAD header.
    pub body: [u8; BODY_LEN],
}

impl CmMad {
    /// The big-endian word at `at` of the body.
    pub fn word(&self, at: usize) -> u32 {
        be32(&self.body[at..])
    }

    /// A 24-bit field in the top of the word at `at` (a QP number).
    pub fn qpn(&self, at: usize) -> u32 {
        self.word(at) >> 8
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Reads a CM MAD from an Ethernet frame, if it is one (a UD SEND to QP 1 over RoCE v2
/// carrying management class 7).
pub fn parse_cm(f: &[u8]) -> Option<CmMad> {
    if f.len() < ETH + IP || f[12..14] != [0x08, 0x00] || f[ETH] != 0x45 || f[ETH + 9] != 17 {
        return None;
    }
    let udp = ETH + IP;
    let bth = udp + UDP;
    let mad = bth + BTH + DETH;
    if f.len() < mad + MAD_LEN + ICRC
        || u16::from_be_bytes([f[udp + 2], f[udp + 3]]) != ROCE_PORT
        || f[bth] != UD_SEND_ONLY
        || be32(&f[bth + 4..]) & 0x00ff_ffff != 1
        || f[mad + 1] != CLASS_CM
    {
        return None;
    }
    let mut m = CmMad {
        eth_dst: f[0..6].try_into().ok()?,
        eth_src: f[6..12].try_into().ok()?,
        ip_src: f[ETH + 12..ETH + 16].try_into().ok()?,
        ip_dst: f[ETH + 16..ETH + 20].try_into().ok()?,
        attr: u16::from_be_bytes([f[mad + 16], f[mad + 17]]),
        body: [0; BODY_LEN],
    };
    m.body.copy_from_slice(&f[mad + MAD_HDR..mad + MAD_LEN]);
    Some(m)
}

/// The reflected CRC-32 of `data` from `crc`, without the usual inversions (the
/// kernel's `crc32_le`).
fn crc32_le(mut crc: u32, data: &[u8]) -> u32 {
    for b in data {
        crc ^= *b as u32;
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
        }
    }
    crc
}

/// The ICRC of the RoCE v2 packet in IPv4 frame `f` (its last 4 bytes the ICRC's place),
/// as rxe computes it: over the IP and UDP headers with their variant fields masked to
/// ones (TOS, TTL, both checksums) and the BTH with its reserved byte masked, then the
/// rest; inverted, in the frame's byte order.
pub fn icrc(f: &[u8]) -> [u8; 4] {
    let end = f.len() - ICRC;
    let mut hdr = [0u8; IP + UDP + BTH];
    hdr.copy_from_slice(&f[ETH..ETH + IP + UDP + BTH]);
    hdr[1] = 0xff; // TOS
    hdr[8] = 0xff; // TTL
    hdr[10..12].fill(0xff); // IP checksum
    hdr[IP + 6..IP + 8].fill(0xff); // UDP checksum
    hdr[IP + UDP + 4] = 0xff; // BTH's resv8a
    let crc = crc32_le(ICRC_SEED, &hdr);
    (!crc32_le(crc, &f[ETH + IP + UDP + BTH..end])).to_le_bytes()
}

/// Whether frame `f`'s ICRC is right.
pub fn icrc_ok(f: &[u8]) -> bool {
    f.len() > ETH + IP + UDP + BTH + ICRC && f[f.len() - ICRC..] == icrc(f)
}

fn ip_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The frame of CM message `m` as its source would send it to the GSI QP of its
/// destination (any host on the segment can write every field of it).
pub fn cm_frame(m: &CmMad, udp_src: u16) -> Vec<u8> {
    let ip_len = IP + UDP + BTH + DETH + MAD_LEN + ICRC;
    let mut f = Vec::with_capacity(ETH + ip_len);
    f.extend_from_slice(&m.eth_dst);
    f.extend_from_slice(&m.eth_src);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = [0u8; IP];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&m.ip_src);
    ip[16..20].copy_from_slice(&m.ip_dst);
    let sum = ip_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&udp_src.to_be_bytes());
    f.extend_from_slice(&ROCE_PORT.to_be_bytes());
    f.extend_from_slice(&((ip_len - IP) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no UDP checksum
                                  // BTH: UD SEND only, the default P_Key, to QP 1; any PSN.
    f.extend_from_slice(&[UD_SEND_ONLY, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1]);
    // DETH: the GSI's Q_Key, from QP 1.
    f.extend_from_slice(&GSI_QKEY.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1]);
    let mut hdr = [0u8; MAD_HDR];
    hdr[0] = 1;
    hdr[1] = CLASS_CM;
    hdr[2] = CLASS_VERSION;
    hdr[3] = METHOD_SEND;
    hdr[8..16].copy_from_slice(&0x6b72_636f_7265_0001u64.to_be_bytes()); // any TID
    hdr[16..18].copy_from_slice(&m.attr.to_be_bytes());
    f.extend_from_slice(&hdr);
    f.extend_from_slice(&m.body);
    f.extend_from_slice(&[0; ICRC]);
    let c = icrc(&f);
    let n = f.len();
    f[n - ICRC..].copy_from_slice(&c);
    f
}

/// A DREQ's body: from the end whose comm ID is `local` to the one whose comm ID is
/// `remote` and whose QP is `remote_qpn` (all three crossed the wire in its REQ and REP).
pub fn dreq_body(local: u32, remote: u32, remote_qpn: u32) -> [u8; BODY_LEN] {
    let mut b = [0u8; BODY_LEN];
    b[0..4].copy_from_slice(&local.to_be_bytes());
    b[4..8].copy_from_slice(&remote.to_be_bytes());
    b[8..12].copy_from_slice(&(remote_qpn << 8).to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dreq() -> CmMad {
        CmMad {
            eth_src: [2, 0, 0, 0, 0, 12],
            eth_dst: [2, 0, 0, 0, 0, 11],
            ip_src: [192, 0, 2, 12],
            ip_dst: [192, 0, 2, 11],
            attr: DREQ,
            body: dreq_body(0x1111_2222, 0x3333_4444, 0x17),
        }
    }

    #[test]
    fn a_forged_frame_reads_back_with_a_good_icrc_and_any_changed_bit_spoils_it() {
        let m = dreq();
        let f = cm_frame(&m, 0xc001);
        assert_eq!(parse_cm(&f), Some(m.clone()));
        let back = parse_cm(&f).unwrap();
        assert_eq!(
            (back.word(0), back.word(4), back.qpn(8)),
            (0x1111_2222, 0x3333_4444, 0x17)
        );
        assert!(icrc_ok(&f));
        assert_eq!(
            ip_checksum(&f[ETH..ETH + IP]),
            0,
            "the IP header sums to all ones"
        );
        // The masked fields may change on the way (a router's TTL): the ICRC holds.
        let mut ttl = f.clone();
        ttl[ETH + 8] = 3;
        assert!(icrc_ok(&ttl));
        // Any other field may not.
        for at in [ETH + 12, ETH + IP + UDP + 7, f.len() - ICRC - 1] {
            let mut g = f.clone();
            g[at] ^= 1;
            assert!(!icrc_ok(&g), "byte {at}");
        }
    }

    #[test]
    fn only_cm_mads_are_read() {
        let f = cm_frame(&dreq(), 0xc001);
        let mut other_qp = f.clone();
        other_qp[ETH + IP + UDP + 7] = 2;
        assert_eq!(parse_cm(&other_qp), None);
        let mut other_class = f.clone();
        other_class[ETH + IP + UDP + BTH + DETH + 1] = 0x04;
        assert_eq!(parse_cm(&other_class), None);
        assert_eq!(parse_cm(&f[..f.len() - 5]), None);
    }

    #[test]
    fn crc_matches_the_standard_check_value() {
        // CRC-32's check value over "123456789", with its usual inversions.
        assert_eq!(!crc32_le(!0, b"123456789"), 0xcbf4_3926);
    }
}
