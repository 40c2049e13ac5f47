//! The private data of the connection requests kernels send each other, and of the
//! listener's answers: their wire form, read strictly, and the transcript a tag is a MAC
//! over ([`auth`](super::auth) has the protocol).
//!
//! Everything here arrives from whoever can reach the listener's port, before any proof:
//! a reader takes a byte slice of any length and returns `None` for anything that is not
//! exactly what a writer here makes (wrong magic, kind or step, a reserved byte set, an
//! ASK that carries proof bytes, a FRESH time that is no time). rdma_cm may pad private data up to the request's room,
//! so bytes after a message's length are ignored. Integers are big-endian.
//!
//! | message   | bytes | sent                                                     |
//! |-----------|-------|----------------------------------------------------------|
//! | hello     | 56    | in the request: FRESH, or ASK with the dialer's nonce, then PROVE |
//! | challenge | 20    | in the refusal of an ASK: the listener's nonce           |
//! | yield     | 4     | in the refusal of a PEER request the listener's own dial wins |
//! | accept    | 40    | in the accept: the listener's tag, a MetaServer's region |

use super::auth::{NONCE_LEN, TAG_LEN};

/// A hello's magic, "KRC5" (the fifth wire form: a dial's first request may carry its
/// proof at once, FRESH, and a tag covers the step; a kernel of another form is refused
/// at its first hello rather than misread later).
pub const HELLO_MAGIC: u32 = 0x4b52_4335;
/// A challenge's magic, "KRCC".
pub const CHALLENGE_MAGIC: u32 = 0x4b52_4343;
/// A yield's magic, "KRYY".
pub const YIELD_MAGIC: u32 = 0x4b52_5959;
/// Bytes of a hello: all an IB CM REQ has room for after rdma_cm's 36-byte header.
pub const HELLO_LEN: usize = 56;
/// Bytes of a challenge.
pub const CHALLENGE_LEN: usize = 4 + NONCE_LEN;
/// Bytes of a yield: its magic, then the listener's tag over the dialer's request
/// ([`Role::Yielder`]), so that no host without the key makes a dialer yield.
pub const YIELD_LEN: usize = 4 + TAG_LEN;
/// Bytes of an accept.
pub const ACCEPT_LEN: usize = 24 + TAG_LEN;
/// Bytes of a transcript.
pub const TRANSCRIPT_LEN: usize = 32 + 2 * NONCE_LEN;

/// What a connection is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// One QP of a connection set between two nodes.
    Peer = 1,
    /// A node's connection to the MetaServer.
    Meta = 2,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Peer),
            2 => Some(Kind::Meta),
            _ => None,
        }
    }
}

/// A proof: the dialer's tag over the [`Transcript`] and what stands in it for the
/// listener's nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proof {
    /// The listener's nonce, from its challenge (PROVE), or the dialer's time
    /// ([`fresh_nonce`], FRESH).
    pub nonce_r: [u8; NONCE_LEN],
    /// The dialer's tag over the [`Transcript`].
    pub tag: [u8; TAG_LEN],
}

/// A hello's step byte: a request asking for a challenge.
pub const ASK: u8 = 1;
/// A hello's step byte: a request with its proof, answering a challenge.
pub const PROVE: u8 = 2;
/// A hello's step byte: a dial's first request, with a proof made over the dialer's
/// time in place of a challenge ([`auth`](super::auth) says when it is admitted).
pub const FRESH: u8 = 3;

/// What a hello asks: its step and proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A challenge.
    Ask,
    /// A connection, answering a challenge.
    Prove(Proof),
    /// A connection, with a proof over the dialer's time (its `nonce_r` a
    /// [`fresh_nonce`]).
    Fresh(Proof),
}

impl Step {
    /// Its step byte.
    pub const fn byte(&self) -> u8 {
        match self {
            Step::Ask => ASK,
            Step::Prove(_) => PROVE,
            Step::Fresh(_) => FRESH,
        }
    }

    /// Its proof, if it carries one.
    pub const fn proof(&self) -> Option<&Proof> {
        match self {
            Step::Ask => None,
            Step::Prove(p) | Step::Fresh(p) => Some(p),
        }
    }
}

/// What a FRESH proof holds in place of the listener's nonce: the dialer's wall-clock
/// time, ms since the epoch, then zeros.
pub fn fresh_nonce(at_ms: u64) -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    n[..8].copy_from_slice(&at_ms.to_be_bytes());
    n
}

/// The time a [`fresh_nonce`] holds: `None` for bytes that are not one.
pub fn fresh_time(n: &[u8; NONCE_LEN]) -> Option<i64> {
    let t = u64::from_be_bytes(n[..8].try_into().ok()?);
    (n[8..].iter().all(|&b| b == 0) && t <= i64::MAX as u64).then_some(t as i64)
}

/// A connection request's private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// What the connection is for.
    pub kind: Kind,
    /// Which QP of a set ([`Kind::Peer`]); 0 for [`Kind::Meta`].
    pub index: u8,
    /// The dialer's nonce.
    pub nonce_i: [u8; NONCE_LEN],
    /// What it asks.
    pub step: Step,
}

impl Hello {
    /// The wire form.
    pub fn write(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&HELLO_MAGIC.to_be_bytes());
        b[4] = self.kind as u8;
        b[5] = self.index;
        b[6] = self.step.byte();
        b[8..24].copy_from_slice(&self.nonce_i);
        if let Some(p) = self.step.proof() {
            b[24..40].copy_from_slice(&p.nonce_r);
            b[40..56].copy_from_slice(&p.tag);
        }
        b
    }

    /// Reads a request's private data: `None` unless it is a hello as [`write`]
    /// makes one (a MetaServer request names index 0; an ASK carries no proof bytes; a
    /// FRESH one's time is a [`fresh_nonce`]).
    ///
    /// [`write`]: Self::write
    pub fn read(data: &[u8]) -> Option<Hello> {
        let b: &[u8; HELLO_LEN] = data.get(..HELLO_LEN)?.try_into().ok()?;
        if magic(b) != HELLO_MAGIC || b[7] != 0 {
            return None;
        }
        let kind = Kind::from_byte(b[4])?;
        if kind == Kind::Meta && b[5] != 0 {
            return None;
        }
        let proof = Proof {
            nonce_r: b[24..40].try_into().ok()?,
            tag: b[40..56].try_into().ok()?,
        };
        let step = match b[6] {
            ASK if b[24..].iter().all(|&x| x == 0) => Step::Ask,
            PROVE => Step::Prove(proof),
            FRESH if fresh_time(&proof.nonce_r).is_some() => Step::Fresh(proof),
            _ => return None,
        };
        Some(Hello {
            kind,
            index: b[5],
            nonce_i: b[8..24].try_into().ok()?,
            step,
        })
    }
}

fn magic(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// What a dialer makes of the private data of a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A challenge to answer with a PROVE.
    Challenge([u8; NONCE_LEN]),
    /// The listener's own dial to us wins: ours yields to it, once the tag (the
    /// listener's, [`Role::Yielder`], over our request) proves it.
    Yield([u8; TAG_LEN]),
    /// Anything else: refused.
    Refused,
}

impl Refusal {
    /// Reads a refusal's private data (of any length: a refusal from rdma_cm itself, or
    /// from a host that is not a krcore listener, carries none of ours).
    pub fn read(data: &[u8]) -> Refusal {
        if data.len() >= CHALLENGE_LEN && magic(data) == CHALLENGE_MAGIC {
            let mut n = [0u8; NONCE_LEN];
            n.copy_from_slice(&data[4..CHALLENGE_LEN]);
            Refusal::Challenge(n)
        } else if data.len() >= YIELD_LEN && magic(data) == YIELD_MAGIC {
            let mut t = [0u8; TAG_LEN];
            t.copy_from_slice(&data[4..YIELD_LEN]);
            Refusal::Yield(t)
        } else {
            Refusal::Refused
        }
    }

    /// A challenge's wire form.
    pub fn challenge(nonce_r: &[u8; NONCE_LEN]) -> [u8; CHALLENGE_LEN] {
        let mut b = [0u8; CHALLENGE_LEN];
        b[0..4].copy_from_slice(&CHALLENGE_MAGIC.to_be_bytes());
        b[4..].copy_from_slice(nonce_r);
        b
    }

    /// A yield's wire form, with the listener's `tag` ([`Role::Yielder`]).
    pub fn yielding(tag: &[u8; TAG_LEN]) -> [u8; YIELD_LEN] {
        let mut b = [0u8; YIELD_LEN];
        b[0..4].copy_from_slice(&YIELD_MAGIC.to_be_bytes());
        b[4..].copy_from_slice(tag);
        b
    }
}

/// Where a MetaServer's region is, as its accept says (zero in a set's accept).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offer {
    /// The region's address.
    pub base: u64,
    /// The region's rkey.
    pub rkey: u32,
    /// Node records it holds.
    pub node_slots: u32,
    /// Export records it holds.
    pub export_slots: u32,
}

/// An accept's private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept {
    /// The region, for a MetaServer connection.
    pub offer: Offer,
    /// The listener's tag over the [`Transcript`].
    pub tag: [u8; TAG_LEN],
}

impl Accept {
    /// The wire form.
    pub fn write(&self) -> [u8; ACCEPT_LEN] {
        let mut b = [0u8; ACCEPT_LEN];
        b[0..4].copy_from_slice(&HELLO_MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&self.offer.rkey.to_be_bytes());
        b[8..16].copy_from_slice(&self.offer.base.to_be_bytes());
        b[16..20].copy_from_slice(&self.offer.node_slots.to_be_bytes());
        b[20..24].copy_from_slice(&self.offer.export_slots.to_be_bytes());
        b[24..].copy_from_slice(&self.tag);
        b
    }

    /// Reads an accept's private data: `None` unless it is one (its tag unchecked).
    pub fn read(data: &[u8]) -> Option<Accept> {
        let b: &[u8; ACCEPT_LEN] = data.get(..ACCEPT_LEN)?.try_into().ok()?;
        if magic(b) != HELLO_MAGIC {
            return None;
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(Accept {
            offer: Offer {
                rkey: u32_at(4),
                base: u64::from_be_bytes(b[8..16].try_into().ok()?),
                node_slots: u32_at(16),
                export_slots: u32_at(20),
            },
            tag: b[24..].try_into().ok()?,
        })
    }
}

/// One end of a connection, as rdma_cm addresses it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Endpoint {
    /// IPv4 address, in wire order.
    pub addr: [u8; 4],
    /// Port.
    pub port: u16,
}

/// Whose tag a transcript is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The dialer's, in its PROVE (the listener's QP number not known yet).
    Initiator,
    /// The listener's, in its accept.
    Responder,
    /// The listener's, in a yield (its QP number left out: it makes none).
    Yielder,
    /// The dialer's, in its farewell on the connection (its kernel leaving).
    ByeInitiator,
    /// The listener's, in its farewell on the connection.
    ByeResponder,
}

/// What a tag covers: the connection asked for and both ends of it, so that a tag
/// proves nothing for any other (a replay from another address or port, to another
/// QP, or for another kind or index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transcript {
    /// What the connection is for.
    pub kind: Kind,
    /// The step byte of the dialer's hello ([`PROVE`] or [`FRESH`]): a proof of one
    /// step is none of the other.
    pub step: u8,
    /// Which QP of a set.
    pub index: u8,
    /// The dialer.
    pub initiator: Endpoint,
    /// The listener.
    pub responder: Endpoint,
    /// The dialer's QP number.
    pub initiator_qpn: u32,
    /// The listener's QP number (left out of the dialer's tag).
    pub responder_qpn: u32,
    /// The dialer's nonce.
    pub nonce_i: [u8; NONCE_LEN],
    /// The listener's nonce.
    pub nonce_r: [u8; NONCE_LEN],
}

impl Transcript {
    /// The bytes `role`'s tag is a MAC over: a label per role, so that a dialer's tag is
    /// never a listener's, then every field at a fixed place.
    pub fn bytes(&self, role: Role) -> [u8; TRANSCRIPT_LEN] {
        let mut b = [0u8; TRANSCRIPT_LEN];
        b[0..8].copy_from_slice(match role {
            Role::Initiator => b"KRC-INIT",
            Role::Responder => b"KRC-RESP",
            Role::Yielder => b"KRC-YILD",
            Role::ByeInitiator => b"KRC-BYEI",
            Role::ByeResponder => b"KRC-BYER",
        });
        b[8] = self.kind as u8;
        b[9] = self.index;
        b[10] = self.step;
        b[12..16].copy_from_slice(&self.initiator.addr);
        b[16..18].copy_from_slice(&self.initiator.port.to_be_bytes());
        b[18..20].copy_from_slice(&self.responder.port.to_be_bytes());
        b[20..24].copy_from_slice(&self.responder.addr);
        b[24..28].copy_from_slice(&self.initiator_qpn.to_be_bytes());
        let responder_qpn = match role {
            Role::Initiator | Role::Yielder => 0,
            Role::Responder | Role::ByeInitiator | Role::ByeResponder => self.responder_qpn,
        };
        b[28..32].copy_from_slice(&responder_qpn.to_be_bytes());
        b[32..48].copy_from_slice(&self.nonce_i);
        b[48..64].copy_from_slice(&self.nonce_r);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prove() -> Hello {
        Hello {
            kind: Kind::Peer,
            index: 1,
            nonce_i: [7; NONCE_LEN],
            step: Step::Prove(Proof {
                nonce_r: [8; NONCE_LEN],
                tag: [9; TAG_LEN],
            }),
        }
    }

    #[test]
    fn hellos_read_back_as_written() {
        let ask = Hello {
            step: Step::Ask,
            ..prove()
        };
        let fresh = Hello {
            step: Step::Fresh(Proof {
                nonce_r: fresh_nonce(1_790_000_000_000),
                tag: [9; TAG_LEN],
            }),
            ..prove()
        };
        assert_eq!(
            fresh_time(&fresh_nonce(1_790_000_000_000)),
            Some(1_790_000_000_000)
        );
        for h in [prove(), ask, fresh] {
            assert_eq!(Hello::read(&h.write()), Some(h));
            // rdma_cm's padding after the hello is ignored.
            let mut padded = [0xaa; HELLO_LEN + 8];
            padded[..HELLO_LEN].copy_from_slice(&h.write());
            assert_eq!(Hello::read(&padded), Some(h));
        }
    }

    #[test]
    fn anything_else_is_no_hello() {
        let good = prove().write();
        let bad = |at: usize, v: u8| {
            let mut b = good;
            b[at] = v;
            Hello::read(&b)
        };
        assert_eq!(Hello::read(&good[..HELLO_LEN - 1]), None, "short");
        assert_eq!(bad(3, b'2'), None, "the old magic, KRC2");
        assert_eq!(bad(4, 0), None, "kind 0");
        assert_eq!(bad(4, 3), None, "kind 3");
        assert_eq!(bad(6, 4), None, "step 4");
        assert_eq!(bad(3, b'4'), None, "the last magic, KRC4");
        assert_eq!(
            bad(6, FRESH),
            None,
            "a FRESH whose time is no time (low bytes set)"
        );
        assert_eq!(bad(24, 0x80).map(|h| h.step.byte()), Some(PROVE));
        assert_eq!(bad(7, 1), None, "reserved byte");
        let meta = Hello {
            kind: Kind::Meta,
            index: 0,
            ..prove()
        };
        assert!(Hello::read(&meta.write()).is_some());
        let mut m = meta.write();
        m[5] = 1;
        assert_eq!(Hello::read(&m), None, "a MetaServer request names index 0");
        let mut ask = Hello {
            step: Step::Ask,
            ..prove()
        }
        .write();
        ask[55] = 1;
        assert_eq!(Hello::read(&ask), None, "an ASK with proof bytes");
    }

    #[test]
    fn refusals() {
        let n = [5; NONCE_LEN];
        assert_eq!(
            Refusal::read(&Refusal::challenge(&n)),
            Refusal::Challenge(n)
        );
        assert_eq!(
            Refusal::read(&Refusal::challenge(&n)[..CHALLENGE_LEN - 1]),
            Refusal::Refused,
            "a cut challenge"
        );
        let t = [6; TAG_LEN];
        assert_eq!(Refusal::read(&Refusal::yielding(&t)), Refusal::Yield(t));
        assert_eq!(
            Refusal::read(&Refusal::yielding(&t)[..4]),
            Refusal::Refused,
            "the bare magic of the module before proved yields"
        );
        assert_eq!(Refusal::read(&[]), Refusal::Refused);
        assert_eq!(Refusal::read(&[0; 148]), Refusal::Refused);
    }

    #[test]
    fn accepts_read_back_as_written() {
        let a = Accept {
            offer: Offer {
                base: 0x1122_3344_5566_7788,
                rkey: 0xabcd,
                node_slots: 64,
                export_slots: 256,
            },
            tag: [3; TAG_LEN],
        };
        assert_eq!(Accept::read(&a.write()), Some(a));
        assert_eq!(Accept::read(&a.write()[..ACCEPT_LEN - 1]), None);
        let mut b = a.write();
        b[0] = 0;
        assert_eq!(Accept::read(&b), None);
    }

    #[test]
    fn a_transcript_names_every_field_and_the_role() {
        let t = Transcript {
            kind: Kind::Peer,
            step: PROVE,
            index: 1,
            initiator: Endpoint {
                addr: [192, 0, 2, 11],
                port: 40_000,
            },
            responder: Endpoint {
                addr: [192, 0, 2, 12],
                port: 7471,
            },
            initiator_qpn: 17,
            responder_qpn: 18,
            nonce_i: [1; NONCE_LEN],
            nonce_r: [2; NONCE_LEN],
        };
        let base = t.bytes(Role::Responder);
        assert_ne!(t.bytes(Role::Initiator)[..8], base[..8]);
        // Every role its own label: a tag of one is never another's (a farewell is no
        // accept, and one end's farewell is not the other's).
        let roles = [
            Role::Initiator,
            Role::Responder,
            Role::Yielder,
            Role::ByeInitiator,
            Role::ByeResponder,
        ];
        for (i, a) in roles.iter().enumerate() {
            for b in &roles[i + 1..] {
                assert_ne!(t.bytes(*a)[..8], t.bytes(*b)[..8], "{a:?} {b:?}");
            }
        }
        // A farewell comes once the connection is up: both QP numbers are bound.
        let qpn = Transcript {
            responder_qpn: 99,
            ..t
        };
        assert_ne!(qpn.bytes(Role::ByeInitiator), t.bytes(Role::ByeInitiator));
        assert_ne!(qpn.bytes(Role::ByeResponder), t.bytes(Role::ByeResponder));
        // The dialer cannot know the listener's QP number: its tag leaves it out.
        let other_qpn = Transcript {
            responder_qpn: 99,
            ..t
        };
        assert_eq!(other_qpn.bytes(Role::Initiator), t.bytes(Role::Initiator));
        let changed = [
            Transcript {
                kind: Kind::Meta,
                ..t
            },
            Transcript { index: 0, ..t },
            Transcript { step: FRESH, ..t },
            Transcript {
                initiator: Endpoint {
                    addr: [192, 0, 2, 13],
                    ..t.initiator
                },
                ..t
            },
            Transcript {
                initiator: Endpoint {
                    port: 40_001,
                    ..t.initiator
                },
                ..t
            },
            Transcript {
                responder: Endpoint {
                    port: 7472,
                    ..t.responder
                },
                ..t
            },
            Transcript {
                responder: Endpoint {
                    addr: [192, 0, 2, 14],
                    ..t.responder
                },
                ..t
            },
            Transcript {
                initiator_qpn: 16,
                ..t
            },
            other_qpn,
            Transcript {
                nonce_i: [3; NONCE_LEN],
                ..t
            },
            Transcript {
                nonce_r: [3; NONCE_LEN],
                ..t
            },
        ];
        for c in changed {
            assert_ne!(c.bytes(Role::Responder), base, "{c:?}");
        }
    }
}
