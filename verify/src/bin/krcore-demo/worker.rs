//! One short-lived worker: bootstrap (every stage timed from its spawn), then GETs until
//! its end, each value checked against the key set. Prints one JSON line: its
//! [`Report`].

use std::net::Ipv4Addr;

use krcore_uring::abi::sqe::MrAccess;
use krcore_uring::{Batch, Builder, Device, MemoryRegion, RemoteRegion, Ring, Vqp};
use serde::{Deserialize, Serialize};
use verify::cm_verbs::Client;
use verify::guest::{mono_ns, Cost, Stages};
use verify::kv::{self, Reader};

use crate::{Res, BIN_MS, NAME, PORT, SERVICE};

/// What the launcher asks of a worker (its arguments, in order).
#[derive(clap::Args)]
pub struct Job {
    /// `krcore` or `verbs`.
    pub system: String,
    /// The memory node.
    pub addr: Ipv4Addr,
    /// The table's keys.
    pub keys: u64,
    /// When the launcher spawned this process (CLOCK_MONOTONIC).
    pub spawn_ns: u64,
    /// When its node's phase began: the timeline's origin.
    pub phase_ns: u64,
    /// When to stop serving GETs.
    pub end_ns: u64,
    /// Seeds its key draws.
    pub seed: u64,
}

/// What a worker tells its launcher.
#[derive(Serialize, Deserialize)]
pub struct Report {
    /// Bootstrap stages in order, (name, microseconds); the first is the exec (from the
    /// launcher's spawn to this process's main), the same for both systems.
    pub stages: Vec<(String, f64)>,
    /// Each stage's CPU time and page faults, where measured (`Stages::costs`).
    pub costs: Vec<Option<Cost>>,
    /// From spawn to the first GET's value in hand.
    pub first_get_us: f64,
    /// The CPU time and faults of the same stretch (from main on, as `first_get_us`).
    pub first_get_cost: Cost,
    /// GETs made.
    pub gets: u64,
    /// GETs completed per [`BIN_MS`] from the phase's start.
    pub bins: Vec<u64>,
}

/// The store through krcore: one ring, one virtual QP, the table imported by name.
struct Krcore {
    ring: Ring,
    vqp: Vqp,
    local: MemoryRegion,
    table: RemoteRegion,
}

impl Reader for Krcore {
    fn read(&mut self, ranges: &[(u64, u32)]) -> Res<Vec<u8>> {
        let mut b = Batch::new();
        let mut at = 0u64;
        for &(offset, len) in ranges {
            b.read(&self.vqp, &self.local, at, &self.table, offset, len)
                .map_err(|e| e.to_string())?;
            at += len as u64;
        }
        for c in self.ring.run(b).map_err(|e| e.to_string())? {
            c.map_err(|e| e.to_string())?;
        }
        Ok(self.local.bytes()[..at as usize].to_vec())
    }
}

fn krcore(job: &Job, st: &mut Stages, len: u32) -> Res<Krcore> {
    let e = |e: krcore_uring::Error| e.to_string();
    let dev = st.time("open", || Device::open().map_err(e))?;
    let mut ring = st.time("ring", || Builder::new(16).build(dev).map_err(e))?;
    let gid = job.addr.to_ipv6_mapped().octets();
    let vqp = st.time("CONNECT", || ring.connect(gid, SERVICE).map_err(e))?;
    let table = st.time("IMPORT_NAME", || {
        ring.import_name(&vqp, NAME, len).map_err(e)
    })?;
    let local = st.time("REG_MR", || {
        ring.register(4096, MrAccess::LOCAL_WRITE).map_err(e)
    })?;
    Ok(Krcore {
        ring,
        vqp,
        local,
        table,
    })
}

fn verbs(job: &Job, st: &mut Stages) -> Res<Client> {
    let (c, s) = Client::connect(job.addr, PORT, 4096).map_err(|e| e.to_string())?;
    st.push_cm(&s);
    Ok(c)
}

/// One GET of a key drawn from `zipf`, its value checked.
fn one_get(r: &mut impl Reader, g: &kv::Geometry, zipf: &mut kv::Zipf) -> Res<()> {
    let k = kv::key(zipf.next_key());
    match kv::get(r, g, k.as_bytes())? {
        Some(v) if v == kv::value(k.as_bytes()) => Ok(()),
        Some(v) => Err(format!("GET {k}: {} wrong bytes", v.len())),
        None => Err(format!("GET {k}: not found")),
    }
}

/// The rest of the bootstrap (the header checked, the first GET), then GETs until the
/// end.
fn serve(job: &Job, st: &mut Stages, r: &mut impl Reader) -> Res<Report> {
    let g = st.time("header READ", || kv::check_header(r, job.keys))?;
    let mut zipf = kv::Zipf::new(job.keys, job.seed);
    st.time("first GET", || one_get(r, &g, &mut zipf))?;
    // From this process's main: the exec before it is the test bed's, alike for both.
    let first_get_us = mono_ns().saturating_sub(job.spawn_ns) as f64 / 1e3 - st.list[0].1;
    let first_get_cost = Cost::now().since(st.costs[0].unwrap_or_default());
    let bin_ns = BIN_MS * 1_000_000;
    let mut bins = vec![0u64; (job.end_ns.saturating_sub(job.phase_ns) / bin_ns + 1) as usize];
    let count = |bins: &mut Vec<u64>| {
        let last = bins.len() - 1;
        bins[((mono_ns().saturating_sub(job.phase_ns) / bin_ns) as usize).min(last)] += 1;
    };
    count(&mut bins);
    let mut gets = 1;
    while mono_ns() < job.end_ns {
        one_get(r, &g, &mut zipf)?;
        gets += 1;
        count(&mut bins);
    }
    Ok(Report {
        stages: std::mem::take(&mut st.list),
        costs: std::mem::take(&mut st.costs),
        first_get_us,
        first_get_cost,
        gets,
        bins,
    })
}

/// Runs the job and prints its report.
pub fn run(job: &Job) -> Res<()> {
    let mut st = Stages::new(job.spawn_ns);
    let len = u32::try_from(kv::Geometry::new(job.keys).len).map_err(|_| "table too large")?;
    let report = match job.system.as_str() {
        "krcore" => {
            let mut s = krcore(job, &mut st, len)?;
            serve(job, &mut st, &mut s)?
        }
        "verbs" => {
            let mut c = verbs(job, &mut st)?;
            serve(job, &mut st, &mut c)?
        }
        other => return Err(format!("no system {other}: krcore or verbs")),
    };
    println!(
        "{}",
        serde_json::to_string(&report).map_err(|e| e.to_string())?
    );
    Ok(())
}
