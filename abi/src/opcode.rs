//! Operation codes of submission entries, and what each one reads from the [`Sqe`].
//!
//! | opcode | fields read | CQE `res` | CQE `aux` |
//! |---|---|---|---|
//! | NOP | - | 0 | - |
//! | REG_MR | `addr`, `len`, `imm` = [`MrAccess`](super::sqe::MrAccess) bits | MR handle | export descriptor (0 without remote access) |
//! | DEREG_MR | `mr` | 0 | - |
//! | CONNECT | `remote_addr`+`arg0` = peer GID (16 bytes as laid out), `rmr` = service (the peer's port; 0: no endpoint), `len` = this node's port (0: ephemeral), `imm` = [`ConnectFlags`](super::sqe::ConnectFlags) | virtual QP handle: at once for service 0 or a pairing CONNECT, else when the listen on the service takes it (`Refused` after the deadline with none) | physical QP number; CQE `port`: this node's port |
//! | DISCONNECT | `vqp` | 0 | - |
//! | IMPORT_MR | `vqp`, `remote_addr`, `len`, `arg0` = export descriptor | remote MR handle | - |
//! | READ, WRITE | `vqp`, `addr`, `len`, `mr`, `remote_addr`, `rmr` | bytes | - |
//! | WRITE_IMM | as WRITE, and `imm` | bytes | - |
//! | SEND | `vqp`, `addr`, `len`, `mr` | bytes | - |
//! | SEND_IMM | as SEND, and `imm` | bytes | - |
//! | RECV | `vqp`, `addr`, `len`, `mr` | bytes received | immediate data, when `IMM` is set in `flags` |
//! | CAS | `vqp`, `addr`, `mr` (8 bytes), `remote_addr`, `rmr`, `arg0` = compare, `arg1` = swap | 8 | - |
//! | FAA | `vqp`, `addr`, `mr` (8 bytes), `remote_addr`, `rmr`, `arg0` = add | 8 | - |
//! | PUBLISH | `mr` (one this ring registered with remote access), name = `remote_addr`, `arg0`, `arg1`, `imm` = mode (`0o666` bits at most; 0: `0o600`) | 0 | - |
//! | IMPORT_NAME | `vqp` (connected to the exporting node), name = `remote_addr`, `arg0`, `arg1`, `len` (0: the whole export), `imm` = [`NameFlags`](super::sqe::NameFlags), `rmr` = owner uid (with `OWNED_BY`) | remote MR handle, with the export's rights the name's mode grants this user | the export's start address |
//! | LISTEN | `rmr` = service (a port, 1-65535) | 0 (listening), then a virtual QP handle per connecting virtual QP, from any node | 0, then the physical QP number (low 32 bits) and the peer's IPv4 address (high 32); CQE `port`: the peer's port |
//! | UNLISTEN | `rmr` = service | 0 | - |
//! | RESOLVE_NAME | name = `remote_addr`, `arg0`, `arg1` | the node's id | the node's IPv4 address (high 32 bits, as LISTEN's), when the name's mode grants this user a right (`NotPermitted` otherwise) |
//!
//! Atomics write the old remote value into the local 8 bytes, as RDMA does. No entry
//! carries an rkey: remote memory is named by the descriptor its owner's REG_MR returned
//! (see the engine's `export` module), and only the owner's ring may submit REG_MR.
//! Across nodes it is named by an export *name* (up to 24 bytes, NUL-padded, in three
//! little-endian words): PUBLISH puts an MR's export in the MetaServer under a name,
//! DEREG_MR of the MR takes it out again, and IMPORT_NAME resolves it in the exporting
//! node's kernel's own record (see abi's `meta` module).
//!
//!
//! LISTEN is the one entry that completes more than once (io_uring's multishot
//! accept): a first CQE when it listens, then one per peer node whose virtual QP
//! CONNECTs to this node for the service, each flagged `MORE` (and `ACCEPT`), and a last
//! one without `MORE` when it ends (UNLISTEN: `Cancelled`; or it could not listen). See
//! the engine's `listen` module.
//!
//! [`Sqe`]: super::sqe::Sqe

/// An operation code. The closed set: any other byte is rejected with
/// [`Reason::BadOpcode`](super::cqe::Reason::BadOpcode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Does nothing; completes with 0. Measures the ring crossing itself.
    Nop = 0,
    /// Registers user memory for local and remote access.
    RegMr = 1,
    /// Deregisters a memory region.
    DeregMr = 2,
    /// Binds a virtual QP to a pooled physical QP connected to a peer.
    Connect = 3,
    /// Releases a virtual QP.
    Disconnect = 4,
    /// Imports a peer's memory region so remote ranges can be validated.
    ImportMr = 5,
    /// One-sided RDMA READ.
    Read = 6,
    /// One-sided RDMA WRITE.
    Write = 7,
    /// Two-sided SEND.
    Send = 8,
    /// SEND with immediate data.
    SendImm = 9,
    /// RDMA WRITE with immediate data.
    WriteImm = 10,
    /// Posts a receive buffer.
    Recv = 11,
    /// 8-byte remote compare-and-swap.
    Cas = 12,
    /// 8-byte remote fetch-and-add.
    Faa = 13,
    /// Publishes an MR's export in the MetaServer under a name.
    Publish = 14,
    /// Imports another node's export by name, through the MetaServer.
    ImportName = 15,
    /// Listens for a service: each peer node's virtual QP that CONNECTs to this node for
    /// it gets a virtual QP here, in a CQE of this entry (multishot).
    Listen = 16,
    /// Ends this ring's LISTEN for a service.
    Unlisten = 17,
    /// Finds the node that holds a published name (so a CONNECT can reach it), through
    /// the MetaServer.
    ResolveName = 18,
}

/// One past the last opcode (`IORING_OP_LAST`'s role): sizes per-opcode tables.
pub const OPCODE_LAST: u8 = 19;

impl Opcode {
    /// Every opcode, in numeric order.
    pub const ALL: [Opcode; OPCODE_LAST as usize] = [
        Opcode::Nop,
        Opcode::RegMr,
        Opcode::DeregMr,
        Opcode::Connect,
        Opcode::Disconnect,
        Opcode::ImportMr,
        Opcode::Read,
        Opcode::Write,
        Opcode::Send,
        Opcode::SendImm,
        Opcode::WriteImm,
        Opcode::Recv,
        Opcode::Cas,
        Opcode::Faa,
        Opcode::Publish,
        Opcode::ImportName,
        Opcode::Listen,
        Opcode::Unlisten,
        Opcode::ResolveName,
    ];

    /// Decodes a raw opcode byte.
    pub fn from_u8(v: u8) -> Option<Opcode> {
        Opcode::ALL.get(v as usize).copied()
    }

    /// Whether the operation goes to the wire through a virtual QP's send queue (and so
    /// needs a send credit).
    pub const fn uses_send_queue(self) -> bool {
        matches!(
            self,
            Opcode::Read
                | Opcode::Write
                | Opcode::Send
                | Opcode::SendImm
                | Opcode::WriteImm
                | Opcode::Cas
                | Opcode::Faa
        )
    }

    /// Whether the operation addresses remote memory (and so names an imported MR).
    pub const fn is_one_sided(self) -> bool {
        matches!(
            self,
            Opcode::Read | Opcode::Write | Opcode::WriteImm | Opcode::Cas | Opcode::Faa
        )
    }

    /// Whether the operation is an 8-byte atomic.
    pub const fn is_atomic(self) -> bool {
        matches!(self, Opcode::Cas | Opcode::Faa)
    }
}

const _: () = assert!(Opcode::ALL.len() == OPCODE_LAST as usize);
const _: () = assert!(Opcode::ResolveName as u8 + 1 == OPCODE_LAST);
