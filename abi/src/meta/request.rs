//! What a node's kernel asks of the MetaServer's kernel, and the answers: the only way
//! an entry of the region is written.
//!
//! Members READ the region one-sided (lookups stay one READ), but neither the region's
//! key nor their connection's QP grants them a WRITE or an atomic. To register its
//! record, publish or revoke, a node SENDs one [`Request`] on its MetaServer connection
//! and waits for one [`Reply`]; the MetaServer's kernel checks that what it would write
//! is the asking node's own ([`serve`](super::serve)) and writes it.
//!
//! ```text
//! request: | kind u8 | 0 u8 x3 | slot u32 | body (a record's payload, or a name) |
//! reply:   | kind u8 | refusal u8 | 0 u8 x6 | value u64 |
//! ```
//!
//! Both are little-endian and of fixed length per kind; anything else is malformed.

use super::record::{ExportRecord, NodeRecord, EXPORT_PAYLOAD, NAME_LEN, NODE_PAYLOAD};
use super::tables::Unreachable;

/// Bytes of the longest request (a publication: the head and an export's payload).
pub const REQUEST_LEN: usize = 72;
const _: () = assert!(REQUEST_LEN == HEAD + EXPORT_PAYLOAD);
/// Bytes of a reply.
pub const REPLY_LEN: usize = 16;

const HEAD: usize = 8;
const REGISTER: u8 = 1;
const PUBLISH: u8 = 2;
const REVOKE: u8 = 3;

const REGISTERED: u8 = 1;
const PUBLISHED: u8 = 2;
const REVOKED: u8 = 3;
const REFUSED: u8 = 4;

/// A request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Register the asking node's record (the incarnation it had, 0 when it had none):
    /// the MetaServer chooses the new one.
    Register(NodeRecord),
    /// Publish an export of the asking node.
    Publish(ExportRecord),
    /// Revoke the asking node's export `name` in slot `slot`.
    Revoke {
        /// Its name.
        name: [u8; NAME_LEN],
        /// The slot it was published in.
        slot: u32,
    },
}

/// Why the MetaServer refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Refusal {
    /// The request's bytes are not a request.
    Malformed = 1,
    /// What it would write is not the asking node's: a record naming another address,
    /// an export of a node it is not registered as, or another node's export.
    NotYours = 2,
    /// Another address holds the node slot the asking node's id maps to.
    SlotHeld = 3,
    /// The name is published already.
    Taken = 4,
    /// The name's probe window has no free slot.
    Full = 5,
    /// Entries stayed torn for every try.
    Contended = 6,
    /// The asking node holds its share of the exports table already.
    Share = 7,
}

impl Refusal {
    fn from_u8(v: u8) -> Option<Refusal> {
        use Refusal::*;
        [Malformed, NotYours, SlotHeld, Taken, Full, Contended, Share]
            .into_iter()
            .find(|r| *r as u8 == v)
    }
}

/// A reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Registered, with this incarnation.
    Registered(u64),
    /// Published in this slot.
    Published(u32),
    /// Revoked (or it was not there).
    Revoked,
    /// Refused.
    Refused(Refusal),
}

/// Sending a request to the MetaServer's kernel and waiting for its reply (bounded):
/// a node's MetaServer connection.
pub trait Call {
    /// The reply to `req`.
    fn call(&mut self, req: &Request) -> Result<Reply, Unreachable>;
}

impl Request {
    /// Its bytes in `out`; how many.
    pub fn encode(&self, out: &mut [u8; REQUEST_LEN]) -> usize {
        out.fill(0);
        let (kind, slot, n) = match self {
            Request::Register(me) => {
                out[HEAD..HEAD + NODE_PAYLOAD].copy_from_slice(&me.encode());
                (REGISTER, 0, NODE_PAYLOAD)
            }
            Request::Publish(rec) => {
                out[HEAD..HEAD + EXPORT_PAYLOAD].copy_from_slice(&rec.encode());
                (PUBLISH, 0, EXPORT_PAYLOAD)
            }
            Request::Revoke { name, slot } => {
                out[HEAD..HEAD + NAME_LEN].copy_from_slice(name);
                (REVOKE, *slot, NAME_LEN)
            }
        };
        out[0] = kind;
        out[4..8].copy_from_slice(&slot.to_le_bytes());
        HEAD + n
    }

    /// The request `b` holds, or `None`: a kind it names no request of, a length not
    /// that kind's, or nonzero reserved bytes (a record's padding included).
    pub fn decode(b: &[u8]) -> Option<Request> {
        let (head, body) = (b.get(..HEAD)?, b.get(HEAD..)?);
        if head[1..4] != [0; 3] {
            return None;
        }
        let slot = u32::from_le_bytes(head[4..8].try_into().ok()?);
        // A record's padding must be zero: read back, it is the bytes its writer sent.
        match (head[0], body.len(), slot) {
            (REGISTER, NODE_PAYLOAD, 0) => {
                let r = NodeRecord::decode(body.try_into().ok()?);
                (r.encode()[..] == *body).then_some(Request::Register(r))
            }
            (PUBLISH, EXPORT_PAYLOAD, 0) => {
                let r = ExportRecord::decode(body.try_into().ok()?);
                (r.encode()[..] == *body).then_some(Request::Publish(r))
            }
            (REVOKE, NAME_LEN, _) => Some(Request::Revoke {
                name: body.try_into().ok()?,
                slot,
            }),
            _ => None,
        }
    }
}

impl Reply {
    /// Its bytes.
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        let (kind, refusal, value) = match *self {
            Reply::Registered(i) => (REGISTERED, 0, i),
            Reply::Published(s) => (PUBLISHED, 0, s as u64),
            Reply::Revoked => (REVOKED, 0, 0),
            Reply::Refused(r) => (REFUSED, r as u8, 0),
        };
        b[0] = kind;
        b[1] = refusal;
        b[8..].copy_from_slice(&value.to_le_bytes());
        b
    }

    /// The reply `b` holds, or `None` (a MetaServer's bytes are checked as a peer's).
    pub fn decode(b: &[u8]) -> Option<Reply> {
        if b.len() != REPLY_LEN || b[2..8] != [0; 6] {
            return None;
        }
        let value = u64::from_le_bytes(b[8..].try_into().ok()?);
        match (b[0], b[1]) {
            (REGISTERED, 0) if value != 0 => Some(Reply::Registered(value)),
            (PUBLISHED, 0) => Some(Reply::Published(u32::try_from(value).ok()?)),
            (REVOKED, 0) if value == 0 => Some(Reply::Revoked),
            (REFUSED, r) if value == 0 => Refusal::from_u8(r).map(Reply::Refused),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::record::name;

    fn all() -> [Request; 3] {
        [
            Request::Register(NodeRecord {
                gid: [7; 16],
                ipv4: [192, 0, 2, 1],
                cm_port: 7471,
                incarnation: 3,
            }),
            Request::Publish(ExportRecord {
                name: name("kv").unwrap(),
                node: 1,
                incarnation: 3,
                addr: 0x1000,
                len: 4096,
                access: 2,
                rkey: 0x1234,
                grant: crate::meta::record::Grant {
                    uid: 1000,
                    gid: 1000,
                    mode: crate::meta::record::MODE_DEFAULT,
                },
            }),
            Request::Revoke {
                name: name("kv").unwrap(),
                slot: 9,
            },
        ]
    }

    #[test]
    fn requests_and_replies_come_back_as_sent() {
        for r in all() {
            let mut b = [0u8; REQUEST_LEN];
            let n = r.encode(&mut b);
            assert_eq!(Request::decode(&b[..n]), Some(r));
        }
        for r in [
            Reply::Registered(4),
            Reply::Published(40959),
            Reply::Revoked,
            Reply::Refused(Refusal::NotYours),
            Reply::Refused(Refusal::Contended),
        ] {
            assert_eq!(Reply::decode(&r.encode()), Some(r));
        }
    }

    #[test]
    fn a_short_long_or_unknown_request_is_malformed() {
        for r in all() {
            let mut b = [0u8; REQUEST_LEN];
            let n = r.encode(&mut b);
            for len in 0..REQUEST_LEN {
                if len != n {
                    assert_eq!(Request::decode(&b[..len]), None, "{r:?} cut to {len}");
                }
            }
            let mut bad = b;
            bad[2] = 1;
            assert_eq!(Request::decode(&bad[..n]), None);
        }
        let mut b = [0u8; REQUEST_LEN];
        let n = all()[0].encode(&mut b);
        b[0] = 9;
        assert_eq!(Request::decode(&b[..n]), None);
        // A slot on anything but a revocation is reserved, and so is a record's padding.
        let n = all()[1].encode(&mut b);
        b[4] = 1;
        assert_eq!(Request::decode(&b[..n]), None);
        let n = all()[0].encode(&mut b);
        b[HEAD + 22] = 9;
        assert_eq!(Request::decode(&b[..n]), None, "a node record's padding");
        assert_eq!(
            Reply::decode(&[4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            None
        );
        assert_eq!(Reply::decode(&[1; 15]), None);
    }
}
