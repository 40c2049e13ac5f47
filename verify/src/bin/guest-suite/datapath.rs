//! The data path through the real module on rxe: CONNECT to the pool, REG_MR of user
//! memory, IMPORT_MR, and every data opcode with the bytes checked.

use std::time::Instant;

use krcore_uring::abi::cqe::{Cqe, CqeFlags, Reason};
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device, PerOp, Ring};

use crate::harness::check;

/// ::ffff:192.0.2.1, rxe0's RoCE v2 GID in the test VM.
pub const LOCAL_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1];

/// A way into the kernel: the mapped rings or the one-ioctl-per-op path.
pub trait Submit {
    /// Submits `sqe` and waits for a completion.
    fn submit_one(&mut self, sqe: &Sqe) -> Result<Option<Cqe>, String>;
}

impl Submit for Ring {
    fn submit_one(&mut self, sqe: &Sqe) -> Result<Option<Cqe>, String> {
        // SAFETY: the memory the tests' entries name is registered and outlives the wait.
        unsafe { self.submission().push(sqe) }.map_err(|e| e.to_string())?;
        self.submit_and_wait(1).map_err(|e| e.to_string())?;
        Ok(self.completions().next())
    }
}

impl Submit for PerOp {
    fn submit_one(&mut self, sqe: &Sqe) -> Result<Option<Cqe>, String> {
        // SAFETY: as above.
        unsafe { self.push_pop(sqe, true) }.map_err(|e| e.to_string())
    }
}

/// Opens the device and builds `b`'s ring on it.
pub fn open(b: Builder) -> Result<Ring, String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    b.build(dev).map_err(|e| e.to_string())
}

/// Runs one entry and waits for its completion.
pub fn run(r: &mut impl Submit, sqe: Sqe) -> Result<Cqe, String> {
    let c = r.submit_one(&sqe)?.ok_or("no completion after waiting")?;
    check(c.user_data == sqe.user_data, || {
        format!(
            "CQE for {} while waiting for {}",
            c.user_data, sqe.user_data
        )
    })?;
    Ok(c)
}

/// Submits what is queued and collects `n` completions, in any order, by user_data.
pub fn collect(r: &mut Ring, n: usize) -> Result<Vec<Cqe>, String> {
    let mut got: Vec<Cqe> = Vec::new();
    while got.len() < n {
        r.submit_and_wait((n - got.len()) as u32)
            .map_err(|e| e.to_string())?;
        got.extend(r.completions());
    }
    got.sort_by_key(|c| c.user_data);
    Ok(got)
}

/// Runs an entry that must succeed; returns its result and aux.
pub fn ok(r: &mut impl Submit, sqe: Sqe) -> Result<(i32, u64), String> {
    let c = run(r, sqe)?;
    if let Some(why) = krcore_uring::describe_failure(&c) {
        return Err(format!("opcode {} failed: {why}", sqe.opcode));
    }
    Ok((c.res, c.aux))
}

/// A page-aligned buffer of `n` u64 words, for registering.
pub struct Buf(Vec<u64>);

impl Buf {
    pub fn new(words: usize) -> Buf {
        Buf(vec![0; words])
    }
    pub fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: plain u64s viewed as bytes.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), self.0.len() * 8) }
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), self.0.len() * 8) }
    }
    pub fn word(&self, byte_off: usize) -> u64 {
        // SAFETY: in bounds; the kernel may have written it (RDMA), so read volatile.
        unsafe { std::ptr::read_volatile(self.0.as_ptr().add(byte_off / 8)) }
    }
}

pub fn every_opcode_moves_the_right_bytes() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut r = Builder::new(64).build(dev).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let (v1, qpn1) = ok(&mut r, Sqe::pair(1, LOCAL_GID, 4001, 4001))?;
    let first = t.elapsed();
    let t = Instant::now();
    let (v2, qpn2) = ok(&mut r, Sqe::pair(2, LOCAL_GID, 4001, 4001))?;
    let second = t.elapsed();
    println!("  CONNECT: first {first:?} (qpn {qpn1}), second {second:?} (qpn {qpn2})");
    let (v1, v2) = (v1 as u32, v2 as u32);

    let mut buf = Buf::new(512);
    let pattern: Vec<u8> = (0..64u8)
        .map(|i| i.wrapping_mul(7).wrapping_add(1))
        .collect();
    buf.bytes_mut()[..64].copy_from_slice(&pattern);
    let access = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_ATOMIC;
    let (mr, descriptor) = ok(&mut r, Sqe::reg_mr(3, buf.addr(), 4096, access))?;
    let mr = mr as u32;
    println!("  REG_MR: handle {mr:#x}, descriptor {descriptor:#x}");
    let (rmr, _) = ok(&mut r, Sqe::import_mr(4, v1, buf.addr(), 4096, descriptor))?;
    let rmr = rmr as u32;
    let a = buf.addr();

    // WRITE [0,64) -> [1024,1088)
    let (n, _) = ok(
        &mut r,
        Sqe::one_sided(Opcode::Write, 10, v1, mr, a, 64, rmr, a + 1024),
    )?;
    check(n == 64 && buf.bytes()[1024..1088] == pattern[..], || {
        format!("WRITE: res {n}, bytes {:?}", &buf.bytes()[1024..1032])
    })?;
    // READ [1024,1032) -> [2048,2056)
    let (n, _) = ok(
        &mut r,
        Sqe::one_sided(Opcode::Read, 11, v1, mr, a + 2048, 8, rmr, a + 1024),
    )?;
    check(n == 8 && buf.bytes()[2048..2056] == pattern[..8], || {
        format!("READ: res {n}, bytes {:?}", &buf.bytes()[2048..2056])
    })?;
    // CAS at 3072: 0 -> 42, old value into 3080
    ok(&mut r, Sqe::cas(12, v1, mr, a + 3080, rmr, a + 3072, 0, 42))?;
    check(buf.word(3072) == 42 && buf.word(3080) == 0, || {
        format!("CAS: remote {}, old {}", buf.word(3072), buf.word(3080))
    })?;
    // FAA at 3072: +5, old value into 3088
    ok(&mut r, Sqe::faa(13, v1, mr, a + 3088, rmr, a + 3072, 5))?;
    check(buf.word(3072) == 47 && buf.word(3088) == 42, || {
        format!("FAA: remote {}, old {}", buf.word(3072), buf.word(3088))
    })?;
    println!("  WRITE 64 B, READ 8 B, CAS 0->42, FAA +5: bytes and old values checked");

    // SEND_IMM from v1 lands in a RECV posted on v2, the other end of the pair; WRITE_IMM
    // consumes the next RECV and carries its immediate.
    let entries = [
        Sqe::two_sided(Opcode::Recv, 20, v2, mr, a + 256, 64),
        Sqe::two_sided(Opcode::SendImm, 21, v1, mr, a, 64).with_imm(0xabcd),
        Sqe::two_sided(Opcode::Recv, 22, v2, mr, a + 320, 8),
        Sqe::one_sided(Opcode::WriteImm, 23, v1, mr, a, 64, rmr, a + 512).with_imm(7),
    ];
    for e in &entries {
        // SAFETY: every buffer named is registered and outlives the wait below.
        unsafe { r.submission().push(e) }.map_err(|e| e.to_string())?;
    }
    let c = collect(&mut r, 4)?;
    let imm = |c: &Cqe| c.flags & CqeFlags::IMM.bits() != 0;
    check(c[0].res == 64 && imm(&c[0]) && c[0].aux == 0xabcd, || {
        format!("RECV of SEND_IMM: {:?}", c[0])
    })?;
    check(c[1].res == 64 && c[3].res == 64, || {
        format!("SEND_IMM / WRITE_IMM: {:?} {:?}", c[1], c[3])
    })?;
    check(imm(&c[2]) && c[2].aux == 7, || {
        format!("RECV of WRITE_IMM: {:?}", c[2])
    })?;
    check(buf.bytes()[256..320] == pattern[..], || {
        "SEND payload differs".into()
    })?;
    check(buf.bytes()[512..576] == pattern[..], || {
        "WRITE_IMM payload differs".into()
    })?;
    println!("  SEND_IMM -> RECV (64 B, imm 0xabcd), WRITE_IMM -> RECV (imm 7): checked");

    // A remote range outside the imported MR never reaches the QP.
    let c = run(
        &mut r,
        Sqe::one_sided(Opcode::Read, 30, v1, mr, a, 8, rmr, a + 4096),
    )?;
    check(c.failure() == Some(Reason::RemoteRange), || {
        format!("out-of-range READ: {c:?}")
    })?;
    let (n, _) = ok(
        &mut r,
        Sqe::one_sided(Opcode::Read, 31, v1, mr, a, 8, rmr, a + 1024),
    )?;
    check(n == 8, || {
        "the QP stopped working after a rejected entry".into()
    })?;

    ok(&mut r, Sqe::dereg_mr(40, mr))?;
    ok(&mut r, Sqe::disconnect(41, v1))?;
    ok(&mut r, Sqe::disconnect(42, v2))?;
    Ok(())
}
