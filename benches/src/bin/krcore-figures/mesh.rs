//! The full mesh (beside Figure 8a): on every node, N fresh processes, started
//! and ready, each connect to every other node; the time from the coordinator's go to
//! the last process connected (their start is left out: under emulation an exec takes
//! tens of milliseconds, alike for both). krcore on warm connection sets (each process
//! has opened its ring), krcore's first contact (every node's module loaded afresh just
//! before, so the sets between every pair of nodes are made during the round, both ends
//! dialing at once), and user-space verbs through rdma_cm (each process opens the
//! device with its first connect, as a fresh process does). Beside them, the same round
//! with processes that connect to no node: what the orchestration itself costs.

use std::io::Write;
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

/// Says `ready`, waits for `go` on stdin.
fn ready_go() -> Result<(), String> {
    println!("ready");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    match line.trim() {
        "go" => Ok(()),
        other => Err(format!("{other:?} where go was due")),
    }
}

/// `krcore-figures meshproc SYSTEM ME NODES..`: once told to go, connects to every node
/// but `me`, one after another, says `connected`, and ends.
pub fn process(system: System, me: Ipv4Addr, nodes: &[Ipv4Addr]) -> Result<(), String> {
    let peers = nodes.iter().filter(|&&n| n != me);
    match system {
        System::Krcore => {
            let e = |e: krcore_uring::Error| e.to_string();
            let mut ring = Builder::new(16)
                .build(Device::open().map_err(e)?)
                .map_err(e)?;
            ready_go()?;
            for &p in peers {
                // No endpoint: the mesh measures the sets and the pool, not links.
                ring.connect(gid_of(p), 0)
                    .map_err(|x| format!("CONNECT to {p}: {x}"))?;
            }
            println!("connected");
        }
        System::Verbs => {
            ready_go()?;
            let mut live = Vec::new();
            for &p in peers {
                let (c, _) = Client::connect(p, MESH_CM_PORT, 64)
                    .map_err(|x| format!("rdma_cm connect to {p}: {x}"))?;
                live.push(c);
            }
            println!("connected");
        }
    }
    Ok(())
}

/// Sends `msg()` to every node at once; the time until all answered.
pub fn everywhere(nodes: &[Ipv4Addr], msg: impl Fn() -> Msg) -> Duration {
    let t = Instant::now();
    let asks: Vec<_> = nodes
        .iter()
        .map(|&n| {
            let m = msg();
            spawn(move || send(n, &m).map_err(|e| format!("{n}: {e}")))
        })
        .collect();
    for a in asks {
        a.join()
            .expect("a request thread")
            .unwrap_or_else(|e| panic!("mesh: {e}"));
    }
    t.elapsed()
}

/// The mesh figures over `all` nodes: time to done per processes per node; the rate is
/// connections made per second.
pub fn figures(all: &[Ipv4Addr], out: &mut Vec<Record>) {
    let n = all.len() as u32;
    // Processes started and ready everywhere, then the go: the time to done. With no
    // nodes named, the processes connect to none: the round's own cost (the go and the
    // answers over TCP, the processes waking).
    let round = |system, procs, nodes: &[Ipv4Addr]| {
        everywhere(all, || Msg::Mesh {
            system,
            procs,
            nodes: nodes.to_vec(),
        });
        everywhere(all, || Msg::Go)
    };
    let mesh = |system, procs| round(system, procs, all);
    // Untimed: the execs cached, every set made.
    for system in System::ALL {
        mesh(system, 1);
    }
    let mut push = |series: &str, procs: u32, rounds: Vec<Duration>| {
        let conns = (n * procs * (n - 1)) as f64 * rounds.len() as f64;
        let rate = conns / rounds.iter().sum::<Duration>().as_secs_f64();
        out.push(Record::times("across-mesh", series, procs, rounds, 1).with_rate(rate));
    };
    let mut idles = Vec::new();
    for procs in PROCS {
        let mut rounds = [Vec::new(), Vec::new()];
        let mut idle = Vec::new();
        for _ in 0..ROUNDS {
            for (i, system) in System::ALL.into_iter().enumerate() {
                rounds[i].push(mesh(system, procs));
            }
            idle.push(round(System::Krcore, procs, &[]));
        }
        let [kr, verbs] = rounds;
        push("krcore-warm", procs, kr);
        push("verbs-cm", procs, verbs);
        idles.push(Record::times("across-mesh", "no-connect", procs, idle, 1));
    }
    // Last: each reload restarts the MetaServer too.
    for procs in PROCS {
        let rounds = (0..ROUNDS)
            .map(|_| {
                everywhere(all, || Msg::Reload);
                mesh(System::Krcore, procs)
            })
            .collect();
        push("krcore-first-contact", procs, rounds);
    }
    out.extend(idles);
}
