//! The submission queue entry: 64 bytes, one operation.
//!
//! Which fields an opcode reads is listed in [`opcode`](super::opcode); every other field
//! and every reserved field must be zero, so they can carry meaning later.

use super::bitflags::bitflags;
use super::opcode::Opcode;

/// A submission queue entry.
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
pub struct Sqe {
    /// [`Opcode`] as a byte.
    pub opcode: u8,
    /// [`SqeFlags`] bits.
    pub flags: u8,
    /// Reserved, must be zero.
    pub resv: u16,
    /// Virtual QP handle (data operations, DISCONNECT, IMPORT_MR).
    pub vqp: u32,
    /// Copied into the completion untouched.
    pub user_data: u64,
    /// Local address (data operations, REG_MR).
    pub addr: u64,
    /// Length in bytes; CONNECT: this node's port (0: an ephemeral one).
    pub len: u32,
    /// Local MR handle (data operations, DEREG_MR).
    pub mr: u32,
    /// Remote address; CONNECT: GID bytes 0..8.
    pub remote_addr: u64,
    /// Imported remote MR handle; CONNECT: the service; IMPORT_NAME: the owner's uid.
    pub rmr: u32,
    /// Immediate data (SEND_IMM, WRITE_IMM); REG_MR: [`MrAccess`] bits; CONNECT:
    /// [`ConnectFlags`] bits; PUBLISH: the name's mode; IMPORT_NAME: [`NameFlags`].
    pub imm: u32,
    /// CAS compare value; FAA addend; CONNECT: GID bytes 8..16; IMPORT_MR: the export
    /// descriptor.
    pub arg0: u64,
    /// CAS swap value.
    pub arg1: u64,
}

const _: () = assert!(core::mem::size_of::<Sqe>() == 64);
const _: () = assert!(core::mem::offset_of!(Sqe, vqp) == 4);
const _: () = assert!(core::mem::offset_of!(Sqe, user_data) == 8);
const _: () = assert!(core::mem::offset_of!(Sqe, addr) == 16);
const _: () = assert!(core::mem::offset_of!(Sqe, len) == 24);
const _: () = assert!(core::mem::offset_of!(Sqe, mr) == 28);
const _: () = assert!(core::mem::offset_of!(Sqe, remote_addr) == 32);
const _: () = assert!(core::mem::offset_of!(Sqe, rmr) == 40);
const _: () = assert!(core::mem::offset_of!(Sqe, imm) == 44);
const _: () = assert!(core::mem::offset_of!(Sqe, arg0) == 48);
const _: () = assert!(core::mem::offset_of!(Sqe, arg1) == 56);

bitflags! {
    /// Per-entry flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(transparent)]
    pub struct SqeFlags: u8 {
        /// Wait for earlier READs and atomics on the QP before this one (`IBV_SEND_FENCE`).
        const FENCE = 1 << 0;
        /// Ask the peer's receive completion to raise an event (`IBV_SEND_SOLICITED`).
        const SOLICITED = 1 << 1;
    }
}

bitflags! {
    /// How a CONNECT joins (its `imm`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(transparent)]
    pub struct ConnectFlags: u32 {
        /// Pair with the CONNECT on the peer port that names this one back, rather than
        /// ask for the listen on the peer port (see [`Sqe::pair`]).
        const PAIR = 1 << 0;
    }
}

bitflags! {
    /// How IMPORT_NAME takes a name (its `imm`). Without a flag, only a name the
    /// caller's uid or root published is taken: one another user published is refused
    /// (`WrongOwner`), as a careful program trusts only its own files and root's in a
    /// shared directory, so whoever publishes a name first cannot serve its bytes to
    /// other users' lookups. (Uids are compared across nodes as NFS compares them: a
    /// cluster maps one person to one uid.)
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(transparent)]
    pub struct NameFlags: u32 {
        /// Only if the uid in `rmr` published it (another user's name, taken by naming
        /// that user): any other publisher is refused (`WrongOwner`), never imported.
        const OWNED_BY = 1 << 0;
    }
}

bitflags! {
    /// Access rights of a registered MR (REG_MR's `imm`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(transparent)]
    pub struct MrAccess: u32 {
        /// The local HCA may write it (needed for READ, RECV, atomics).
        const LOCAL_WRITE = 1 << 0;
        /// Peers may write it.
        const REMOTE_WRITE = 1 << 1;
        /// Peers may read it.
        const REMOTE_READ = 1 << 2;
        /// Peers may run atomics on it.
        const REMOTE_ATOMIC = 1 << 3;
    }
}

impl Sqe {
    /// An entry with `opcode` and `user_data`, every other field zero.
    pub const fn new(opcode: Opcode, user_data: u64) -> Sqe {
        Sqe {
            opcode: opcode as u8,
            flags: 0,
            resv: 0,
            vqp: 0,
            user_data,
            addr: 0,
            len: 0,
            mr: 0,
            remote_addr: 0,
            rmr: 0,
            imm: 0,
            arg0: 0,
            arg1: 0,
        }
    }

    /// NOP.
    pub const fn nop(user_data: u64) -> Sqe {
        Sqe::new(Opcode::Nop, user_data)
    }

    /// REG_MR of `[addr, addr + len)` with `access`.
    pub const fn reg_mr(user_data: u64, addr: u64, len: u32, access: MrAccess) -> Sqe {
        Sqe {
            addr,
            len,
            imm: access.bits(),
            ..Sqe::new(Opcode::RegMr, user_data)
        }
    }

    /// DEREG_MR of the MR handle `mr`.
    pub const fn dereg_mr(user_data: u64, mr: u32) -> Sqe {
        Sqe {
            mr,
            ..Sqe::new(Opcode::DeregMr, user_data)
        }
    }

    /// CONNECT to the listen on port `service` of the node at `gid` (network byte
    /// order), from an ephemeral port the kernel picks (the CQE's `port`). Service 0:
    /// no endpoint, a virtual QP for one-sided requests alone.
    pub const fn connect(user_data: u64, gid: [u8; 16], service: u32) -> Sqe {
        Sqe::connect_from(user_data, gid, service, 0)
    }

    /// CONNECT to the listen on port `service` of the node at `gid`, from this node's
    /// port `port` (0: an ephemeral one).
    pub const fn connect_from(user_data: u64, gid: [u8; 16], service: u32, port: u16) -> Sqe {
        let (a, b) = split_gid(gid);
        Sqe {
            remote_addr: a,
            arg0: b,
            rmr: service,
            len: port as u32,
            ..Sqe::new(Opcode::Connect, user_data)
        }
    }

    /// CONNECT that pairs: this node's port `port` with port `peer_port` of the node at
    /// `gid`, where a CONNECT must name them back (`pair(.., peer_port, port)`), rather
    /// than a listen. Both ports are named; neither side needs a listener.
    pub const fn pair(user_data: u64, gid: [u8; 16], port: u16, peer_port: u16) -> Sqe {
        Sqe {
            imm: ConnectFlags::PAIR.bits(),
            ..Sqe::connect_from(user_data, gid, peer_port as u32, port)
        }
    }

    /// The GID a CONNECT entry carries.
    pub const fn connect_gid(&self) -> [u8; 16] {
        let a = self.remote_addr.to_ne_bytes();
        let b = self.arg0.to_ne_bytes();
        let mut g = [0u8; 16];
        let mut i = 0;
        while i < 8 {
            g[i] = a[i];
            g[i + 8] = b[i];
            i += 1;
        }
        g
    }

    /// The service a CONNECT asks for (the peer's port), or a LISTEN or UNLISTEN
    /// names: carried in `rmr`, which these opcodes use for no MR.
    pub const fn service(&self) -> u32 {
        self.rmr
    }

    /// The port of this node a CONNECT comes from (0: an ephemeral one): carried in
    /// `len`, which a CONNECT uses for no length.
    pub const fn local_port(&self) -> u32 {
        self.len
    }

    /// The uid IMPORT_NAME names as the name's publisher ([`NameFlags::OWNED_BY`]; 0
    /// without it): carried in `rmr`, which IMPORT_NAME uses for no MR.
    pub const fn owner_uid(&self) -> u32 {
        self.rmr
    }

    /// DISCONNECT of virtual QP `vqp`.
    pub const fn disconnect(user_data: u64, vqp: u32) -> Sqe {
        Sqe {
            vqp,
            ..Sqe::new(Opcode::Disconnect, user_data)
        }
    }

    /// IMPORT_MR: `[remote_addr, remote_addr + len)` of the MR the peer behind `vqp`
    /// exported under `descriptor` (its REG_MR's CQE `aux`).
    pub const fn import_mr(
        user_data: u64,
        vqp: u32,
        remote_addr: u64,
        len: u32,
        descriptor: u64,
    ) -> Sqe {
        Sqe {
            vqp,
            remote_addr,
            len,
            arg0: descriptor,
            ..Sqe::new(Opcode::ImportMr, user_data)
        }
    }

    /// PUBLISH of MR `mr`'s export under `name` (see `meta::record::name_words`),
    /// granting `mode` (`rw` bits for owner, group and others, as a file's: see
    /// `meta::record::Grant`; 0: the owner's alone).
    pub const fn publish(user_data: u64, mr: u32, name: [u64; 3], mode: u16) -> Sqe {
        Sqe {
            mr,
            imm: mode as u32,
            remote_addr: name[0],
            arg0: name[1],
            arg1: name[2],
            ..Sqe::new(Opcode::Publish, user_data)
        }
    }

    /// IMPORT_NAME of the first `len` bytes (0: all) of the export `name` for `vqp`;
    /// with `owner`, only if that uid published it, without, only if the caller's uid
    /// or root did (`WrongOwner` otherwise: see [`NameFlags`]).
    pub const fn import_name(
        user_data: u64,
        vqp: u32,
        name: [u64; 3],
        len: u32,
        owner: Option<u32>,
    ) -> Sqe {
        let (imm, rmr) = match owner {
            Some(uid) => (NameFlags::OWNED_BY.bits(), uid),
            None => (0, 0),
        };
        Sqe {
            vqp,
            len,
            rmr,
            imm,
            remote_addr: name[0],
            arg0: name[1],
            arg1: name[2],
            ..Sqe::new(Opcode::ImportName, user_data)
        }
    }

    /// RESOLVE_NAME of `name`: where it lives (see [`opcode`](super::opcode)).
    pub const fn resolve_name(user_data: u64, name: [u64; 3]) -> Sqe {
        Sqe {
            remote_addr: name[0],
            arg0: name[1],
            arg1: name[2],
            ..Sqe::new(Opcode::ResolveName, user_data)
        }
    }

    /// LISTEN for `service`: a CQE when listening, then one per peer that joins (see
    /// [`opcode`](super::opcode)).
    pub const fn listen(user_data: u64, service: u32) -> Sqe {
        Sqe {
            rmr: service,
            ..Sqe::new(Opcode::Listen, user_data)
        }
    }

    /// UNLISTEN: ends this ring's LISTEN for `service`.
    pub const fn unlisten(user_data: u64, service: u32) -> Sqe {
        Sqe {
            rmr: service,
            ..Sqe::new(Opcode::Unlisten, user_data)
        }
    }

    /// A one-sided READ, WRITE or WRITE_IMM of `len` bytes between local `(mr, addr)` and
    /// remote `(rmr, remote_addr)`.
    #[allow(clippy::too_many_arguments)]
    pub const fn one_sided(
        op: Opcode,
        user_data: u64,
        vqp: u32,
        mr: u32,
        addr: u64,
        len: u32,
        rmr: u32,
        remote_addr: u64,
    ) -> Sqe {
        Sqe {
            vqp,
            mr,
            addr,
            len,
            rmr,
            remote_addr,
            ..Sqe::new(op, user_data)
        }
    }

    /// SEND, SEND_IMM or RECV of `len` bytes at local `(mr, addr)`.
    pub const fn two_sided(
        op: Opcode,
        user_data: u64,
        vqp: u32,
        mr: u32,
        addr: u64,
        len: u32,
    ) -> Sqe {
        Sqe {
            vqp,
            mr,
            addr,
            len,
            ..Sqe::new(op, user_data)
        }
    }

    /// CAS at remote `(rmr, remote_addr)`; the old value lands at local `(mr, addr)`.
    #[allow(clippy::too_many_arguments)]
    pub const fn cas(
        user_data: u64,
        vqp: u32,
        mr: u32,
        addr: u64,
        rmr: u32,
        remote_addr: u64,
        compare: u64,
        swap: u64,
    ) -> Sqe {
        Sqe {
            vqp,
            mr,
            addr,
            len: 8,
            rmr,
            remote_addr,
            arg0: compare,
            arg1: swap,
            ..Sqe::new(Opcode::Cas, user_data)
        }
    }

    /// FAA at remote `(rmr, remote_addr)`; the old value lands at local `(mr, addr)`.
    pub const fn faa(
        user_data: u64,
        vqp: u32,
        mr: u32,
        addr: u64,
        rmr: u32,
        remote_addr: u64,
        add: u64,
    ) -> Sqe {
        Sqe {
            vqp,
            mr,
            addr,
            len: 8,
            rmr,
            remote_addr,
            arg0: add,
            ..Sqe::new(Opcode::Faa, user_data)
        }
    }

    /// With `imm` as immediate data.
    pub const fn with_imm(self, imm: u32) -> Sqe {
        Sqe { imm, ..self }
    }

    /// With `flags`.
    pub const fn with_flags(self, flags: SqeFlags) -> Sqe {
        Sqe {
            flags: flags.bits(),
            ..self
        }
    }
}

const fn split_gid(gid: [u8; 16]) -> (u64, u64) {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        a[i] = gid[i];
        b[i] = gid[i + 8];
        i += 1;
    }
    (u64::from_ne_bytes(a), u64::from_ne_bytes(b))
}
