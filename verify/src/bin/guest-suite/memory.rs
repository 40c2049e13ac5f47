//! uring-lib with memory the caller owns, and bounded waits: registration of a
//! borrowed slice and of a raw mapping, deregistration by drop (pages unpinned, the
//! export revoked), and a wait that times out instead of waiting forever.

use std::time::{Duration, Instant};

use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Batch, Builder, Device, Ring};

use crate::datapath::LOCAL_GID;
use crate::harness::check;

const ALL: MrAccess = MrAccess::LOCAL_WRITE
    .union(MrAccess::REMOTE_READ)
    .union(MrAccess::REMOTE_WRITE)
    .union(MrAccess::REMOTE_ATOMIC);

/// This process's pinned memory, kB (`VmPin`: what REG_MR pins is charged there).
pub fn pinned_kb() -> Result<u64, String> {
    let s = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmPin:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| "no VmPin in /proc/self/status".into())
}

fn ring() -> Result<Ring, String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    Builder::new(16).build(dev).map_err(|e| e.to_string())
}

pub fn caller_memory_registers_and_deregisters_on_drop() -> Result<(), String> {
    let mut ring = ring()?;
    let vqp = ring.pair(LOCAL_GID, 11, 11).map_err(|e| e.to_string())?;
    let base = pinned_kb()?;

    // A Vec's storage, lent: the NIC READs its first half into its second.
    let mut v: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    // Remote rights on lent memory: the region is dropped before `v` (below), never
    // forgotten. A safe registration with them is refused.
    let refused = ring
        .register_slice(&mut v[..], ALL)
        .err()
        .and_then(|e| e.reason());
    check(
        refused == Some(krcore_uring::abi::cqe::Reason::MrAccess),
        || format!("register_slice with remote rights: {refused:?}"),
    )?;
    // SAFETY: `reg` is dropped (deregistered) before `v`'s loan ends, never forgotten.
    let mut reg =
        unsafe { ring.register_slice_remote(&mut v[..], ALL) }.map_err(|e| e.to_string())?;
    let held = pinned_kb()?;
    check(held >= base + 8, || {
        format!("VmPin {base} -> {held} kB after registering 8 KiB")
    })?;
    let d = reg.export().ok_or("no descriptor")?;
    let remote = ring.import(&vqp, &d).map_err(|e| e.to_string())?;
    let mut b = Batch::new();
    b.read(&vqp, &reg, 4096, &remote, 0, 4096)
        .map_err(|e| e.to_string())?;
    let out = ring.run(b).map_err(|e| e.to_string())?;
    check(out[0].as_ref().is_ok_and(|c| c.res == 4096), || {
        format!("READ into lent memory: {out:?}")
    })?;
    let bytes = reg.bytes();
    check(bytes[4096..] == bytes[..4096], || {
        "READ did not land in the lent slice".into()
    })?;
    drop(reg);
    // The loan is over: the Vec is the caller's again, with the bytes the NIC wrote.
    check(v[4096..] == v[..4096], || "the Vec lost the bytes".into())?;
    let after = pinned_kb()?;
    check(after <= base, || {
        format!("dropping the region left pages pinned: VmPin {base} -> {after} kB")
    })?;
    let stale = ring.import(&vqp, &d).err();
    check(
        stale
            .as_ref()
            .is_some_and(|e| e.reason() == Some(Reason::BadDescriptor)),
        || format!("the dropped region's export still imports: {stale:?}"),
    )?;
    println!("  slice: READ 4 KiB into it, VmPin {base} -> {held} -> {after} kB, export revoked");

    // A mapping the caller made (huge pages when the kernel has some), registered from its raw parts.
    let len = 2 << 20;
    let (map, huge) = map_anonymous(len)?;
    // SAFETY: the mapping stays mapped until after the region is dropped, and nothing
    // but the region and the NIC touches it meanwhile.
    let mut raw =
        unsafe { ring.register_slice_remote(std::slice::from_raw_parts_mut(map, len), ALL) }
            .map_err(|e| e.to_string())?;
    let mut src = ring.register(64, ALL).map_err(|e| e.to_string())?;
    src.bytes_mut().copy_from_slice(&[0x5a; 64]);
    let d = raw.export().ok_or("no descriptor")?;
    let remote = ring.import(&vqp, &d).map_err(|e| e.to_string())?;
    let mut b = Batch::new();
    b.write(&vqp, &src, 0, &remote, (len - 64) as u64, 64)
        .map_err(|e| e.to_string())?;
    let out = ring.run(b).map_err(|e| e.to_string())?;
    check(
        out[0].is_ok() && raw.bytes()[len - 64..] == [0x5a; 64],
        || format!("WRITE into the raw mapping: {out:?}"),
    )?;
    drop(raw);
    // SAFETY: mapped above; its region is dropped (deregistered).
    unsafe { libc::munmap(map.cast(), len) };
    println!(
        "  raw {} mapping of 2 MiB: WRITE landed at its end",
        if huge { "huge-page" } else { "4 KiB-page" }
    );

    // A library-allocated region is deregistered by drop too (it used to be leaked).
    let before = pinned_kb()?;
    drop(src);
    let after = pinned_kb()?;
    check(after < before, || {
        format!("dropping a MemoryRegion left it pinned: VmPin {before} -> {after} kB")
    })?;
    ring.disconnect(vqp).map_err(|e| e.to_string())
}

/// An anonymous read-write mapping of `len` bytes, of huge pages if the kernel has them.
fn map_anonymous(len: usize) -> Result<(*mut u8, bool), String> {
    for (flags, huge) in [(libc::MAP_HUGETLB, true), (0, false)] {
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            return Ok((p.cast(), huge));
        }
    }
    Err(format!("mmap: {}", std::io::Error::last_os_error()))
}

pub fn waits_are_bounded_and_receives_cancel() -> Result<(), String> {
    let mut ring = ring()?;
    let a = ring.pair(LOCAL_GID, 12, 12).map_err(|e| e.to_string())?;
    let mut mr = ring.register(64, ALL).map_err(|e| e.to_string())?;
    // A RECV nobody sends to: an unbounded wait would never end.
    let recv = Sqe::two_sided(Opcode::Recv, 1, a.handle(), mr.handle(), mr.addr(), 64);
    // SAFETY: the region outlives the receive: it is cancelled and reaped below.
    unsafe { ring.submission().push(&recv) }.map_err(|e| e.to_string())?;
    let t = Instant::now();
    let e = ring
        .submit_and_wait_timeout(1, Duration::from_millis(100))
        .err();
    let took = t.elapsed();
    println!(
        "  wait for a RECV nobody answers, 100 ms bound: {} after {took:?}",
        e.as_ref().map(|e| e.to_string()).unwrap_or_default()
    );
    check(
        e.is_some_and(|e| e.raw_os_error() == Some(libc::ETIME)),
        || "a bounded wait did not end with ETIME".into(),
    )?;
    check(
        took >= Duration::from_millis(100) && took < Duration::from_secs(5),
        || format!("the wait took {took:?}"),
    )?;
    // Giving up on it: DISCONNECT, after which the receive comes back Cancelled.
    // SAFETY: names no memory.
    unsafe { ring.submission().push(&Sqe::disconnect(2, a.handle())) }
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    while got.len() < 2 {
        ring.submit_and_wait_timeout(1, Duration::from_secs(10))
            .map_err(|e| format!("after DISCONNECT: {e}"))?;
        got.extend(ring.completions());
    }
    got.sort_by_key(|c| c.user_data);
    check(
        got[0].failure() == Some(Reason::Cancelled) && got[1].res == 0,
        || format!("RECV and DISCONNECT: {got:?}"),
    )?;
    mr.bytes_mut()[0] = 1;
    ring.deregister(mr).map_err(|e| e.to_string())
}
