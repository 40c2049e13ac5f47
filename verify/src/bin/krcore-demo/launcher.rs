//! A compute node's launcher: for each system, wait for the store, then start workers
//! one after another, each a fresh process, and report them and the node's timeline.

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use krcore_uring::abi::cqe::Reason;
use krcore_uring::{Builder, Device};
use verify::cm_verbs::Client;
use verify::demo::{Record, SYSTEMS};
use verify::guest::mono_ns;
use verify::kv;

use crate::worker::Report;
use crate::{Res, BIN_MS, NAME, PORT, SERVICE};

/// A launcher's schedule (its arguments, in order).
#[derive(clap::Args)]
pub struct Plan {
    /// The memory node.
    pub addr: Ipv4Addr,
    /// The table's keys.
    pub keys: u64,
    /// Workers per system.
    pub workers: u64,
    /// Between two workers' starts.
    pub join_ms: u64,
    /// Each phase's length: workers serve GETs until then.
    pub run_ms: u64,
    /// The first worker's start (nodes are staggered so joins interleave).
    pub offset_ms: u64,
}

/// Between the krcore phase's end and the verbs phase's start, so the last workers are
/// gone.
const GAP_MS: u64 = 2000;
/// How long a launcher waits for the store.
const WAIT: Duration = Duration::from_secs(120);

/// Retries `f` every 200 ms until it succeeds or [`WAIT`] passed (the store's node still
/// booting, building or publishing); the time to success.
fn until_found(what: &str, mut f: impl FnMut() -> Res<bool>) -> Res<Duration> {
    let t = Instant::now();
    loop {
        if f()? {
            return Ok(t.elapsed());
        }
        if t.elapsed() > WAIT {
            return Err(format!("{what}: the store was not found in {WAIT:?}"));
        }
        sleep(Duration::from_millis(200));
    }
}

/// The node's first contact with the store: for krcore, the connection set to the
/// memory node made and the name imported once; for verbs, one rdma_cm connection.
fn probe(system: &str, p: &Plan) -> Res<Duration> {
    let len = kv::Geometry::new(p.keys).len as u32;
    match system {
        "krcore" => {
            let e = |e: krcore_uring::Error| e.to_string();
            let mut ring = Builder::new(8)
                .build(Device::open().map_err(e)?)
                .map_err(e)?;
            let gid = p.addr.to_ipv6_mapped().octets();
            let passing = |x: &krcore_uring::Error, r: Reason| x.reason() == Some(r);
            let mut vqp = None;
            until_found("krcore", || {
                if vqp.is_none() {
                    match ring.connect(gid, SERVICE) {
                        Ok(v) => vqp = Some(v),
                        Err(x) if passing(&x, Reason::Unreachable) => return Ok(false),
                        Err(x) => return Err(x.to_string()),
                    }
                }
                // Not there yet: the name not published, or the MetaServer (the memory
                // node's module) not answering yet.
                match ring.import_name(vqp.as_ref().expect("connected"), NAME, len) {
                    Ok(_) => Ok(true),
                    Err(x)
                        if passing(&x, Reason::NoSuchName) || passing(&x, Reason::Unreachable) =>
                    {
                        Ok(false)
                    }
                    Err(x) => Err(x.to_string()),
                }
            })
        }
        _ => until_found("verbs", || Ok(Client::connect(p.addr, PORT, 64).is_ok())),
    }
}

fn spawn(system: &str, p: &Plan, phase_ns: u64, end_ns: u64, seed: u64) -> Res<Child> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    Command::new(me)
        .args([
            "worker".to_string(),
            system.into(),
            p.addr.to_string(),
            p.keys.to_string(),
            mono_ns().to_string(),
            phase_ns.to_string(),
            end_ns.to_string(),
            seed.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting a worker: {e}"))
}

fn sleep_until(ns: u64) {
    let now = mono_ns();
    if ns > now {
        sleep(Duration::from_nanos(ns - now));
    }
}

/// One system's phase from `phase_ns`: workers started on schedule, then reported.
fn phase(system: &str, p: &Plan, node: &str, phase_ns: u64) -> Res<()> {
    let ms = 1_000_000;
    let end_ns = phase_ns + p.run_ms * ms;
    let mut children = Vec::new();
    for i in 0..p.workers {
        let at = phase_ns + (p.offset_ms + i * p.join_ms) * ms;
        sleep_until(at);
        let seed = verify::kv::hash(format!("{node}{system}{i}").as_bytes());
        children.push((
            (at - phase_ns) as f64 / ms as f64,
            spawn(system, p, phase_ns, end_ns, seed)?,
        ));
    }
    let mut total = vec![0u64; ((end_ns - phase_ns) / (BIN_MS * ms) + 1) as usize];
    for (i, (joined_ms, child)) in children.into_iter().enumerate() {
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "{system} worker {i} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let r: Report = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("{system} worker {i}'s report: {e}"))?;
        let stages: Vec<String> = r
            .stages
            .iter()
            .map(|(n, us)| format!("{n} {:.0}", us))
            .collect();
        println!(
            "{system} worker {i}: joined at {joined_ms:.0} ms, first GET {:.1} ms after its start ({} us), {} GETs checked",
            r.first_get_us / 1e3,
            stages.join(", "),
            r.gets
        );
        for (t, b) in total.iter_mut().zip(&r.bins) {
            *t += b;
        }
        println!(
            "{}",
            Record::Worker {
                system: system.into(),
                node: node.into(),
                joined_ms,
                stages: r.stages,
                costs: r.costs,
                first_get_us: r.first_get_us,
                first_get_cost: r.first_get_cost,
                gets: r.gets,
            }
            .line()
        );
    }
    println!(
        "{}",
        Record::Timeline {
            system: system.into(),
            node: node.into(),
            bin_ms: BIN_MS,
            counts: total,
        }
        .line()
    );
    Ok(())
}

/// Both phases: krcore, then verbs.
pub fn run(p: &Plan) -> Res<()> {
    let node = std::env::var("KRCORE_NODE").unwrap_or_else(|_| "node".into());
    verify::guest::wait_for_tsc(Duration::from_secs(30))?;
    let mut krcore_end = 0;
    for system in SYSTEMS {
        let took = probe(system, p)?;
        println!(
            "{}",
            Record::Contact {
                system: system.into(),
                node: node.clone(),
                ms: took.as_secs_f64() * 1e3,
            }
            .line()
        );
        // The verbs phase starts a fixed time after the krcore phase, on every node alike.
        let start = mono_ns().max(krcore_end);
        println!(
            "{node}: {system} phase: {} workers, one every {} ms",
            p.workers, p.join_ms
        );
        phase(system, p, &node, start)?;
        krcore_end = start + (p.run_ms + GAP_MS) * 1_000_000;
    }
    Ok(())
}
