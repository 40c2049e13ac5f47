//! The MetaServer's lookup cost with many entries present, measured across nodes.
//!
//! `meta_lookup publish N SECS`: publishes one region under N names (`e-0` .. `e-{N-1}`),
//! then waits (up to SECS) for a looker-up to set the done word at offset 0.
//!
//! `meta_lookup lookup ADDR N K`: CONNECTs to the node at ADDR, waits until its last name
//! resolves, then imports K distinct names picked at random (each an uncached lookup:
//! the name's probe window and its node's record, two one-sided READs), then the same K
//! again (cached), and K 8-byte READs of the region for scale; prints the medians and
//! 99th percentiles, side by side, and sets the done word.
use std::net::Ipv4Addr;
use std::thread::sleep;
use std::time::{Duration, Instant};

use krcore_abi::cqe::Reason;
use krcore_abi::sqe::MrAccess;
use krcore_uring::{Batch, Builder, Device, Ring, Vqp};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Imports per virtual QP before it is released (each takes a slot of the ring's
/// imports table; DISCONNECT frees them).
const PER_VQP: usize = 64;

fn name(i: usize) -> String {
    format!("e-{i}")
}

fn publish(ring: &mut Ring, n: usize, secs: u64) -> Result<()> {
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let mut mr = ring.register(4096, access)?;
    let t = Instant::now();
    for i in 0..n {
        loop {
            match ring.publish(&mr, &name(i)) {
                Err(e) if e.reason() == Some(Reason::Unreachable) && t.elapsed().as_secs() < 60 => {
                    sleep(Duration::from_millis(500))
                }
                r => break r?,
            }
        }
    }
    println!("published {n} names in {:?}", t.elapsed());
    let until = Instant::now() + Duration::from_secs(secs);
    while mr.bytes()[..8] != [1; 8] {
        if Instant::now() > until {
            return Err(format!("no looker-up finished within {secs} s").into());
        }
        sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Median and 99th percentile, in microseconds.
fn stats(mut t: Vec<Duration>) -> (f64, f64) {
    t.sort();
    let at = |q: f64| t[((t.len() as f64 * q) as usize).min(t.len() - 1)].as_secs_f64() * 1e6;
    (at(0.5), at(0.99))
}

fn connect(ring: &mut Ring, gid: [u8; 16]) -> Result<Vqp> {
    let t = Instant::now();
    loop {
        match ring.connect(gid, 0) {
            Err(e) if e.reason() == Some(Reason::Unreachable) && t.elapsed().as_secs() < 60 => {
                sleep(Duration::from_millis(500))
            }
            r => return Ok(r?),
        }
    }
}

/// Imports each of `names` once, a virtual QP per PER_VQP of them: each import's time.
fn imports(ring: &mut Ring, gid: [u8; 16], names: &[usize]) -> Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(names.len());
    for chunk in names.chunks(PER_VQP) {
        let v = connect(ring, gid)?;
        for &i in chunk {
            let t = Instant::now();
            ring.import_name(&v, &name(i), 8)?;
            times.push(t.elapsed());
        }
        ring.disconnect(v)?;
    }
    Ok(times)
}

fn lookup(ring: &mut Ring, addr: Ipv4Addr, n: usize, k: usize) -> Result<()> {
    let gid = addr.to_ipv6_mapped().octets();
    let v = connect(ring, gid)?;
    let t = Instant::now();
    loop {
        match ring.import_name(&v, &name(n - 1), 8) {
            Err(e)
                if matches!(e.reason(), Some(Reason::NoSuchName | Reason::Unreachable))
                    && t.elapsed().as_secs() < 600 =>
            {
                sleep(Duration::from_secs(1))
            }
            r => {
                r?;
                break;
            }
        };
    }
    ring.disconnect(v)?;
    // K distinct names (a fixed LCG walk), none of them looked up yet.
    let mut picked = Vec::with_capacity(k);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while picked.len() < k {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let i = (x >> 33) as usize % (n - 1);
        if !picked.contains(&i) {
            picked.push(i);
        }
    }
    let uncached = stats(imports(ring, gid, &picked)?);
    let cached = stats(imports(ring, gid, &picked)?);
    // One-sided READs of 8 bytes on a set to the same node, for scale.
    let v = connect(ring, gid)?;
    let remote = ring.import_name(&v, &name(n - 1), 8)?;
    let mine = ring.register(4096, MrAccess::LOCAL_WRITE)?;
    let mut reads = Vec::with_capacity(k);
    for _ in 0..k {
        let mut b = Batch::new();
        b.read(&v, &mine, 0, &remote, 0, 8)?;
        let t = Instant::now();
        for c in ring.run(b)? {
            c?;
        }
        reads.push(t.elapsed());
    }
    let read = stats(reads);
    // Timings on a coarse clock (a guest whose TSC was judged unstable runs on 4 ms
    // jiffies) are multiples of its tick: say which clock they came from.
    let clock =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    let clock = clock.trim();
    if clock != "tsc" {
        eprintln!("warning: timed on the {clock} clocksource, not the TSC: figures are coarse");
    }
    println!(
        "MetaServer lookups with {n} entries present ({addr}), {k} names: uncached median {:.1} us, \
         p99 {:.1} us; cached median {:.1} us, p99 {:.1} us; 8 B READ median {:.1} us, p99 {:.1} us; \
         uncached lookup = {:.2} READs; clock {clock}",
        uncached.0,
        uncached.1,
        cached.0,
        cached.1,
        read.0,
        read.1,
        uncached.0 / read.0
    );
    let mut done = ring.register(4096, MrAccess::LOCAL_WRITE)?;
    done.bytes_mut()[..8].fill(1);
    let mut b = Batch::new();
    b.write(&v, &done, 0, &remote, 0, 8)?;
    for c in ring.run(b)? {
        c?;
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: meta_lookup publish N SECS | lookup ADDR N K";
    let mut ring = Builder::new(64).build(Device::open()?)?;
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["publish", n, secs] => publish(&mut ring, n.parse()?, secs.parse()?),
        ["lookup", addr, n, k] => lookup(&mut ring, addr.parse()?, n.parse()?, k.parse()?),
        _ => Err(usage.into()),
    }
}
