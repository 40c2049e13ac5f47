//! Waiting for completions: by polling, or by sleeping on the ring's wait queue (the
//! module parameter `wait_spin_us` says how long a wait polls before it sleeps).
//!
//! - `read8-wait`: 8 B READ latency, one at a time through the enter ioctl, with
//!   `wait_spin_us` at 0 (every wait sleeps and is woken by the CQ event) and at 10^6
//!   (every wait polls), in alternating blocks so drift falls on both alike.
//! - `wait-cpu`: the CPU time a thread uses while it waits 1 s for a SEND whose peer
//!   (another thread, its own ring) posts the receive only then, sleeping and polling.

use std::time::{Duration, Instant};

use krcore_benches::record::Record;
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device, Ring};

use crate::dataplane::one;
use crate::paths::{leak, run, KrRing, Op, Target};
use verify::guest::{thread_cpu, Param};

/// The two ways to wait: series name and `wait_spin_us`.
const MODES: [(&str, &str); 2] = [("krcore-spin", "1000000"), ("krcore-sleep", "0")];
const BLOCKS: usize = 10;
const PER_BLOCK: usize = 100;
/// How long the peer keeps the waiter waiting.
const DELAY: Duration = Duration::from_secs(1);
const WAITS: usize = 3;

/// A ring with a virtual QP paired on port `service` and a registered 64-byte buffer.
fn endpoint(service: u32) -> (Ring, u32, u32, u64) {
    let mut r = Builder::new(16)
        .build(Device::open().expect("open /dev/krcore"))
        .expect("ring");
    let port = service as u16;
    let v = run(&mut r, Sqe::pair(1, crate::paths::GID, port, port)).res as u32;
    let buf: &'static [u64; 8] = leak([0u64; 8]);
    let addr = buf.as_ptr() as u64;
    let mr = run(&mut r, Sqe::reg_mr(2, addr, 64, MrAccess::LOCAL_WRITE)).res as u32;
    (r, v, mr, addr)
}

/// One wait of [`DELAY`] for a SEND on `service`: this thread's CPU time over it.
fn slow_peer_wait(service: u32) -> Duration {
    let (mut r, v, mr, addr) = endpoint(service);
    let peer = std::thread::spawn(move || {
        let (mut r, v, mr, addr) = endpoint(service);
        std::thread::sleep(DELAY);
        let c = run(&mut r, Sqe::two_sided(Opcode::Recv, 3, v, mr, addr, 64));
        assert_eq!(c.res, 8, "RECV {c:?}");
    });
    let (t, cpu) = (Instant::now(), thread_cpu());
    let c = run(&mut r, Sqe::two_sided(Opcode::Send, 3, v, mr, addr, 8));
    let cpu = thread_cpu() - cpu;
    assert_eq!(c.res, 8, "SEND {c:?}");
    assert!(t.elapsed() >= DELAY, "the SEND completed early");
    peer.join().expect("peer thread");
    cpu
}

/// Every waiting figure; leaves `wait_spin_us` as it found it (each mode's setting is
/// restored when its block ends).
pub fn figures(out: &mut Vec<Record>) {
    let mut p = KrRing::new(false, Target::Local);
    let mut lat = [Vec::new(), Vec::new()];
    let mut i = 0;
    for _ in 0..BLOCKS {
        for (k, &(_, spin)) in MODES.iter().enumerate() {
            let _mode = Param::set("wait_spin_us", spin).expect("wait_spin_us");
            for _ in 0..PER_BLOCK {
                lat[k].push(one(&mut p, Op::Read, i));
                i += 1;
            }
        }
    }
    let mut cpu = [Vec::new(), Vec::new()];
    // Services apart from the ones the other figures use; one pair per wait.
    let mut service = 101;
    for _ in 0..WAITS {
        for (k, &(_, spin)) in MODES.iter().enumerate() {
            let _mode = Param::set("wait_spin_us", spin).expect("wait_spin_us");
            cpu[k].push(slow_peer_wait(service));
            service += 2;
        }
    }
    for (k, &(series, _)) in MODES.iter().enumerate() {
        out.push(Record::times(
            "read8-wait",
            series,
            1,
            std::mem::take(&mut lat[k]),
            1,
        ));
        out.push(Record::times(
            "wait-cpu",
            series,
            DELAY.as_millis() as u32,
            std::mem::take(&mut cpu[k]),
            1,
        ));
    }
}
