//! Notices: what two nodes' kernels tell each other about the message links between
//! them, as small SENDs on the set's QPs (see `message`
//! for the links themselves).
//!
//! A notice is [`NOTICE_LEN`] bytes, little-endian, with a magic and a kind first, so a
//! buffer that is none (a bug, or a peer of another version) is refused whole rather
//! than half read. Each names the link it is about by the handle the *receiving* kernel
//! gave it (`to`), learned from the peer's [`Notice::Hello`]; a handle is
//! generation-tagged, so a notice for a link that ended finds nothing.
//!
//! Kernels of the cluster trust each other (the connection carried the cluster key): a
//! notice is checked for form and against the receiver's own tables, never taken as
//! permission to reach memory the receiver did not advertise. What ends a set
//! ([`Notice::Farewell`]) is proved besides.

/// Bytes of a notice on the wire.
pub const NOTICE_LEN: usize = 32;

/// "No link": a [`Notice::Hello`] from an end that knows no peer end yet.
pub const NO_LINK: u64 = u64::MAX;

use super::auth::TAG_LEN;

const MAGIC: u16 = 0x4b4e; // "KN"

/// A link handle on the wire: the shard and the handle within it.
pub const fn link_id(shard: u32, link: u32) -> u64 {
    ((shard as u64) << 32) | link as u64
}

/// The shard and handle of a [`link_id`].
pub const fn split_link_id(id: u64) -> (u32, u32) {
    ((id >> 32) as u32, id as u32)
}

/// What one kernel tells another about a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A virtual QP on the sender's port `from_port` connected to the receiver's port
    /// `to_port`: its end is `from`; `to` is the receiver's end it pairs with, when the
    /// sender already knows it (a listen that took it, or the end it paired with).
    Hello {
        /// The receiver's port (the service).
        to_port: u16,
        /// The sender's port.
        from_port: u16,
        /// The sender's end.
        from: u64,
        /// The receiver's end, or [`NO_LINK`].
        to: u64,
        /// The sender's CONNECT pairs (it named its port, and waits for an end on the
        /// receiver's port that names it back) rather than asks for a listener.
        pair: bool,
    },
    /// A receive posted at the sender's end: the next message from the receiver's end
    /// `to` goes into it (oldest first).
    Advert {
        /// The receiver's end.
        to: u64,
        /// Its place among the sender's adverts on this link (0, 1, ..., wrapping): an
        /// advert out of turn (a duplicate, a replay) is dropped.
        seq: u32,
        /// The buffer.
        addr: u64,
        /// Its length.
        len: u32,
        /// The rkey of the MR it is in (kernel to kernel).
        rkey: u32,
    },
    /// A message from the sender's end went into the oldest receive the receiver's end
    /// `to` advertised (its bytes written just before, on the same QP).
    Data {
        /// The receiver's end.
        to: u64,
        /// The `seq` of the advert it filled: a Data out of turn (a duplicate, a
        /// replay) completes nothing.
        seq: u32,
        /// Bytes written.
        len: u32,
        /// Immediate data, if the message had any.
        imm: Option<u32>,
    },
    /// The sender's end `from` left: nothing more comes from it, and the receiver's end
    /// `to` must stop using its receives (and answer [`Notice::Left`]).
    Leave {
        /// The receiver's port (with `from_port`, to find an end the sender knew no id
        /// of).
        to_port: u16,
        /// The sender's port.
        from_port: u16,
        /// The receiver's end, or [`NO_LINK`] when the sender knew none.
        to: u64,
        /// The end that left.
        from: u64,
    },
    /// The answer to a [`Notice::Leave`]: the receiver's end `to` may take its receives
    /// back (every message for them came before this).
    Left {
        /// The receiver's end (the one that left).
        to: u64,
    },
    /// An export of the sender's node (`rkey`) was revoked: the receiver stops every
    /// request to it and answers [`Notice::RevokeAck`] on the same QP.
    Revoke {
        /// The revoked export's rkey.
        rkey: u32,
    },
    /// The answer to a [`Notice::Revoke`]: nothing of the receiver's for `rkey` comes
    /// after it on this QP.
    RevokeAck {
        /// The revoked export's rkey.
        rkey: u32,
    },
    /// Whether virtual QPs of the sender's are bound to the set this comes on (sent as
    /// that changes): a set either node uses is never evicted by the other.
    Use {
        /// Some are.
        busy: bool,
    },
    /// The sender's kernel is leaving (its module unloads, or its device goes): the
    /// connection this comes on closes next, and its set with it. `tag` proves it (the
    /// sender's farewell tag over the connection's transcript, [`Role::ByeInitiator`]
    /// or [`Role::ByeResponder`]), so no host on the path ends a set by claiming a
    /// departure: a CM disconnect that comes without one is not taken as one.
    ///
    /// [`Role::ByeInitiator`]: super::hello::Role::ByeInitiator
    /// [`Role::ByeResponder`]: super::hello::Role::ByeResponder
    Farewell {
        /// The sender's tag.
        tag: [u8; TAG_LEN],
    },
}

/// Why a buffer is no notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadNotice {
    /// Shorter than [`NOTICE_LEN`].
    Short,
    /// Not our magic.
    Magic,
    /// An unknown kind.
    Kind,
}

const HELLO: u8 = 1;
const ADVERT: u8 = 2;
const DATA: u8 = 3;
const LEAVE: u8 = 4;
const LEFT: u8 = 5;
const REVOKE: u8 = 6;
const REVOKE_ACK: u8 = 7;
const USE: u8 = 8;
const FAREWELL: u8 = 9;

const HAS_IMM: u8 = 1;
const PAIR: u8 = 1;
const BUSY: u8 = 1;

fn put<const N: usize>(b: &mut [u8; NOTICE_LEN], at: usize, v: [u8; N]) {
    b[at..at + N].copy_from_slice(&v);
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Notice {
    /// Whether it may arrive as a SEND with invalidate: only a `Data`, which closes the
    /// key of the receive it filled; any other that closed a key at our NIC is a peer
    /// closing receives it was not sending to (its QP is failed).
    pub fn may_invalidate(&self) -> bool {
        matches!(self, Notice::Data { .. })
    }

    /// The wire form: magic (2), kind (1), flags (1), then the fields from byte 4.
    pub fn encode(&self) -> [u8; NOTICE_LEN] {
        let mut b = [0u8; NOTICE_LEN];
        put(&mut b, 0, MAGIC.to_le_bytes());
        let (kind, flags) = match *self {
            Notice::Hello {
                to_port,
                from_port,
                from,
                to,
                pair,
            } => {
                put(&mut b, 4, to_port.to_le_bytes());
                put(&mut b, 6, from_port.to_le_bytes());
                put(&mut b, 8, from.to_le_bytes());
                put(&mut b, 16, to.to_le_bytes());
                (HELLO, if pair { PAIR } else { 0 })
            }
            Notice::Advert {
                to,
                seq,
                addr,
                len,
                rkey,
            } => {
                put(&mut b, 4, seq.to_le_bytes());
                put(&mut b, 8, to.to_le_bytes());
                put(&mut b, 16, addr.to_le_bytes());
                put(&mut b, 24, len.to_le_bytes());
                put(&mut b, 28, rkey.to_le_bytes());
                (ADVERT, 0)
            }
            Notice::Data { to, seq, len, imm } => {
                put(&mut b, 8, to.to_le_bytes());
                put(&mut b, 16, len.to_le_bytes());
                put(&mut b, 20, imm.unwrap_or(0).to_le_bytes());
                put(&mut b, 24, seq.to_le_bytes());
                (DATA, if imm.is_some() { HAS_IMM } else { 0 })
            }
            Notice::Leave {
                to_port,
                from_port,
                to,
                from,
            } => {
                put(&mut b, 4, to_port.to_le_bytes());
                put(&mut b, 6, from_port.to_le_bytes());
                put(&mut b, 8, to.to_le_bytes());
                put(&mut b, 16, from.to_le_bytes());
                (LEAVE, 0)
            }
            Notice::Left { to } => {
                put(&mut b, 8, to.to_le_bytes());
                (LEFT, 0)
            }
            Notice::Revoke { rkey } => {
                put(&mut b, 4, rkey.to_le_bytes());
                (REVOKE, 0)
            }
            Notice::RevokeAck { rkey } => {
                put(&mut b, 4, rkey.to_le_bytes());
                (REVOKE_ACK, 0)
            }
            Notice::Use { busy } => (USE, if busy { BUSY } else { 0 }),
            Notice::Farewell { tag } => {
                put(&mut b, 4, tag);
                (FAREWELL, 0)
            }
        };
        b[2] = kind;
        b[3] = flags;
        b
    }

    /// The shard of the receiving kernel a notice about a link goes to, of `shards`: an
    /// end named by its id carries its shard; one named by ports only is where
    /// [`shard_of`](super::super::engine::shard_of) puts the sender's node and the
    /// link's ports.
    /// `None` for a notice about an export (the device's, not a link's), and for an id
    /// naming no shard of the receiver (a peer's made-up id).
    pub fn shard(&self, from_gid: &[u8; 16], shards: u32) -> Option<u32> {
        let (to, service) = match *self {
            Notice::Hello {
                to,
                to_port,
                from_port,
                ..
            }
            | Notice::Leave {
                to,
                to_port,
                from_port,
                ..
            } => (to, Some(super::super::engine::port_key(to_port, from_port))),
            Notice::Advert { to, .. } | Notice::Data { to, .. } | Notice::Left { to } => (to, None),
            Notice::Revoke { .. }
            | Notice::RevokeAck { .. }
            | Notice::Use { .. }
            | Notice::Farewell { .. } => return None,
        };
        Some(match service {
            Some(service) if to == NO_LINK => {
                super::super::engine::shard_of(from_gid, service, shards)
            }
            _ => Some(split_link_id(to).0).filter(|k| *k < shards)?,
        })
    }

    /// Reads the notice a receive completed with `byte_len` bytes into `buf`: only
    /// those bytes, never what an earlier notice left in the buffer, so a short SEND
    /// from a peer is refused ([`BadNotice::Short`]) rather than read as the last one
    /// again.
    pub fn received(buf: &[u8], byte_len: u32) -> Result<Notice, BadNotice> {
        let n = (byte_len as usize).min(buf.len());
        Self::decode(&buf[..n])
    }

    /// Reads a notice from the bytes a receive got.
    pub fn decode(b: &[u8]) -> Result<Notice, BadNotice> {
        if b.len() < NOTICE_LEN {
            return Err(BadNotice::Short);
        }
        if u16::from_le_bytes([b[0], b[1]]) != MAGIC {
            return Err(BadNotice::Magic);
        }
        let flags = b[3];
        Ok(match b[2] {
            HELLO => Notice::Hello {
                to_port: u16_at(b, 4),
                from_port: u16_at(b, 6),
                from: u64_at(b, 8),
                to: u64_at(b, 16),
                pair: flags & PAIR != 0,
            },
            ADVERT => Notice::Advert {
                to: u64_at(b, 8),
                seq: u32_at(b, 4),
                addr: u64_at(b, 16),
                len: u32_at(b, 24),
                rkey: u32_at(b, 28),
            },
            DATA => Notice::Data {
                to: u64_at(b, 8),
                seq: u32_at(b, 24),
                len: u32_at(b, 16),
                imm: (flags & HAS_IMM != 0).then(|| u32_at(b, 20)),
            },
            LEAVE => Notice::Leave {
                to_port: u16_at(b, 4),
                from_port: u16_at(b, 6),
                to: u64_at(b, 8),
                from: u64_at(b, 16),
            },
            LEFT => Notice::Left { to: u64_at(b, 8) },
            REVOKE => Notice::Revoke { rkey: u32_at(b, 4) },
            REVOKE_ACK => Notice::RevokeAck { rkey: u32_at(b, 4) },
            USE => Notice::Use {
                busy: flags & BUSY != 0,
            },
            FAREWELL => {
                let mut tag = [0u8; TAG_LEN];
                tag.copy_from_slice(&b[4..4 + TAG_LEN]);
                Notice::Farewell { tag }
            }
            _ => return Err(BadNotice::Kind),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_and_garbage_is_refused() {
        let all = [
            Notice::Hello {
                to_port: 7,
                from_port: 40000,
                from: link_id(3, 0x0100_0002),
                to: NO_LINK,
                pair: false,
            },
            Notice::Hello {
                to_port: 9,
                from_port: 9,
                from: 1,
                to: 2,
                pair: true,
            },
            Notice::Advert {
                to: link_id(1, 9),
                seq: 0x0102_0304,
                addr: 0x7fff_0000_1000,
                len: 4096,
                rkey: 0xabcd,
            },
            Notice::Data {
                to: 5,
                seq: 7,
                len: 12,
                imm: Some(0xdead_beef),
            },
            Notice::Data {
                to: 5,
                seq: u32::MAX,
                len: 0,
                imm: None,
            },
            Notice::Leave {
                to_port: 9,
                from_port: 33000,
                to: NO_LINK,
                from: 4,
            },
            Notice::Left { to: 4 },
            Notice::Revoke { rkey: 0x1234 },
            Notice::RevokeAck { rkey: 0x1234 },
            Notice::Use { busy: true },
            Notice::Use { busy: false },
            Notice::Farewell {
                tag: core::array::from_fn(|i| i as u8 + 1),
            },
        ];
        for n in all {
            assert_eq!(Notice::decode(&n.encode()), Ok(n));
        }
        let b = all[0].encode();
        assert_eq!(Notice::decode(&b[..31]), Err(BadNotice::Short));
        let mut m = b;
        m[0] ^= 1;
        assert_eq!(Notice::decode(&m), Err(BadNotice::Magic));
        let mut k = b;
        k[2] = 0;
        assert_eq!(Notice::decode(&k), Err(BadNotice::Kind));
        assert_eq!(split_link_id(link_id(3, 0x0100_0002)), (3, 0x0100_0002));
    }

    #[test]
    fn an_id_naming_no_shard_of_ours_goes_nowhere() {
        let gid = [7u8; 16];
        let data = |to| Notice::Data {
            to,
            seq: 0,
            len: 8,
            imm: None,
        };
        assert_eq!(data(link_id(3, 9)).shard(&gid, 4), Some(3));
        assert_eq!(data(link_id(4, 9)).shard(&gid, 4), None, "past our shards");
        assert_eq!(data(u64::MAX - 1).shard(&gid, 4), None);
        let hello = Notice::Hello {
            to_port: 5,
            from_port: 40000,
            from: 1,
            to: NO_LINK,
            pair: false,
        };
        assert!(
            hello.shard(&gid, 4).is_some_and(|k| k < 4),
            "by ports: always ours"
        );
    }

    #[test]
    fn a_short_receive_never_reads_the_last_notice_again() {
        // The buffer still holds the previous notice; the peer's next SEND was short.
        let last = Notice::Data {
            to: 5,
            seq: 0,
            len: 12,
            imm: None,
        }
        .encode();
        assert_eq!(
            Notice::received(&last, NOTICE_LEN as u32),
            Ok(Notice::decode(&last).unwrap())
        );
        for short in [0, 1, 4, 31] {
            assert_eq!(
                Notice::received(&last, short),
                Err(BadNotice::Short),
                "{short} bytes"
            );
        }
        // A length past the buffer (no receive completes so) reads the buffer only.
        assert!(Notice::received(&last[..8], 64).is_err());
    }
}
