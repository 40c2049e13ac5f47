//! In-VM figures (`make bench`): krcore beside user-space verbs and io_uring in the same
//! guest, each measured in one run. Prints one JSON object per figure between
//! `FIGURES-BEGIN` and `FIGURES-END` (the guest root is read-only; the host writes the
//! results), and a table.
//!
//! Part of `make bench` (issue 5, first slice: the one-ioctl-per-op path, multi-process
//! and cold-pool connects, memory figures and plots are still to come). The VM boots
//! with tsc=nowatchdog: under host load the TSC watchdog otherwise demotes the guest to
//! the jiffies clocksource (4 ms resolution), which `main` refuses to time with.
//!
//! Figures: ring crossing (NOP per op at batch 1..128, krcore enter ioctl vs io_uring
//! enter), 8 B READ latency (krcore enter, krcore SQPOLL, verbs posted directly), and
//! connect latency (krcore CONNECT on the warm pool vs verbs QP create + INIT/RTR/RTS,
//! with and without opening the device).

use std::time::{Duration, Instant};

use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device, Ring};
use verify::verbs::{Context, Mr, RcQp, ROCE_V2_GID_INDEX};

const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1];

struct Fig {
    name: String,
    samples: Vec<Duration>,
    per: u32,
}

impl Fig {
    fn new(name: impl Into<String>, mut samples: Vec<Duration>, per: u32) -> Fig {
        samples.sort();
        Fig {
            name: name.into(),
            samples,
            per,
        }
    }
    fn q(&self, q: f64) -> f64 {
        let i = ((self.samples.len() - 1) as f64 * q).round() as usize;
        self.samples[i].as_nanos() as f64 / self.per as f64
    }
}

fn run(r: &mut Ring, sqe: Sqe) -> (i32, u64) {
    // SAFETY: the memory entries name is registered and outlives the wait.
    unsafe { r.push(&sqe) }.expect("sq");
    let taken = r.submit_and_wait(1).expect("enter");
    let Some(c) = r.completions().next() else {
        std::thread::sleep(Duration::from_millis(200));
        let later: Vec<_> = r.completions().collect();
        panic!(
            "no CQE after enter: took {taken}, flags {:?}, enters {}; 200 ms later: {later:?}",
            r.sq_flags(),
            r.enters()
        );
    };
    assert!(c.res >= 0, "{:?}", krcore_uring::describe_failure(&c));
    (c.res, c.aux)
}

fn ring(sqpoll: bool) -> Ring {
    let b = Builder::new(256).cq_entries(512);
    let b = if sqpoll { b.sqpoll(5000) } else { b };
    b.build(Device::open().expect("open /dev/krcore"))
        .expect("ring")
}

fn time_n(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

fn ring_crossing(figs: &mut Vec<Fig>) {
    for batch in [1u32, 8, 32, 128] {
        let iters = (2000 / batch as usize).max(20);
        let mut r = ring(false);
        let s = time_n(iters, || {
            for i in 0..batch {
                // SAFETY: NOPs name no memory.
                unsafe { r.push(&Sqe::nop(i as u64)) }.unwrap();
            }
            r.submit_and_wait(batch).unwrap();
            assert_eq!(r.completions().count(), batch as usize);
        });
        figs.push(Fig::new(format!("nop/krcore-enter/batch{batch}"), s, batch));
        let mut u = io_uring::IoUring::new(256).expect("io_uring in the guest");
        let s = time_n(iters, || {
            {
                let mut sq = u.submission();
                for i in 0..batch {
                    // SAFETY: a NOP references no memory.
                    unsafe {
                        sq.push(&io_uring::opcode::Nop::new().build().user_data(i as u64))
                            .unwrap()
                    };
                }
            }
            u.submit_and_wait(batch as usize).unwrap();
            assert_eq!(u.completion().count(), batch as usize);
        });
        figs.push(Fig::new(format!("nop/io_uring/batch{batch}"), s, batch));
    }
}

fn read_latency(figs: &mut Vec<Fig>) {
    for sqpoll in [false, true] {
        let mut r = ring(sqpoll);
        let (v, _) = run(&mut r, Sqe::connect(1, GID, 0));
        let mut buf = vec![0u64; 512];
        let a = buf.as_mut_ptr() as u64;
        let (mr, keys) = run(
            &mut r,
            Sqe::reg_mr(2, a, 4096, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ),
        );
        let (rmr, _) = run(
            &mut r,
            Sqe::import_mr(3, v as u32, a, 4096, (keys >> 32) as u32),
        );
        let read = Sqe::one_sided(
            Opcode::Read,
            9,
            v as u32,
            mr as u32,
            a + 2048,
            8,
            rmr as u32,
            a,
        );
        let s = time_n(300, || {
            if sqpoll {
                // SAFETY: the buffer is registered and outlives the wait.
                unsafe { r.push(&read) }.unwrap();
                r.submit().unwrap();
                while r.completions().next().is_none() {
                    std::hint::spin_loop();
                }
            } else {
                run(&mut r, read);
            }
        });
        figs.push(Fig::new(
            if sqpoll {
                "read8/krcore-sqpoll"
            } else {
                "read8/krcore-enter"
            },
            s,
            1,
        ));
        drop(buf);
    }
    let ctx = Context::open("rxe0", 64).expect("verbs");
    let (qa, qb) = (
        RcQp::create(&ctx, 16).unwrap(),
        RcQp::create(&ctx, 16).unwrap(),
    );
    let (ea, eb) = (
        qa.endpoint(ROCE_V2_GID_INDEX).unwrap(),
        qb.endpoint(ROCE_V2_GID_INDEX).unwrap(),
    );
    qa.connect(eb, ROCE_V2_GID_INDEX).unwrap();
    qb.connect(ea, ROCE_V2_GID_INDEX).unwrap();
    let (src, dst) = (Mr::new(&ctx, 64).unwrap(), Mr::new(&ctx, 64).unwrap());
    let s = time_n(300, || {
        qa.post_read(1, &dst, 0, 8, src.addr(), src.rkey()).unwrap();
        ctx.poll(1, u64::MAX).unwrap();
    });
    figs.push(Fig::new("read8/verbs-direct", s, 1));
}

fn connect_latency(figs: &mut Vec<Fig>) {
    let mut r = ring(false);
    let mut s = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        let (v, _) = run(&mut r, Sqe::connect(1, GID, 0));
        s.push(t.elapsed());
        run(&mut r, Sqe::disconnect(2, v as u32));
    }
    figs.push(Fig::new("connect/krcore-warm", s, 1));
    let ctx = Context::open("rxe0", 64).expect("verbs");
    let peer = RcQp::create(&ctx, 16).unwrap();
    let pe = peer.endpoint(ROCE_V2_GID_INDEX).unwrap();
    let s = time_n(30, || {
        let q = RcQp::create(&ctx, 16).unwrap();
        q.connect(pe, ROCE_V2_GID_INDEX).unwrap();
    });
    figs.push(Fig::new("connect/verbs-qp-only", s, 1));
    let s = time_n(10, || {
        let c = Context::open("rxe0", 16).unwrap();
        let q = RcQp::create(&c, 16).unwrap();
        q.connect(pe, ROCE_V2_GID_INDEX).unwrap();
    });
    figs.push(Fig::new("connect/verbs-with-device-open", s, 1));
}

fn main() {
    // Timing needs a fine clock: a guest whose TSC watchdog gave up falls back to
    // jiffies, and every figure would be a multiple of a tick.
    let cs =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    if cs.contains("jiffies") {
        eprintln!("krcore-figures: the guest clocksource is {} (tick resolution); refusing to time anything", cs.trim());
        std::process::exit(2);
    }
    let mut figs = Vec::new();
    ring_crossing(&mut figs);
    read_latency(&mut figs);
    connect_latency(&mut figs);
    println!("FIGURES-BEGIN");
    for f in &figs {
        println!(
            "{{\"figure\":\"{}\",\"samples\":{},\"median_ns\":{:.1},\"p99_ns\":{:.1}}}",
            f.name,
            f.samples.len(),
            f.q(0.5),
            f.q(0.99)
        );
    }
    println!("FIGURES-END");
    let med = |n: &str| {
        figs.iter()
            .find(|f| f.name == n)
            .map(|f| f.q(0.5))
            .unwrap_or(f64::NAN)
    };
    println!("\n{:<36} {:>14} {:>14}", "figure (per op)", "median", "p99");
    for f in &figs {
        println!(
            "{:<36} {:>11.2} us {:>11.2} us",
            f.name,
            f.q(0.5) / 1e3,
            f.q(0.99) / 1e3
        );
    }
    println!("\nratios in this guest (TCG):");
    for b in [1, 8, 32, 128] {
        println!(
            "  NOP batch {b:>3}: io_uring / krcore = {:.2}",
            med(&format!("nop/io_uring/batch{b}")) / med(&format!("nop/krcore-enter/batch{b}"))
        );
    }
    println!(
        "  READ 8 B: krcore enter / verbs direct = {:.2}, SQPOLL / verbs direct = {:.2}",
        med("read8/krcore-enter") / med("read8/verbs-direct"),
        med("read8/krcore-sqpoll") / med("read8/verbs-direct")
    );
    println!("  connect: verbs with device open / krcore warm = {:.0}x, verbs QP only / krcore warm = {:.0}x", med("connect/verbs-with-device-open") / med("connect/krcore-warm"), med("connect/verbs-qp-only") / med("connect/krcore-warm"));
}
