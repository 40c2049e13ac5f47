//! Validation of one submission entry against its ring's own tables.
//!
//! The entry is a private copy (the caller copied it out of the shared SQ), so what is
//! checked here is what is used. Every field an opcode does not read must be zero, every
//! local range must lie inside one of this ring's MRs with the right access, and every
//! remote range inside an MR imported for the same virtual QP whose export is still live
//! and grants the operation's remote right; the export's rkey is the only one that
//! reaches the wire (see [`export`](super::export)). A failed check names its [`Reason`].
//!
//! An import remembers its export as resolved and the exports' epoch it was live at;
//! while the epoch has not moved (nothing anywhere on the device was revoked) a request
//! uses that without taking the exports' lock, and one that finds it moved resolves the
//! export again under the lock and remembers the new epoch ([`Fabric::exports_epoch`]).

use super::backend::{SendKind, Sge};
use super::cqe::Reason;
use super::export::Export;
use super::fabric::Fabric;
use super::message::Tuple;
use super::meta::record::{name_from_words, MODE_BITS, MODE_DEFAULT, NAME_LEN};
use super::opcode::{Opcode, OPCODE_LAST};
use super::ring_state::{LocalMr, Tables, REVOKED_ACROSS};
use super::sqe::{ConnectFlags, MrAccess, NameFlags, Sqe, SqeFlags};
use super::Store;

/// Largest message or MR length accepted (RoCE's 2 GiB message limit, halved to stay
/// inside `i32` results).
pub const MAX_LEN: u32 = 1 << 30;

// Which Sqe fields an opcode reads (io_issue_defs' role): anything else must be zero.
const VQP: u16 = 1 << 0;
const ADDR: u16 = 1 << 1;
const LEN: u16 = 1 << 2;
const MR: u16 = 1 << 3;
const RADDR: u16 = 1 << 4;
const RMR: u16 = 1 << 5;
const IMM: u16 = 1 << 6;
const ARG0: u16 = 1 << 7;
const ARG1: u16 = 1 << 8;
const FLAGS: u16 = 1 << 9;

const LOCAL: u16 = VQP | ADDR | LEN | MR;
const ONE_SIDED: u16 = LOCAL | RADDR | RMR | FLAGS;

/// Fields read, indexed by opcode.
const READS: [u16; OPCODE_LAST as usize] = {
    let mut t = [0u16; OPCODE_LAST as usize];
    t[Opcode::Nop as usize] = 0;
    t[Opcode::RegMr as usize] = ADDR | LEN | IMM;
    t[Opcode::DeregMr as usize] = MR;
    t[Opcode::Connect as usize] = RADDR | ARG0 | RMR | LEN | IMM;
    t[Opcode::Disconnect as usize] = VQP;
    t[Opcode::ImportMr as usize] = VQP | RADDR | LEN | ARG0;
    t[Opcode::Read as usize] = ONE_SIDED;
    t[Opcode::Write as usize] = ONE_SIDED;
    t[Opcode::WriteImm as usize] = ONE_SIDED | IMM;
    t[Opcode::Send as usize] = LOCAL | FLAGS;
    t[Opcode::SendImm as usize] = LOCAL | FLAGS | IMM;
    t[Opcode::Recv as usize] = LOCAL;
    t[Opcode::Cas as usize] = ONE_SIDED | ARG0 | ARG1;
    t[Opcode::Faa as usize] = ONE_SIDED | ARG0;
    t[Opcode::Publish as usize] = MR | NAME | IMM;
    t[Opcode::ImportName as usize] = VQP | LEN | NAME | IMM | RMR;
    t[Opcode::Listen as usize] = RMR;
    t[Opcode::Unlisten as usize] = RMR;
    t[Opcode::ResolveName as usize] = NAME;
    t
};

/// A port as an entry carries it in 32 bits.
fn port(v: u32) -> Result<u16, Reason> {
    u16::try_from(v).map_err(|_| Reason::BadPort)
}

/// The three words an export name travels in (see abi's `meta::record`).
const NAME: u16 = RADDR | ARG0 | ARG1;

/// A validated operation, with everything resolved that the tables can resolve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// NOP.
    Nop,
    /// Register `[addr, addr + len)` with `access`.
    RegMr {
        /// Start.
        addr: u64,
        /// Length.
        len: u32,
        /// Rights.
        access: MrAccess,
    },
    /// Deregister MR handle `mr`.
    DeregMr {
        /// MR handle.
        mr: u32,
    },
    /// Connect to `gid`, by `tuple` (see `message`; port 0 in both: no endpoint).
    Connect {
        /// Peer GID.
        gid: [u8; 16],
        /// The ports and the mode.
        tuple: Tuple,
    },
    /// Release virtual QP `vqp`.
    Disconnect {
        /// Virtual QP handle.
        vqp: u32,
    },
    /// Import `[addr, addr + len)` of the export `descriptor` for `vqp`.
    ImportMr {
        /// Virtual QP handle.
        vqp: u32,
        /// Remote start.
        addr: u64,
        /// Length.
        len: u32,
        /// The exporter's descriptor (checked live, the range inside it).
        descriptor: u64,
        /// The export as resolved.
        export: Export,
        /// The exports' epoch, read before it was resolved.
        checked: u64,
    },
    /// Publish MR `mr`'s export under `name`.
    Publish {
        /// MR handle.
        mr: u32,
        /// The name.
        name: [u8; NAME_LEN],
        /// Its mode (see `meta::record::Grant`).
        mode: u16,
    },
    /// Import `len` bytes (0: all) of another node's export `name` for `vqp`.
    ImportName {
        /// Virtual QP handle.
        vqp: u32,
        /// The name.
        name: [u8; NAME_LEN],
        /// Bytes from the export's start; 0 for the whole export.
        len: u32,
        /// The uid that must have published it, if the caller named one.
        owner: Option<u32>,
    },
    /// A send-queue request on `vqp` using local MR `mr`.
    Send {
        /// Virtual QP handle.
        vqp: u32,
        /// Local MR handle.
        mr: u32,
        /// What to do.
        kind: SendKind,
        /// The local buffer.
        local: Sge,
        /// FENCE / SOLICITED.
        flags: SqeFlags,
    },
    /// Listen for `service` (see `listen`).
    Listen {
        /// The service.
        service: u32,
    },
    /// Stop listening for `service`.
    Unlisten {
        /// The service.
        service: u32,
    },
    /// Find the node that holds `name`.
    ResolveName {
        /// The name.
        name: [u8; NAME_LEN],
    },
    /// A receive on `vqp` into local MR `mr`.
    Recv {
        /// Virtual QP handle.
        vqp: u32,
        /// Local MR handle.
        mr: u32,
        /// The local buffer.
        local: Sge,
    },
}

/// Byte range `(offset, size)` of each field bit in the SQE.
const FIELD_BYTES: [(u16, usize, usize); 10] = [
    (VQP, 4, 4),
    (ADDR, 16, 8),
    (LEN, 24, 4),
    (MR, 28, 4),
    (RADDR, 32, 8),
    (RMR, 40, 4),
    (IMM, 44, 4),
    (ARG0, 48, 8),
    (ARG1, 56, 8),
    (FLAGS, 1, 1),
];

/// For each opcode, the SQE bytes that may be nonzero, as eight little-endian words: the
/// opcode byte, `user_data`, and the fields the opcode reads. Everything else (reserved
/// bytes included) must be zero.
const ALLOWED: [[u64; 8]; OPCODE_LAST as usize] = {
    let mut t = [[0u64; 8]; OPCODE_LAST as usize];
    let mut op = 0;
    while op < OPCODE_LAST as usize {
        let mut bytes = [0u8; 64];
        bytes[0] = 0xff; // opcode
        let mut b = 8;
        while b < 16 {
            bytes[b] = 0xff; // user_data
            b += 1;
        }
        let mut f = 0;
        while f < FIELD_BYTES.len() {
            let (bit, off, size) = FIELD_BYTES[f];
            if READS[op] & bit != 0 {
                let mut k = 0;
                while k < size {
                    bytes[off + k] = 0xff;
                    k += 1;
                }
            }
            f += 1;
        }
        let mut w = 0;
        while w < 8 {
            let mut word = [0u8; 8];
            let mut k = 0;
            while k < 8 {
                word[k] = bytes[w * 8 + k];
                k += 1;
            }
            t[op][w] = u64::from_le_bytes(word);
            w += 1;
        }
        op += 1;
    }
    t
};

/// Rejects an entry with a nonzero byte the opcode does not read. Runs for every entry,
/// so it is eight masked words and no branch per field.
#[inline]
fn reject_unread(sqe: &Sqe, op: Opcode) -> Result<(), Reason> {
    // SAFETY: Sqe is 64 bytes of integers with no padding (asserted in sqe.rs, and by
    // zerocopy's IntoBytes derive in the user build), so it is exactly eight u64s.
    let words: [u64; 8] = unsafe { core::mem::transmute(*sqe) };
    let allowed = &ALLOWED[op as usize];
    let mut stray = 0u64;
    for i in 0..8 {
        stray |= u64::from_le(words[i]) & !allowed[i];
    }
    if stray != 0 {
        return Err(Reason::ReservedNonzero);
    }
    Ok(())
}

/// `[addr, addr + len)` lies inside `[base, base + size)`, without overflow.
fn inside(addr: u64, len: u32, base: u64, size: u32) -> bool {
    match (addr.checked_add(len as u64), base.checked_add(size as u64)) {
        (Some(end), Some(limit)) => addr >= base && end <= limit,
        _ => false,
    }
}

fn local<S: Store>(sqe: &Sqe, t: &Tables<S>, needs_write: bool) -> Result<(LocalMr, Sge), Reason> {
    let mr = *t.mrs.get(sqe.mr).ok_or(Reason::BadMr)?;
    if !inside(sqe.addr, sqe.len, mr.addr, mr.len) {
        return Err(Reason::LocalRange);
    }
    if needs_write && !mr.access.contains(MrAccess::LOCAL_WRITE) {
        return Err(Reason::MrAccess);
    }
    Ok((
        mr,
        Sge {
            addr: sqe.addr,
            len: sqe.len,
            lkey: mr.keys.lkey,
        },
    ))
}

/// The export name an SQE carries.
fn name_of(sqe: &Sqe) -> Result<[u8; NAME_LEN], Reason> {
    name_from_words([sqe.remote_addr, sqe.arg0, sqe.arg1]).ok_or(Reason::BadName)
}

/// The export `descriptor` names now, under the exports' lock.
fn resolve<S: Store, F: Fabric<S>>(f: &F, descriptor: u64) -> Option<Export> {
    f.exports(|e| e.get(descriptor).copied())
}

/// The rkey for the remote range of `sqe`, which needs the remote right `right`.
fn remote<S: Store, F: Fabric<S>>(
    sqe: &Sqe,
    t: &mut Tables<S>,
    f: &F,
    right: MrAccess,
) -> Result<(u32, u64), Reason> {
    let r = t.rmrs.get_mut(sqe.rmr).ok_or(Reason::BadRemoteMr)?;
    if r.vqp != sqe.vqp {
        return Err(Reason::BadRemoteMr);
    }
    match f.unchecked_wire() {
        None => {}
        Some((0, 0)) => return Ok((r.rkey, sqe.remote_addr)),
        Some((addr, rkey)) => return Ok((rkey, addr)),
    }
    if !inside(sqe.remote_addr, sqe.len, r.addr, r.len) {
        return Err(Reason::RemoteRange);
    }
    // A revoked export stops its importers here: the revocation moved the epoch. An
    // import from another node was resolved in that node's record (IMPORT_NAME).
    let epoch = f.exports_epoch();
    if r.across && r.checked == REVOKED_ACROSS {
        return Err(Reason::BadDescriptor);
    }
    if !r.across && r.checked != epoch {
        let e = resolve(f, r.descriptor).ok_or(Reason::BadDescriptor)?;
        (r.rkey, r.access, r.checked) = (e.rkey, e.access, epoch);
    }
    if !r.access.contains(right) {
        return Err(Reason::MrAccess);
    }
    Ok((r.rkey, sqe.remote_addr))
}

/// Validates `sqe` against the ring's tables and the node's exports (reached through
/// `f`; imports remember what they resolved, see the module doc).
#[inline]
pub fn validate<S: Store, F: Fabric<S>>(sqe: &Sqe, t: &mut Tables<S>, f: &F) -> Result<Op, Reason> {
    let op = Opcode::from_u8(sqe.opcode).ok_or(Reason::BadOpcode)?;
    let flags = SqeFlags::from_bits(sqe.flags).ok_or(Reason::UnknownFlags)?;
    reject_unread(sqe, op)?;
    if op.uses_send_queue() || op == Opcode::Recv {
        t.vqps.get(sqe.vqp).ok_or(Reason::BadVqp)?;
        if op.is_atomic() {
            if sqe.len != 8 || sqe.addr % 8 != 0 || sqe.remote_addr % 8 != 0 {
                return Err(Reason::Misaligned);
            }
        } else if sqe.len == 0 || sqe.len > MAX_LEN {
            return Err(Reason::BadLength);
        }
    }
    Ok(match op {
        Opcode::Nop => Op::Nop,
        Opcode::RegMr => {
            let access = MrAccess::from_bits(sqe.imm).ok_or(Reason::UnknownFlags)?;
            if sqe.len == 0 || sqe.len > MAX_LEN || sqe.addr.checked_add(sqe.len as u64).is_none() {
                return Err(Reason::BadLength);
            }
            // Verbs: remote write or atomic access requires local write.
            if (access.contains(MrAccess::REMOTE_WRITE) || access.contains(MrAccess::REMOTE_ATOMIC))
                && !access.contains(MrAccess::LOCAL_WRITE)
            {
                return Err(Reason::MrAccess);
            }
            Op::RegMr {
                addr: sqe.addr,
                len: sqe.len,
                access,
            }
        }
        Opcode::DeregMr => {
            t.mrs.get(sqe.mr).ok_or(Reason::BadMr)?;
            Op::DeregMr { mr: sqe.mr }
        }
        Opcode::Connect => {
            let flags = ConnectFlags::from_bits(sqe.imm).ok_or(Reason::UnknownFlags)?;
            let pair = flags.contains(ConnectFlags::PAIR);
            let (local, peer) = (port(sqe.local_port())?, port(sqe.service())?);
            // No endpoint names no port; a pairing one names both.
            let lone_local = peer == 0 && local != 0;
            let half_pair = pair && (local == 0 || peer == 0);
            if lone_local || half_pair {
                return Err(Reason::BadPort);
            }
            Op::Connect {
                gid: sqe.connect_gid(),
                tuple: Tuple { local, peer, pair },
            }
        }
        Opcode::Disconnect => {
            t.vqps.get(sqe.vqp).ok_or(Reason::BadVqp)?;
            Op::Disconnect { vqp: sqe.vqp }
        }
        Opcode::ImportMr => {
            t.vqps.get(sqe.vqp).ok_or(Reason::BadVqp)?;
            if sqe.len == 0
                || sqe.len > MAX_LEN
                || sqe.remote_addr.checked_add(sqe.len as u64).is_none()
            {
                return Err(Reason::BadLength);
            }
            let checked = f.exports_epoch();
            let e = resolve(f, sqe.arg0).ok_or(Reason::BadDescriptor)?;
            if !inside(sqe.remote_addr, sqe.len, e.addr, e.len) {
                return Err(Reason::RemoteRange);
            }
            Op::ImportMr {
                vqp: sqe.vqp,
                addr: sqe.remote_addr,
                len: sqe.len,
                descriptor: sqe.arg0,
                export: e,
                checked,
            }
        }
        Opcode::Publish => {
            let m = t.mrs.get(sqe.mr).ok_or(Reason::BadMr)?;
            // Only an MR granting remote access has an export to publish.
            if m.descriptor == 0 {
                return Err(Reason::MrAccess);
            }
            let mode = u16::try_from(sqe.imm)
                .ok()
                .filter(|m| m & !MODE_BITS == 0)
                .ok_or(Reason::UnknownFlags)?;
            Op::Publish {
                mr: sqe.mr,
                name: name_of(sqe)?,
                mode: if mode == 0 { MODE_DEFAULT } else { mode },
            }
        }
        Opcode::ImportName => {
            t.vqps.get(sqe.vqp).ok_or(Reason::BadVqp)?;
            if sqe.len > MAX_LEN {
                return Err(Reason::BadLength);
            }
            let flags = NameFlags::from_bits(sqe.imm).ok_or(Reason::UnknownFlags)?;
            let owner = flags
                .contains(NameFlags::OWNED_BY)
                .then_some(sqe.owner_uid());
            if owner.is_none() && sqe.owner_uid() != 0 {
                return Err(Reason::ReservedNonzero);
            }
            Op::ImportName {
                vqp: sqe.vqp,
                name: name_of(sqe)?,
                len: sqe.len,
                owner,
            }
        }
        Opcode::Listen => Op::Listen {
            service: match port(sqe.service())? {
                0 => return Err(Reason::BadPort),
                p => p as u32,
            },
        },
        Opcode::Unlisten => Op::Unlisten {
            service: sqe.service(),
        },
        Opcode::ResolveName => Op::ResolveName {
            name: name_of(sqe)?,
        },
        Opcode::Recv => {
            let (_, sge) = local(sqe, t, true)?;
            // A message is written with a key made for its receive alone, and such a key
            // spans a bounded number of pages.
            if sge.len > super::message::MAX_RECV {
                return Err(Reason::TooLong);
            }
            Op::Recv {
                vqp: sqe.vqp,
                mr: sqe.mr,
                local: sge,
            }
        }
        Opcode::Send | Opcode::SendImm => {
            let (_, sge) = local(sqe, t, false)?;
            let imm = (op == Opcode::SendImm).then_some(sqe.imm);
            Op::Send {
                vqp: sqe.vqp,
                mr: sqe.mr,
                kind: SendKind::Send { imm },
                local: sge,
                flags,
            }
        }
        Opcode::Read | Opcode::Write | Opcode::WriteImm | Opcode::Cas | Opcode::Faa => {
            // READ and atomics write into local memory.
            let (_, sge) = local(sqe, t, op == Opcode::Read || op.is_atomic())?;
            let right = match op {
                Opcode::Read => MrAccess::REMOTE_READ,
                Opcode::Write | Opcode::WriteImm => MrAccess::REMOTE_WRITE,
                _ => MrAccess::REMOTE_ATOMIC,
            };
            let (rkey, remote_addr) = remote(sqe, t, f, right)?;
            let kind = match op {
                Opcode::Read => SendKind::Read { remote_addr, rkey },
                Opcode::Write => SendKind::Write {
                    remote_addr,
                    rkey,
                    imm: None,
                },
                Opcode::WriteImm => SendKind::Write {
                    remote_addr,
                    rkey,
                    imm: Some(sqe.imm),
                },
                Opcode::Cas => SendKind::Cas {
                    remote_addr,
                    rkey,
                    compare: sqe.arg0,
                    swap: sqe.arg1,
                },
                _ => SendKind::Faa {
                    remote_addr,
                    rkey,
                    add: sqe.arg0,
                },
            };
            Op::Send {
                vqp: sqe.vqp,
                mr: sqe.mr,
                kind,
                local: sge,
                flags,
            }
        }
    })
}
