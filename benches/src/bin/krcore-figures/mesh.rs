//! The full mesh (issue 12, beside Figure 8a): on every node, N fresh processes each
//! connect to every other node; the time from the coordinator's go to the last
//! process connected. krcore on warm connection sets, krcore's first contact (every
//! node's module loaded afresh just before, so the sets between every pair of nodes are
//! made during the round, both ends dialing at once), and user-space verbs through
//! rdma_cm (each process opens the device with its first connect).

use std::net::Ipv4Addr;
use std::thread::spawn;
use std::time::{Duration, Instant};

use krcore_benches::record::Record;
use krcore_uring::{Builder, Device};
use verify::cm_verbs::Client;

use crate::node::{send, Msg, System, MESH_CM_PORT};
use crate::paths::gid_of;

/// Processes per node.
const PROCS: [u32; 3] = [1, 4, 8];
/// Rounds per figure (first contact: one per reload).
const ROUNDS: usize = 3;

/// `krcore-figures meshproc SYSTEM ME NODES..`: connects to every node but `me`, one
/// after another, and ends once all are connected.
pub fn process(system: System, me: Ipv4Addr, nodes: &[Ipv4Addr]) -> Result<(), String> {
    let peers = nodes.iter().filter(|&&n| n != me);
    match system {
        System::Krcore => {
            let e = |e: krcore_uring::Error| e.to_string();
            let mut ring = Builder::new(16).build(Device::open().map_err(e)?).map_err(e)?;
            for &p in peers {
                // A service per process: one link per pair of nodes and service.
                ring.connect(gid_of(p), std::process::id())
                    .map_err(|x| format!("CONNECT to {p}: {x}"))?;
            }
        }
        System::Verbs => {
            let mut live = Vec::new();
            for &p in peers {
                let (c, _) = Client::connect(p, MESH_CM_PORT, 64)
                    .map_err(|x| format!("rdma_cm connect to {p}: {x}"))?;
                live.push(c);
            }
        }
    }
    Ok(())
}

/// Sends `msg()` to every node at once; the time until all answered.
fn everywhere(nodes: &[Ipv4Addr], msg: impl Fn() -> Msg) -> Duration {
    let t = Instant::now();
    let asks: Vec<_> = nodes
        .iter()
        .map(|&n| {
            let m = msg();
            spawn(move || send(n, &m).map_err(|e| format!("{n}: {e}")))
        })
        .collect();
    for a in asks {
        a.join().expect("a request thread").unwrap_or_else(|e| panic!("mesh: {e}"));
    }
    t.elapsed()
}

/// The mesh figures over `nodes`: time to done per processes per node; the rate is
/// connections made per second.
pub fn figures(nodes: &[Ipv4Addr], out: &mut Vec<Record>) {
    let n = nodes.len() as u32;
    let mesh = |system, procs| {
        everywhere(nodes, || Msg::Mesh {
            system,
            procs,
            nodes: nodes.to_vec(),
        })
    };
    // Untimed: the execs cached, every set made.
    for system in System::ALL {
        mesh(system, 1);
    }
    let mut push = |series: &str, procs: u32, rounds: Vec<Duration>| {
        let conns = (n * procs * (n - 1)) as f64 * rounds.len() as f64;
        let rate = conns / rounds.iter().sum::<Duration>().as_secs_f64();
        out.push(Record::times("across-mesh", series, procs, rounds, 1).with_rate(rate));
    };
    for procs in PROCS {
        let mut rounds = [Vec::new(), Vec::new()];
        for _ in 0..ROUNDS {
            for (i, system) in System::ALL.into_iter().enumerate() {
                rounds[i].push(mesh(system, procs));
            }
        }
        let [kr, verbs] = rounds;
        push("krcore-warm", procs, kr);
        push("verbs-cm", procs, verbs);
    }
    // Last: each reload restarts the MetaServer too.
    for procs in PROCS {
        let rounds = (0..ROUNDS)
            .map(|_| {
                everywhere(nodes, || Msg::Reload);
                mesh(System::Krcore, procs)
            })
            .collect();
        push("krcore-first-contact", procs, rounds);
    }
}
