//! The completion queue entry: 32 bytes, one result, and when it failed, why.

use super::bitflags::bitflags;
use super::errno::Errno;

/// A completion queue entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "zerocopy",
    derive(
        zerocopy::FromBytes,
        zerocopy::IntoBytes,
        zerocopy::KnownLayout,
        zerocopy::Immutable
    )
)]
#[repr(C)]
pub struct Cqe {
    /// The submission's `user_data`.
    pub user_data: u64,
    /// Bytes transferred, a handle, or a negative errno (see [`opcode`](super::opcode)).
    pub res: i32,
    /// [`CqeFlags`] bits.
    pub flags: u32,
    /// Opcode-specific result (see [`opcode`](super::opcode)).
    pub aux: u64,
    /// When `res < 0`: a [`Reason`] code naming the cause; 0 otherwise.
    pub reason: u16,
    /// A port (see [`opcode`](super::opcode)): CONNECT's own (the ephemeral one the
    /// kernel picked, when it named none); a LISTEN's accepted peer's; 0 otherwise.
    pub port: u16,
    /// Reserved, zero.
    pub resv: [u8; 4],
}

const _: () = assert!(core::mem::size_of::<Cqe>() == 32);
const _: () = assert!(core::mem::offset_of!(Cqe, res) == 8);
const _: () = assert!(core::mem::offset_of!(Cqe, aux) == 16);
const _: () = assert!(core::mem::offset_of!(Cqe, reason) == 24);
const _: () = assert!(core::mem::offset_of!(Cqe, port) == 26);

bitflags! {
    /// Per-completion flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(transparent)]
    pub struct CqeFlags: u32 {
        /// `aux` holds immediate data (a RECV that matched SEND_IMM or WRITE_IMM).
        const IMM = 1 << 0;
        /// More CQEs will come for this entry's `user_data` (a LISTEN that goes on).
        const MORE = 1 << 1;
        /// A LISTEN's CQE for a peer that joined: `res` is its virtual QP here (or why
        /// none could be given), `aux` the physical QP number (low 32 bits) and the
        /// peer's IPv4 address (high 32), `port` the peer's port.
        const ACCEPT = 1 << 2;
    }
}

/// Why an entry was rejected or failed. Stored in [`Cqe::reason`] beside the errno, so a
/// user can tell an out-of-range length from an unknown MR though both are `EINVAL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
// New reasons come with new module versions: code outside abi matches with a wildcard.
#[non_exhaustive]
#[repr(u16)]
pub enum Reason {
    /// Not a failure.
    None = 0,
    /// The opcode byte names no operation.
    BadOpcode = 1,
    /// A flag bit this ABI does not define is set.
    UnknownFlags = 2,
    /// A reserved field, or a field the opcode does not read, is nonzero.
    ReservedNonzero = 3,
    /// The virtual QP handle names no connected virtual QP of this ring.
    BadVqp = 4,
    /// The local MR handle names no registered MR of this ring.
    BadMr = 5,
    /// The local range is not inside the named MR.
    LocalRange = 6,
    /// The remote MR handle names no MR imported for this virtual QP.
    BadRemoteMr = 7,
    /// The remote range is not inside the imported MR.
    RemoteRange = 8,
    /// An atomic's local or remote address is not 8-byte aligned, or its length is not 8.
    Misaligned = 9,
    /// The length is zero where data must move, or over the maximum message size.
    BadLength = 10,
    /// The MR's access rights do not allow the operation.
    MrAccess = 11,
    /// Operations in flight that only a peer can complete (receives) hold the object.
    Busy = 12,
    /// A fixed-capacity table (virtual QPs, MRs, in-flight slots) is full.
    TableFull = 13,
    /// No RDMA device can reach the peer, or the device went away.
    NoDevice = 14,
    /// The physical QP failed; the operation was flushed.
    QpError = 15,
    /// The ring was closed with the operation in flight.
    RingClosed = 16,
    /// The verbs layer refused the request.
    Verbs = 17,
    /// The work completion reported a transport or remote error.
    RemoteError = 18,
    /// Only a thread of the process that set up the ring may pin memory (REG_MR): submit
    /// it through enter from that process, not through the SQ polling thread or from
    /// another process holding the file.
    NotOwner = 19,
    /// The export descriptor names no live exported MR: forged, guessed, or revoked (its
    /// MR deregistered or its ring closed).
    BadDescriptor = 20,
    /// This ring's requests broke shared QPs: its data requests are refused for a
    /// backoff that grows with each (see the engine's `blame`).
    Throttled = 21,
    /// The request's QP made no progress for the request deadline (a peer or NIC that
    /// never answered); it was failed and recovered.
    Deadline = 22,
    /// A SEND no receive took: the peer virtual QP posted none within the request
    /// deadline, or disconnected.
    NoReceiver = 23,
    /// A SEND longer than the receive it met (both complete with this).
    TooLong = 24,
    /// A RECV cancelled by DISCONNECT before a message filled it; a LISTEN ended by
    /// UNLISTEN.
    Cancelled = 25,
    /// Another node did not answer, had no route, or refused: a CONNECT's peer (retried
    /// after a backoff), or the MetaServer (none configured, or not reachable).
    Unreachable = 26,
    /// A two-sided message on a virtual QP whose message link is gone.
    NoLink = 27,
    /// An export name that is empty, longer than 24 bytes, or not NUL-padded.
    BadName = 28,
    /// PUBLISH of a name already published (by any node).
    NameTaken = 29,
    /// IMPORT_NAME of a name no live export has: never published, revoked, or its
    /// node restarted since.
    NoSuchName = 30,
    /// IMPORT_NAME through a virtual QP that is not connected to the node the export
    /// lives on.
    NotOnPeer = 31,
    /// A port that is held: LISTEN on a port another listen or another user holds, a
    /// CONNECT naming such a port as its own, or a second link with the same peer and
    /// ports (see the engine's `ports`).
    ServiceTaken = 32,
    /// UNLISTEN of a service this ring does not listen on.
    NotListening = 33,
    /// The peer node closed its end of the connection set this request used (its
    /// module was unloaded, or its device went): what was in flight on it, and every
    /// message link on it, ends with this; the next CONNECT to that node makes a new
    /// set.
    PeerGone = 34,
    /// A port that is no port: 0 where a port must be named (LISTEN, a CONNECT that
    /// pairs), or one over 65535.
    BadPort = 35,
    /// A port below 1024 without `CAP_NET_BIND_SERVICE`; an IMPORT_NAME of a name
    /// whose mode grants this user none of the export's rights.
    NotPermitted = 36,
    /// The peer refused the connection: nobody listened on its port within the
    /// deadline, or its listener could not take it.
    Refused = 37,
    /// This user's share of the device's table is used up (virtual QPs, receives,
    /// exports or listens: module parameters `max_*_per_user`), or it has as many
    /// dials to new nodes in progress as it may (`cluster::peers::DIALS_PER_USER`);
    /// other users' shares are theirs.
    Quota = 38,
    /// IMPORT_NAME named an owner, and another user published the name.
    WrongOwner = 39,
    /// An entry io_uring cannot carry (see the engine's `uring`): a LISTEN (6.12's
    /// commands have no multishot), a REG_MR (registered only on krcore's own ring), a
    /// RECV (it may wait forever, and io_uring cannot cancel a command).
    NotThroughUring = 40,
}

impl Reason {
    /// Every reason, in numeric order.
    pub const ALL: [Reason; Reason::COUNT] = {
        use Reason::*;
        [
            None,
            BadOpcode,
            UnknownFlags,
            ReservedNonzero,
            BadVqp,
            BadMr,
            LocalRange,
            BadRemoteMr,
            RemoteRange,
            Misaligned,
            BadLength,
            MrAccess,
            Busy,
            TableFull,
            NoDevice,
            QpError,
            RingClosed,
            Verbs,
            RemoteError,
            NotOwner,
            BadDescriptor,
            Throttled,
            Deadline,
            NoReceiver,
            TooLong,
            Cancelled,
            Unreachable,
            NoLink,
            BadName,
            NameTaken,
            NoSuchName,
            NotOnPeer,
            ServiceTaken,
            NotListening,
            PeerGone,
            BadPort,
            NotPermitted,
            Refused,
            Quota,
            WrongOwner,
            NotThroughUring,
        ]
    };

    /// How many reasons there are (one past the last code).
    pub const COUNT: usize = 41;

    /// Decodes a [`Cqe::reason`] value.
    pub fn from_u16(v: u16) -> Option<Reason> {
        Reason::ALL.get(v as usize).copied()
    }

    /// Its name in snake case (`remote_range`), as counters and tools show it.
    pub const fn name(self) -> &'static str {
        match self {
            Reason::None => "none",
            Reason::BadOpcode => "bad_opcode",
            Reason::UnknownFlags => "unknown_flags",
            Reason::ReservedNonzero => "reserved_nonzero",
            Reason::BadVqp => "bad_vqp",
            Reason::BadMr => "bad_mr",
            Reason::LocalRange => "local_range",
            Reason::BadRemoteMr => "bad_remote_mr",
            Reason::RemoteRange => "remote_range",
            Reason::Misaligned => "misaligned",
            Reason::BadLength => "bad_length",
            Reason::MrAccess => "mr_access",
            Reason::Busy => "busy",
            Reason::TableFull => "table_full",
            Reason::NoDevice => "no_device",
            Reason::QpError => "qp_error",
            Reason::RingClosed => "ring_closed",
            Reason::Verbs => "verbs",
            Reason::RemoteError => "remote_error",
            Reason::NotOwner => "not_owner",
            Reason::BadDescriptor => "bad_descriptor",
            Reason::Throttled => "throttled",
            Reason::Deadline => "deadline",
            Reason::NoReceiver => "no_receiver",
            Reason::TooLong => "too_long",
            Reason::Cancelled => "cancelled",
            Reason::Unreachable => "unreachable",
            Reason::NoLink => "no_link",
            Reason::BadName => "bad_name",
            Reason::NameTaken => "name_taken",
            Reason::NoSuchName => "no_such_name",
            Reason::NotOnPeer => "not_on_peer",
            Reason::ServiceTaken => "service_taken",
            Reason::NotListening => "not_listening",
            Reason::PeerGone => "peer_gone",
            Reason::BadPort => "bad_port",
            Reason::NotPermitted => "not_permitted",
            Reason::Refused => "refused",
            Reason::Quota => "quota",
            Reason::WrongOwner => "wrong_owner",
            Reason::NotThroughUring => "not_through_uring",
        }
    }

    /// The errno a CQE carries for this reason.
    pub const fn errno(self) -> Errno {
        match self {
            Reason::None => Errno(0),
            Reason::BadOpcode | Reason::UnknownFlags | Reason::ReservedNonzero => Errno::EINVAL,
            Reason::BadVqp | Reason::BadMr | Reason::BadRemoteMr => Errno::ENOENT,
            Reason::LocalRange | Reason::RemoteRange | Reason::BadLength => Errno::ERANGE,
            Reason::Misaligned => Errno::EINVAL,
            Reason::MrAccess => Errno::EACCES,
            Reason::Busy => Errno::EBUSY,
            Reason::TableFull => Errno::ENOSPC,
            Reason::NoDevice => Errno::ENODEV,
            Reason::QpError | Reason::RingClosed | Reason::Cancelled => Errno::ECANCELED,
            Reason::Verbs | Reason::RemoteError => Errno::EIO,
            Reason::NotOwner => Errno::EPERM,
            Reason::BadDescriptor => Errno::EACCES,
            Reason::Throttled => Errno::EAGAIN,
            Reason::Deadline | Reason::NoReceiver => Errno::ETIMEDOUT,
            Reason::TooLong => Errno::EMSGSIZE,
            Reason::Unreachable => Errno::EHOSTUNREACH,
            Reason::NoLink => Errno::EOPNOTSUPP,
            Reason::BadName => Errno::EINVAL,
            Reason::NameTaken => Errno::EEXIST,
            Reason::NoSuchName => Errno::ENOENT,
            Reason::NotOnPeer => Errno::EXDEV,
            Reason::ServiceTaken => Errno::EADDRINUSE,
            Reason::NotListening => Errno::ENOENT,
            Reason::PeerGone => Errno::ECONNRESET,
            Reason::BadPort => Errno::EINVAL,
            Reason::NotPermitted => Errno::EACCES,
            Reason::Refused => Errno::ECONNREFUSED,
            Reason::Quota => Errno::EDQUOT,
            Reason::WrongOwner => Errno::EPERM,
            Reason::NotThroughUring => Errno::EOPNOTSUPP,
        }
    }

    /// A short description for messages.
    pub const fn describe(self) -> &'static str {
        match self {
            Reason::None => "no error",
            Reason::BadOpcode => "unknown opcode",
            Reason::UnknownFlags => "unknown flag bits",
            Reason::ReservedNonzero => "reserved or unused field is nonzero",
            Reason::BadVqp => "no such virtual QP on this ring",
            Reason::BadMr => "no such local MR on this ring",
            Reason::LocalRange => "local range outside the MR",
            Reason::BadRemoteMr => "no such imported remote MR for this virtual QP",
            Reason::RemoteRange => "remote range outside the imported MR",
            Reason::Misaligned => "atomic not 8-byte aligned or not 8 bytes long",
            Reason::BadLength => "length zero or over the maximum",
            Reason::MrAccess => "MR access rights forbid the operation",
            Reason::Busy => "requests in flight hold it",
            Reason::TableFull => "table full",
            Reason::NoDevice => "no RDMA device for the peer",
            Reason::QpError => "physical QP failed; operation flushed",
            Reason::RingClosed => "ring closed with the operation in flight",
            Reason::Verbs => "verbs refused the request",
            Reason::RemoteError => "transport or remote error",
            Reason::NotOwner => "only the ring owner's threads may register memory: use enter",
            Reason::BadDescriptor => "no live export with this descriptor",
            Reason::Throttled => "this ring broke shared QPs: throttled for a while",
            Reason::Deadline => "no progress within the request deadline",
            Reason::NoReceiver => {
                "no receive took the message: none posted in time, or the peer left"
            }
            Reason::TooLong => "message longer than the receive buffer",
            Reason::Cancelled => "cancelled: a receive by DISCONNECT, a listen by UNLISTEN",
            Reason::Unreachable => {
                "no connection to the peer node or the MetaServer: it did not answer or refused"
            }
            Reason::NoLink => "no message link: the virtual QP's link is gone",
            Reason::BadName => "export name empty, over 24 bytes, or not NUL-padded",
            Reason::NameTaken => "export name already published",
            Reason::NoSuchName => {
                "no live export of that name (never published, revoked, or its node restarted)"
            }
            Reason::NotOnPeer => "the export lives on another node than the virtual QP connects to",
            Reason::ServiceTaken => {
                "that port is held: by a listen, by another user, or by a link with the \
                 same peer and ports"
            }
            Reason::NotListening => "this ring does not listen on that service",
            Reason::PeerGone => {
                "the peer node closed the connection (its module unloaded or its device \
                 went); CONNECT again once it is back"
            }
            Reason::BadPort => "no port: 0 where one must be named, or over 65535",
            Reason::NotPermitted => {
                "not permitted: a port below 1024 needs CAP_NET_BIND_SERVICE, and a name's \
                 mode may grant this user none of its rights"
            }
            Reason::WrongOwner => "the name was published by another user than the one named (or, naming none, than this user or root)",
            Reason::NotThroughUring => {
                "io_uring cannot carry this entry (LISTEN, REG_MR, RECV): use krcore's own ring"
            }
            Reason::Quota => {
                "this user's share of the device's table is used up (max_*_per_user), or \
                 its dials to new nodes in progress are as many as it may have"
            }
            Reason::Refused => {
                "the peer refused: nobody listened on its port within the deadline, or its \
                 listener had no room"
            }
        }
    }
}

impl Cqe {
    /// A successful completion.
    pub const fn ok(user_data: u64, res: i32, aux: u64) -> Cqe {
        Cqe {
            user_data,
            res,
            flags: 0,
            aux,
            reason: 0,
            port: 0,
            resv: [0; 4],
        }
    }

    /// A failed completion with an errno other than the reason's own (a backend error).
    pub const fn err_errno(user_data: u64, reason: Reason, errno: Errno) -> Cqe {
        Cqe {
            user_data,
            res: errno.to_neg(),
            flags: 0,
            aux: 0,
            reason: reason as u16,
            port: 0,
            resv: [0; 4],
        }
    }

    /// A failed completion: `res` is the reason's negative errno.
    pub const fn err(user_data: u64, reason: Reason) -> Cqe {
        Cqe {
            user_data,
            res: reason.errno().to_neg(),
            flags: 0,
            aux: 0,
            reason: reason as u16,
            port: 0,
            resv: [0; 4],
        }
    }

    /// The failure reason, when `res` is negative.
    pub fn failure(&self) -> Option<Reason> {
        if self.res < 0 {
            Some(Reason::from_u16(self.reason).unwrap_or(Reason::None))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip_and_carry_an_errno() {
        for v in 0..Reason::COUNT as u16 {
            let r = Reason::from_u16(v).unwrap();
            assert_eq!(r as u16, v);
            assert_eq!(r.errno().0 == 0, r == Reason::None);
            let c = Cqe::err(1, r);
            if r != Reason::None {
                assert_eq!(c.failure(), Some(r));
            }
        }
        assert_eq!(Reason::from_u16(Reason::COUNT as u16), None);
    }
}
