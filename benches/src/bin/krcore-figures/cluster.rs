//! The three-guest figures of `make bench` (`krcore-figures cluster NODES..` on the first
//! node, `krcore-figures node` on the others): the serverless hand-off
//! ([`crate::handoff`]) and the full mesh ([`crate::mesh`]). The first node runs a daemon
//! like every node's ([`crate::node`]) and coordinates: it waits until every daemon
//! answers, runs each figure through them, prints the block, and ends the others.

use std::net::Ipv4Addr;
use std::sync::mpsc::channel;
use std::time::Duration;

use krcore_benches::record::Record;
use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::sqe::MrAccess;
use krcore_uring::{Builder, Device};

use crate::far::retry;
use crate::mesh::everywhere;
use crate::node::{self, send, Msg};
use crate::paths::gid_of;

/// The name of the export every node imports before the figures.
const PROBE: &str = "probe";
/// How long a node may take to reach the others (their modules loading, a MetaServer
/// connection in backoff after an attempt before the MetaServer was up).
const REACH_SECS: u64 = 120;

/// This node's address on the guests' segment (`KRCORE_ADDR`, set by the VM runner).
pub fn me() -> Result<Ipv4Addr, String> {
    std::env::var("KRCORE_ADDR")
        .map_err(|_| "KRCORE_ADDR unset (the VM runner sets it)".to_string())?
        .parse()
        .map_err(|e| format!("KRCORE_ADDR: {e}"))
}

/// Every three-guest figure; `others` are the other nodes' addresses.
pub fn figures(others: &[Ipv4Addr], out: &mut Vec<Record>) {
    verify::guest::wait_for_tsc(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    let mut nodes = vec![me().unwrap_or_else(|e| panic!("{e}"))];
    nodes.extend_from_slice(others);
    let (tx, ends) = channel();
    std::thread::spawn(move || node::serve(Some(tx)));
    for &n in &nodes {
        node::wait_up(n, Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    }
    // Every module reaches every node and the MetaServer before anything is timed.
    let t = probe_everywhere(&nodes).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "[figures] every node reaches the others and the MetaServer ({:.1} s)",
        t.as_secs_f64()
    );
    crate::run_sections(
        &[
            ("serverless hand-off", &|o| {
                crate::handoff::figures(&nodes, &ends, o)
            }),
            ("full mesh", &|o| crate::mesh::figures(&nodes, o)),
        ],
        out,
    );
    for &n in others {
        if let Err(e) = send(n, &Msg::Quit) {
            eprintln!("[figures] {n} did not take its quit: {e}");
        }
    }
}

/// Publishes [`PROBE`] and has every node [`reach`] the others and it; how long that
/// took. The probe's ring is closed on return, so nothing of this process holds the
/// module (the mesh reloads it).
fn probe_everywhere(nodes: &[Ipv4Addr]) -> Result<Duration, String> {
    let e = |e: krcore_uring::Error| format!("the probe export: {e}");
    let mut ring = Builder::new(8)
        .build(Device::open().map_err(e)?)
        .map_err(e)?;
    let probe = ring
        .register(8, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ)
        .map_err(e)?;
    retry(REACH_SECS, &[Reason::Unreachable], || {
        ring.publish(&probe, PROBE)
    })
    .map_err(e)?;
    Ok(everywhere(nodes, || Msg::Reach {
        nodes: nodes.to_vec(),
        exporter: nodes[0],
        name: PROBE.into(),
    }))
}

/// [`Msg::Reach`]: CONNECTs to every node of `nodes` but this one, and imports `name`
/// from `exporter`, each retried while it does not answer yet.
pub fn reach(nodes: &[Ipv4Addr], exporter: Ipv4Addr, name: &str) -> Result<(), String> {
    let e = |e: krcore_uring::Error| e.to_string();
    let me = me()?;
    let mut ring = Builder::new(8)
        .build(Device::open().map_err(e)?)
        .map_err(e)?;
    let passing = [Reason::Unreachable, Reason::NoSuchName];
    for &n in nodes.iter().filter(|&&n| n != me) {
        let v = retry(REACH_SECS, &passing, || ring.connect(gid_of(n), 0))
            .map_err(|x| format!("{me} reaching {n}: {x}"))?;
        if n == exporter {
            retry(REACH_SECS, &passing, || ring.import_name(&v, name, 8))
                .map_err(|x| format!("{me} importing {name} from {n}: {x}"))?;
        }
        ring.disconnect(v).map_err(e)?;
    }
    Ok(())
}
