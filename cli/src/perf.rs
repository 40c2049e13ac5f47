//! Latency and bandwidth over krcore, in the manner of perftest's ib_read_lat,
//! ib_write_bw and ib_send_lat, and a timed MetaServer lookup.

use std::time::{Duration, Instant};

use krcore_abi::sqe::MrAccess;
use krcore_uring::{Batch, Builder, Device, MemoryRegion, RemoteRegion, Ring, Vqp};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A one-sided operation to measure.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Op {
    /// RDMA READ.
    Read,
    /// RDMA WRITE.
    Write,
    /// 8-byte compare-and-swap.
    Cas,
    /// 8-byte fetch-and-add.
    Faa,
    /// SEND to a `krcore serve --service` (named with --service), which echoes it back
    /// to a RECV: `lat` times the round trip, `bw` counts the bytes sent.
    Send,
}

/// What `lat` and `bw` measure, and against what.
#[derive(clap::Args)]
pub struct Args {
    /// The operation.
    #[arg(long, value_enum, default_value = "read")]
    op: Op,
    /// Bytes per operation (8 for the atomics).
    #[arg(long)]
    size: Option<u32>,
    /// Operations to time (at least 1).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Operations in flight (bw; 1 to 1024, the deepest ring).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    depth: u32,
    /// The node whose memory to reach (address or host name); by default this node's
    /// loopback pool and memory of this process.
    #[arg(long)]
    node: Option<String>,
    /// The name the node published its memory under (with --node).
    #[arg(long, requires = "node")]
    name: Option<String>,
    /// The service the virtual QP connects to (0: no endpoint, one-sided alone; another
    /// needs a listen on it).
    #[arg(long, default_value_t = 0)]
    service: u32,
    /// Run each size for this many seconds instead of --iters operations (perftest's -D).
    #[arg(short = 'D', long, value_parser = positive_secs)]
    duration: Option<f64>,
    /// Every size from 8 B up to --size (by default 64 KiB) in powers of two (perftest's
    /// -a); the atomics have one, 8 B.
    #[arg(short = 'a', long)]
    all_sizes: bool,
    /// One JSON object per size on standard output instead of a line of text.
    #[arg(long)]
    json: bool,
}

/// A duration in seconds: positive and finite.
fn positive_secs(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds (above 0, at most a day)"
        )),
    }
}

/// When a measurement of one size stops.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stop {
    /// After this many operations.
    Ops(u64),
    /// After this long.
    After(Duration),
}

impl Stop {
    /// Whether `done` operations started at `start` are enough.
    fn reached(self, done: u64, start: Instant) -> bool {
        match self {
            Stop::Ops(n) => done >= n,
            Stop::After(d) => start.elapsed() >= d,
        }
    }
}

impl Args {
    fn size(&self, default: u32) -> Result<u32> {
        let s = self.size.unwrap_or(match self.op {
            Op::Cas | Op::Faa => 8,
            _ => default,
        });
        match self.op {
            Op::Cas | Op::Faa if s != 8 => Err("atomics move 8 bytes: --size 8".into()),
            _ if s == 0 => Err("--size must be positive".into()),
            _ => Ok(s),
        }
    }

    /// `bw`'s bytes per operation and its buffer's bytes (`depth` operations'), or
    /// why they cannot be had.
    fn bw_sizes(&self) -> Result<(u32, u32)> {
        let size = self.size(65536)?;
        let total = size
            .checked_mul(self.depth)
            .ok_or("--size times --depth is more memory than one region holds (4 GiB)")?;
        Ok((size, total))
    }

    /// The sizes to measure: `--size` (or `default`), or with `-a` every power of two
    /// from 8 B up to it.
    fn sizes(&self, default: u32) -> Result<Vec<u32>> {
        let top = self.size(if self.all_sizes && self.size.is_none() {
            65536
        } else {
            default
        })?;
        if !self.all_sizes {
            return Ok(vec![top]);
        }
        let mut v: Vec<u32> = std::iter::successors(Some(8u32), |s| s.checked_mul(2))
            .take_while(|&s| s <= top)
            .collect();
        if v.last() != Some(&top) {
            v.push(top);
        }
        Ok(v)
    }

    fn stop(&self) -> Stop {
        match self.duration {
            Some(d) => Stop::After(Duration::from_secs_f64(d)),
            None => Stop::Ops(self.iters as u64),
        }
    }
}

/// A ring, a virtual QP, local memory of `len` bytes, and the remote memory.
struct Setup {
    ring: Ring,
    vqp: Vqp,
    /// `len` bytes sent or written from, read into; for SEND, `len` more receive.
    local: MemoryRegion,
    /// The memory one-sided operations reach (none for SEND).
    remote: Option<RemoteRegion>,
    /// This process's own target memory, on the loopback pool (kept registered).
    _target: Option<MemoryRegion>,
}

fn setup(a: &Args, len: u32) -> Result<Setup> {
    let dev = Device::open()?;
    let own = dev
        .query_devices()?
        .node_gid()
        .ok_or("no RoCE v2 IPv4 GID on any device")?;
    let mut ring = Builder::new(a.depth.clamp(16, 1024)).build(dev)?;
    let vqp = match &a.node {
        Some(n) => ring.connect(n, a.service)?,
        None => ring.connect(own, a.service)?,
    };
    if let Op::Send = a.op {
        if a.service == 0 {
            return Err("SEND needs a listen to echo it: --service of a `krcore serve`".into());
        }
        let local = ring.register(2 * len as usize, MrAccess::LOCAL_WRITE)?;
        return Ok(Setup {
            ring,
            vqp,
            local,
            remote: None,
            _target: None,
        });
    }
    let local = ring.register(len as usize, MrAccess::LOCAL_WRITE)?;
    let (remote, target) = match &a.name {
        Some(name) => (ring.import_name(&vqp, name, len)?, None),
        None => {
            let all = MrAccess::LOCAL_WRITE
                | MrAccess::REMOTE_READ
                | MrAccess::REMOTE_WRITE
                | MrAccess::REMOTE_ATOMIC;
            let t = ring.register(len as usize, all)?;
            let d = t.export().ok_or("no export descriptor")?;
            (ring.import(&vqp, &d)?, Some(t))
        }
    };
    Ok(Setup {
        ring,
        vqp,
        local,
        remote: Some(remote),
        _target: target,
    })
}

/// Adds operation `a.op` of `size` bytes at offset `off` of both sides (a SEND's echo
/// lands `half` bytes further on).
fn add<'a>(
    b: &mut Batch<'a>,
    (v, l, r): (&Vqp, &'a MemoryRegion, Option<&RemoteRegion>),
    a: &Args,
    (off, half): (u64, u64),
    size: u32,
) -> Result<()> {
    let remote = || r.ok_or("no remote memory");
    match a.op {
        Op::Read => b.read(v, l, off, remote()?, off, size)?,
        Op::Write => b.write(v, l, off, remote()?, off, size)?,
        Op::Cas => b.cas(v, l, off, remote()?, off, 0, 0)?,
        Op::Faa => b.faa(v, l, off, remote()?, off, 1)?,
        Op::Send => b
            .recv(v, l, half + off, size)?
            .send(v, l, off, size, None)?,
    };
    Ok(())
}

/// Runs `n` operations at once, each on its own bytes.
fn run(s: &mut Setup, a: &Args, n: u32, size: u32) -> Result<()> {
    let mut b = Batch::new();
    let half = s.local.len() as u64 / 2;
    for k in 0..n as u64 {
        add(
            &mut b,
            (&s.vqp, &s.local, s.remote.as_ref()),
            a,
            (k * size as u64, half),
            size,
        )?;
    }
    for c in s.ring.run(b)? {
        c?;
    }
    Ok(())
}

fn label(a: &Args, size: u32) -> String {
    let echo = match a.op {
        Op::Send => " (echoed)",
        _ => "",
    };
    format!("{} {size} B{echo}", format!("{:?}", a.op).to_uppercase())
}

/// The median and the 99th percentile of `v` (sorted here).
fn median_p99(v: &mut [Duration]) -> (Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Latencies in nanoseconds, to 3 significant digits, from 1 ns to an hour.
fn histogram() -> Result<hdrhistogram::Histogram<u64>> {
    Ok(hdrhistogram::Histogram::new_with_bounds(
        1,
        3_600_000_000_000,
        3,
    )?)
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

pub fn lat(a: &Args) -> Result<()> {
    let sizes = a.sizes(8)?;
    let mut s = setup(a, *sizes.last().expect("one size at least"))?;
    for size in sizes {
        run(&mut s, a, 1, size)?; // warm
        let mut h = histogram()?;
        let (start, stop) = (Instant::now(), a.stop());
        while !stop.reached(h.len(), start) {
            let t = Instant::now();
            run(&mut s, a, 1, size)?;
            h.record(t.elapsed().as_nanos().max(1) as u64)?;
        }
        let q = |p: f64| us(h.value_at_quantile(p));
        if a.json {
            let j = serde_json::json!({
                "test": "lat", "op": format!("{:?}", a.op).to_lowercase(), "size": size,
                "ops": h.len(), "min_us": us(h.min()), "median_us": q(0.5), "p90_us": q(0.9),
                "p99_us": q(0.99), "p999_us": q(0.999), "max_us": us(h.max()),
            });
            println!("{j}");
        } else {
            println!(
                "{}: {} operations one at a time: median {:.2} us, p99 {:.2} us, p99.9 {:.2} us, min {:.2} us, max {:.2} us",
                label(a, size),
                h.len(),
                q(0.5),
                q(0.99),
                q(0.999),
                us(h.min()),
                us(h.max())
            );
        }
    }
    Ok(())
}

pub fn bw(a: &Args) -> Result<()> {
    let (_, total) = a.bw_sizes()?;
    let sizes = a.sizes(65536)?;
    let depth = a.depth;
    let top = *sizes.last().expect("one size at least");
    let total = total.max(
        top.checked_mul(depth)
            .ok_or("--size times --depth is too much memory")?,
    );
    let mut s = setup(a, total)?;
    for size in sizes {
        run(&mut s, a, depth, size)?; // warm
        let (enters, start, stop) = (s.ring.enters(), Instant::now(), a.stop());
        let mut ops = 0u64;
        while !stop.reached(ops, start) {
            run(&mut s, a, depth, size)?;
            ops += depth as u64;
        }
        let secs = start.elapsed().as_secs_f64();
        let (mbps, rate) = (ops as f64 * size as f64 / secs / 1e6, ops as f64 / secs);
        let enters = s.ring.enters() - enters;
        if a.json {
            let j = serde_json::json!({
                "test": "bw", "op": format!("{:?}", a.op).to_lowercase(), "size": size,
                "depth": depth, "ops": ops, "seconds": secs, "mb_per_s": mbps,
                "ops_per_s": rate, "enters": enters,
            });
            println!("{j}");
        } else {
            println!(
                "{}: {ops} operations, {depth} in flight: {mbps:.1} MB/s, {rate:.0} operations/s, {enters} enters",
                label(a, size),
            );
        }
    }
    Ok(())
}

pub fn lookup(node: &str, name: &str, len: u32, again: u32) -> Result<()> {
    let mut ring = Builder::new(16).build(Device::open()?)?;
    let vqp = ring.connect(node, 0)?;
    let start = Instant::now();
    let r = ring.import_name(&vqp, name, len)?;
    let first = start.elapsed();
    println!(
        "{name} at {node}: remote address {:#x}, {} bytes imported",
        r.addr(),
        r.len()
    );
    let mut t = Vec::new();
    for _ in 0..again {
        let start = Instant::now();
        ring.import_name(&vqp, name, len)?;
        t.push(start.elapsed());
    }
    print!(
        "lookup: first {:.1} us (MetaServer READs)",
        first.as_secs_f64() * 1e6
    );
    if !t.is_empty() {
        let (med, p99) = median_p99(&mut t);
        print!(
            ", then cached: median {:.1} us, p99 {:.1} us",
            med.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6
        );
    }
    println!();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(args: &[&str]) -> std::result::Result<Args, clap::Error> {
        crate::parse_only(args)
    }

    #[test]
    fn sizes_sweep_in_powers_of_two_and_atomics_have_one() {
        assert_eq!(
            parse(&["-a", "--size", "64"]).unwrap().sizes(8).unwrap(),
            [8, 16, 32, 64]
        );
        assert_eq!(
            parse(&["-a", "--size", "100"]).unwrap().sizes(8).unwrap(),
            [8, 16, 32, 64, 100]
        );
        assert_eq!(
            parse(&["-a"]).unwrap().sizes(8).unwrap().last(),
            Some(&65536)
        );
        assert_eq!(
            parse(&["-a", "--op", "faa"]).unwrap().sizes(8).unwrap(),
            [8]
        );
        assert_eq!(parse(&[]).unwrap().sizes(8).unwrap(), [8]);
        assert!(parse(&["-D", "0"]).is_err() && parse(&["-D", "nan"]).is_err());
        assert_eq!(
            parse(&["-D", "1.5"]).unwrap().stop(),
            Stop::After(Duration::from_millis(1500))
        );
    }

    #[test]
    fn no_operations_or_too_deep_a_ring_is_refused_by_name() {
        assert!(
            parse(&["--iters", "0"]).is_err(),
            "lat --iters 0 panicked before"
        );
        assert!(parse(&["--depth", "0"]).is_err());
        assert!(parse(&["--depth", "4096"]).is_err());
        let big = parse(&["--size", "1073741824", "--depth", "8"]).unwrap();
        assert!(big.bw_sizes().is_err(), "overflowed a u32 before");
    }

    proptest! {
        /// Whatever the arguments, parsing and sizing answer, and never panic.
        #[test]
        fn no_argument_panics(args in proptest::collection::vec(
            prop_oneof![
                Just("--op".to_string()), Just("--size".to_string()), Just("--iters".to_string()),
                Just("--depth".to_string()), Just("--service".to_string()), Just("cas".to_string()),
                Just("-a".to_string()), Just("-D".to_string()), Just("--json".to_string()),
                Just("read".to_string()), Just("send".to_string()), any::<u32>().prop_map(|n| n.to_string()),
                any::<i64>().prop_map(|n| n.to_string()), "[a-z0-9-]{0,6}",
            ],
            0..8,
        )) {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            if let Ok(a) = parse(&refs) {
                let _ = a.size(8);
                let _ = a.bw_sizes();
                let _ = a.sizes(8).map(|v| assert!(!v.is_empty() && v.windows(2).all(|w| w[0] < w[1])));
                let _ = a.stop();
                prop_assert!(a.iters >= 1 && (1..=1024).contains(&a.depth));
            }
        }
    }
}
