//! Listening for a service: peers from any node, each given a virtual QP here.
//!
//! A LISTEN entry completes more than once (io_uring's multishot accept): first when the
//! kernel listens, then once per peer node whose virtual QP CONNECTs to this node for the
//! service, and a last time, without `MORE`, when it ends. The library keeps that
//! entry's tag in a [`Listener`]; [`Ring::accept`](crate::Ring::accept) and
//! [`AsyncRing::accept`](crate::AsyncRing::accept) take its completions one at a time.

use std::net::Ipv4Addr;
use std::sync::Weak;

use krcore_abi::cqe::{Cqe, CqeFlags};
use krcore_abi::errno::Errno;
use krcore_abi::sqe::Sqe;

use crate::core::Keep;
use crate::lock::{lock, CoreGuard, CoreLock};
use crate::{Error, Vqp};

/// A service this ring listens on. Each peer node whose virtual QP connects to this
/// node for the service becomes an [`Accepted`] virtual QP of this ring, as if this
/// ring had connected to that node: messages from that peer's virtual QP reach its
/// receives, and its SENDs reach the peer's.
///
/// One ring per node listens on a service at a time (another gets `ServiceTaken`), and
/// while it does, this node's own CONNECT to a peer that joined it fails
/// `ServiceTaken` too. It ends with [`Ring::unlisten`](crate::Ring::unlisten), as a
/// socket's listen ends with its close: when it is dropped (peers that joined and were
/// not accepted are disconnected), or with the ring.
#[derive(Debug)]
pub struct Listener {
    pub(crate) service: u32,
    /// The LISTEN entry's tag: each of its completions carries it.
    pub(crate) tag: u64,
    /// Its last completion came: it listens no more.
    pub(crate) ended: bool,
    /// The ring that listens; gone with the ring (and its listen with it).
    pub(crate) ring: Weak<CoreLock>,
    /// That ring's identity.
    pub(crate) ring_id: u64,
}

impl Listener {
    /// The service.
    pub fn service(&self) -> u32 {
        self.service
    }

    /// Whether it has ended (its last completion was taken).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The LISTEN's first completion on `ring`: listening, or why not.
    pub(crate) fn started(service: u32, c: &Cqe, ring: Weak<CoreLock>) -> Result<Listener, Error> {
        if c.res < 0 {
            return Err(Error::failed("listen", c));
        }
        Ok(Listener {
            service,
            tag: c.user_data,
            ended: c.flags & CqeFlags::MORE.bits() == 0,
            ring_id: crate::ops::ring_id(&ring),
            ring,
        })
    }

    /// After its UNLISTEN completed (or the listen ended): the peers that joined and
    /// were not accepted yet, its completions gone from `core`, and it ended.
    pub(crate) fn finish(&mut self, core: &mut CoreGuard<'_>) -> Vec<Accepted> {
        let mut joined = Vec::new();
        while let Some(c) = core.take_next(self.tag) {
            if let Ok(a) = self.take(&c) {
                joined.push(a);
            }
        }
        core.drop_tag(self.tag);
        self.ended = true;
        joined
    }

    /// A later completion of the LISTEN: a peer that joined, or a refusal (the listen
    /// goes on), or its end.
    pub(crate) fn take(&mut self, c: &Cqe) -> Result<Accepted, Error> {
        if c.flags & CqeFlags::MORE.bits() == 0 {
            self.ended = true;
        }
        if c.res < 0 {
            return Err(Error::failed("accept", c));
        }
        if c.flags & CqeFlags::ACCEPT.bits() == 0 {
            return Err(Error::errno(
                "accept: not a peer's completion",
                Errno::EPROTO,
            ));
        }
        Ok(Accepted {
            vqp: Vqp {
                handle: c.res as u32,
                qpn: c.aux as u32,
                port: c.port,
                ring: self.ring_id,
            },
            peer: Ipv4Addr::from((c.aux >> 32) as u32),
            peer_port: c.port,
        })
    }

    /// Whether it is `ring`'s listen (accepts and the unlisten go to that ring only).
    pub(crate) fn check(&self, ring: &CoreLock) -> Result<(), Error> {
        match self.ring_id == ring.id {
            true => Ok(()),
            false => Err(crate::ops::foreign()),
        }
    }

    /// The error for a wait on a listen that ended.
    pub(crate) fn over() -> Error {
        Error::errno("accept: the listen has ended", Errno::ECANCELED)
    }
}

impl Drop for Listener {
    /// Ends the listen (UNLISTEN) and disconnects the peers that joined and were not
    /// accepted, without waiting (a drop on an async executor blocks nothing). Nothing
    /// to do once it ended, or with the ring gone.
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let Some(ring) = self.ring.upgrade() else {
            return;
        };
        let mut core = lock(&ring);
        core.detach(Sqe::unlisten(0, self.service), Keep::default());
        core.orphan_listen(self.tag);
        let _ = core.submit();
    }
}

/// A peer that joined a listened service: its virtual QP in this ring, and the node it
/// came from.
#[derive(Debug)]
pub struct Accepted {
    /// The virtual QP, bound to this node's connection set to the peer: use it as a
    /// connected one (RECV, SEND, imports of that node's exports), DISCONNECT it when
    /// done.
    pub vqp: Vqp,
    /// The peer node's address.
    pub peer: Ipv4Addr,
    /// The peer end's port on that node (its CONNECT's, ephemeral unless it named one):
    /// with `peer`, the client's address.
    pub peer_port: u16,
}
