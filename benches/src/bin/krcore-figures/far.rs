//! The far node of the figures across nodes (`krcore-figures far PEER NAMES`): the node
//! the measuring node ([`crate::across`]) reaches, which is also the MetaServer. It
//! serves, all at once and before it says it is ready:
//! - its 4 KiB [`FAR_EXPORT`], published by name, which READs read;
//! - `NAMES` more names (`e-0` ..), the entries the MetaServer lookups find;
//! - receives kept posted for the measuring node's SENDs, on one service per krcore
//!   path ([`SEND_SERVICES`]), each consumed receive posted again at once;
//! - the request/reply lookup the MetaServer is compared with: a name received on
//!   [`RPC_SERVICE`], looked up in this process's table, its record sent back;
//! - user-space verbs over rdma_cm on [`CM_PORT`], with receives kept posted too;
//! - the RPC echo servers, krcore's listener and verbs ([`crate::echo::serve`]).
//!
//! Then it sets the ready word of its export and waits for the measuring node's done
//! word. Publishing comes first so that nothing here competes with what is measured
//! for the host's two cores.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::thread::sleep;
use std::time::{Duration, Instant};

use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device, MemoryRegion};

use crate::paths::{gid_of, leak, FAR_EXPORT};

/// The services the krcore paths SEND on: enter, one-ioctl-per-op, polling thread.
pub const SEND_SERVICES: [u32; 3] = [21, 22, 23];
/// The service of the request/reply lookup.
pub const RPC_SERVICE: u32 = 30;
/// The rdma_cm port of the verbs server.
pub const CM_PORT: u16 = 7474;
/// Receives kept posted per service.
const RECEIVES: u64 = 32;
/// Bytes of a request (a name) and of a reply (its record).
pub const RPC_LEN: u32 = 32;
/// The export's word the far node sets once it serves everything.
pub const READY_AT: usize = 4096 - 16;
/// The export's word the measuring node sets when it is done.
pub const DONE_AT: usize = 4096 - 8;
/// How long the far node serves at most.
const SERVE_FOR: Duration = Duration::from_secs(1800);

/// The name of lookup entry `i`.
pub fn entry_name(i: usize) -> String {
    format!("e-{i}")
}

/// Retries `f` while it fails with one of `passing` (the other node still loading,
/// publishing, or not yet connected), for `secs` at most.
pub fn retry<T>(
    secs: u64,
    passing: &[Reason],
    mut f: impl FnMut() -> Result<T, krcore_uring::Error>,
) -> Result<T, krcore_uring::Error> {
    let t = Instant::now();
    loop {
        match f() {
            Err(e)
                if e.reason().is_some_and(|r| passing.contains(&r))
                    && t.elapsed().as_secs() < secs =>
            {
                sleep(Duration::from_millis(200))
            }
            r => return r,
        }
    }
}

/// The record the request/reply server answers a name with: what a lookup needs to
/// know of an export (where, how long, which entry).
fn record(i: usize, mr: &MemoryRegion) -> [u8; RPC_LEN as usize] {
    let mut r = [0u8; RPC_LEN as usize];
    r[..8].copy_from_slice(&mr.addr().to_le_bytes());
    r[8..12].copy_from_slice(&(mr.len() as u32).to_le_bytes());
    r[12..16].copy_from_slice(&(i as u32).to_le_bytes());
    r
}

/// A completion's `user_data`: a SEND (the top bit) or a receive of service `k` into
/// slot `j`.
const SEND_TAG: u64 = 1 << 62;

/// Serves the receives and the request/reply lookups on one ring until the peer goes
/// (its module reloaded for the first-contact figures) or the process ends.
fn receiver(peer: Ipv4Addr, table: HashMap<Vec<u8>, [u8; RPC_LEN as usize]>) {
    let mut ring = Builder::new(512)
        .cq_entries(1024)
        .build(Device::open().expect("open /dev/krcore"))
        .expect("ring");
    let services: Vec<u32> = SEND_SERVICES.iter().copied().chain([RPC_SERVICE]).collect();
    let vqps: Vec<u32> = services
        .iter()
        .map(|&s| {
            let v = retry(120, &[Reason::Unreachable], || {
                ring.pair(gid_of(peer), s as u16, s as u16)
            })
            .expect("CONNECT to the measuring node");
            // Connected for the process's life: nothing disconnects it.
            v.handle()
        })
        .collect();
    let slots = services.len() as u64 * RECEIVES;
    // Receive slots, then one reply slot per RPC receive.
    let buf = leak(vec![0u64; ((slots + RECEIVES) * 64 / 8) as usize]);
    let base = buf.as_ptr() as u64;
    let access = MrAccess::LOCAL_WRITE;
    let c = crate::paths::run(
        &mut ring,
        Sqe::reg_mr(0, base, (buf.len() * 8) as u32, access),
    );
    assert!(c.res >= 0, "far receive buffer: {c:?}");
    let mr = c.res as u32;
    let slot = |k: usize, j: u64| base + (k as u64 * RECEIVES + j) * 64;
    let recv = |k: usize, j: u64| {
        Sqe::two_sided(
            Opcode::Recv,
            (k as u64) << 32 | j,
            vqps[k],
            mr,
            slot(k, j),
            64,
        )
    };
    for k in 0..services.len() {
        for j in 0..RECEIVES {
            // SAFETY: the buffer is registered and leaked: it outlives every entry.
            unsafe { ring.submission().push(&recv(k, j)) }.expect("SQ room for the first receives");
        }
    }
    let rpc = services.len() - 1;
    loop {
        if ring.submit_and_wait(1).is_err() {
            return;
        }
        let done: Vec<_> = ring.completions().collect();
        for c in done {
            if c.res < 0 {
                // The measuring node reloaded its module (first contact): its links are
                // gone, and so is this thread's work.
                eprintln!(
                    "[far] receiver stops: {:?}",
                    krcore_uring::describe_failure(&c)
                );
                return;
            }
            if c.user_data & SEND_TAG != 0 {
                continue;
            }
            let (k, j) = ((c.user_data >> 32) as usize, c.user_data & 0xffff_ffff);
            if k == rpc {
                // SAFETY: the receive completed: `res` bytes of our own buffer at the slot.
                let req =
                    unsafe { std::slice::from_raw_parts(slot(k, j) as *const u8, c.res as usize) };
                let reply = table.get(req).copied().unwrap_or([0xff; RPC_LEN as usize]);
                let at = slot(k + 1, j);
                // SAFETY: the reply slot of receive j: ours, registered, not in flight
                // (one request at a time per receive).
                unsafe {
                    std::ptr::copy_nonoverlapping(reply.as_ptr(), at as *mut u8, reply.len())
                };
                let send = Sqe::two_sided(Opcode::Send, SEND_TAG | j, vqps[k], mr, at, RPC_LEN);
                // SAFETY: as for the receives.
                unsafe { ring.submission().push(&send) }.expect("SQ room for a reply");
            }
            // SAFETY: as for the first receives.
            unsafe { ring.submission().push(&recv(k, j)) }.expect("SQ room for a receive");
        }
    }
}

/// `krcore-figures far PEER NAMES`.
pub fn run(peer: Ipv4Addr, names: usize) {
    let mut ring = Builder::new(64)
        .build(Device::open().expect("open /dev/krcore"))
        .expect("ring");
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let mut export = ring.register(4096, access).expect("the far export");
    // This node's module is the MetaServer: up once its pool is.
    retry(60, &[Reason::Unreachable], || {
        ring.publish(&export, FAR_EXPORT)
    })
    .expect("publishing the far export");
    let t = Instant::now();
    let entries = ring.register(4096, access).expect("the entries' memory");
    let mut table = HashMap::new();
    for i in 0..names {
        let n = entry_name(i);
        ring.publish(&entries, &n).expect("publishing an entry");
        table.insert(n.into_bytes(), record(i, &entries));
    }
    eprintln!(
        "[far] published {names} names in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    std::thread::spawn(move || receiver(peer, table));
    std::thread::spawn(|| {
        let mem = leak(vec![0u8; 4096]).as_ptr() as *mut u8;
        // SAFETY: leaked, so it lives as long as the server; nothing else touches it.
        let mem = unsafe { std::slice::from_raw_parts_mut(mem, 4096) };
        verify::cm_verbs::serve(
            CM_PORT,
            mem,
            usize::MAX,
            SERVE_FOR.as_secs(),
            verify::cm_verbs::Recvs::Drop(RECEIVES as u32),
        )
        .expect("the verbs server");
    });
    crate::echo::serve(SERVE_FOR.as_secs());
    export.bytes_mut()[READY_AT..READY_AT + 8].copy_from_slice(&1u64.to_le_bytes());
    eprintln!("[far] serving {peer}");
    let t = Instant::now();
    while export.bytes()[DONE_AT..DONE_AT + 8] != 1u64.to_le_bytes() {
        assert!(
            t.elapsed() < SERVE_FOR,
            "the measuring node never said it was done"
        );
        sleep(Duration::from_millis(200));
    }
    eprintln!("[far] the measuring node is done");
    // The threads (and the verbs server) end with the process.
    std::process::exit(0);
}
