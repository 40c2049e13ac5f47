//! Control plane (the paper's Figure 8a): connect latency and connections per second
//! from 1, 2, 4 and 8 processes at once, for krcore's CONNECT on a warm pool and on a
//! cold one (module loaded with `prewarm=0`, so the first CONNECT builds the pool), and
//! for user-space verbs: open the device, PD, CQ, create an RC QP, exchange metadata with
//! the peer over a local socket, INIT/RTR/RTS — and the same without the device open.
//!
//! Each process is a `krcore-figures worker MODE N` child: it prepares, says `ready`,
//! waits for `go` on stdin, times N connects, and prints `lat NS NS ...`. A worker with
//! a setup of its own to time first (crate::echo's) says `set NS` after the first `go`,
//! then waits for a second.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::net::Ipv4Addr;

use krcore_benches::record::Record;
use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::sqe::Sqe;
use krcore_uring::{Builder, Device};
use verify::cm_verbs::Client;
use verify::verbs::{Context, Endpoint, RcQp, ROCE_V2_GID_INDEX};

use crate::far::{retry, CM_PORT};
use crate::paths::{gid_of, leak, run, GID};

/// Process counts measured.
pub const PROCS: [u32; 4] = [1, 2, 4, 8];

/// What a worker connects with.
#[derive(Clone, Copy)]
enum Mode {
    /// krcore's CONNECT to this node's pool (service 0), or to another node's set on a
    /// service of its own (the process id: a service names one link per pair of nodes).
    Krcore { gid: [u8; 16], service: u32 },
    /// Verbs with a local peer and a socket exchange.
    Verbs { open_device: bool },
    /// Verbs through rdma_cm to another node's server (`far`): the connect is the
    /// process's first (librdmacm opens the device then) or follows one untimed.
    Cm { addr: Ipv4Addr, open_device: bool },
}

impl Mode {
    /// `krcore`, `verbs`, `verbs-no-open`; across nodes `krcore@ADDR`, `cm@ADDR` (the
    /// device open already) and `cm-fresh@ADDR`.
    fn parse(s: &str) -> Mode {
        let (kind, addr) = match s.split_once('@') {
            Some((k, a)) => (k, Some(a.parse::<Ipv4Addr>().expect("worker ADDR"))),
            None => (s, None),
        };
        match (kind, addr) {
            ("krcore", None) => Mode::Krcore {
                gid: GID,
                service: 0,
            },
            ("krcore", Some(a)) => Mode::Krcore {
                gid: gid_of(a),
                service: 0,
            },
            ("verbs", None) => Mode::Verbs { open_device: true },
            ("verbs-no-open", None) => Mode::Verbs { open_device: false },
            ("cm", Some(addr)) => Mode::Cm {
                addr,
                open_device: false,
            },
            ("cm-fresh", Some(addr)) => Mode::Cm {
                addr,
                open_device: true,
            },
            _ => panic!("unknown worker mode {s}"),
        }
    }
}

/// The peer side of a verbs connection: for each endpoint it receives, creates a QP,
/// connects it, and answers with its own endpoint (the metadata exchange).
fn meta_server(mut s: UnixStream) {
    let ctx = leak(Context::open("rxe0", 64).expect("verbs peer"));
    let mut buf = [0u8; 20];
    while s.read_exact(&mut buf).is_ok() {
        let remote = Endpoint {
            qpn: u32::from_le_bytes(buf[..4].try_into().unwrap()),
            gid: buf[4..].try_into().unwrap(),
        };
        let q = leak(RcQp::create(ctx, 16).expect("peer QP"));
        q.connect(remote, ROCE_V2_GID_INDEX).expect("peer connect");
        s.write_all(&encode(q.endpoint(ROCE_V2_GID_INDEX).unwrap()))
            .unwrap();
    }
}

fn encode(e: Endpoint) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[..4].copy_from_slice(&e.qpn.to_le_bytes());
    b[4..].copy_from_slice(&e.gid);
    b
}

/// Says `line` to the parent and waits for its `go`.
pub fn say_and_wait(line: &str) {
    println!("{line}");
    std::io::stdout().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
}

/// `krcore-figures worker MODE N`.
pub fn worker(mode: &str, n: usize) {
    if let Some((kind, far)) = mode.split_once('@') {
        let far = || far.parse().expect("worker ADDR");
        match kind {
            "echo" => return crate::echo::worker(crate::echo::Kind::Krcore, far(), n),
            "echo-cm" => return crate::echo::worker(crate::echo::Kind::Verbs, far(), n),
            _ => {}
        }
    }
    let mode = Mode::parse(mode);
    let mut samples = Vec::with_capacity(n);
    let go = || say_and_wait("ready");
    match mode {
        Mode::Krcore { gid, service } => {
            let mut r = Builder::new(64)
                .build(Device::open().expect("open /dev/krcore"))
                .expect("ring");
            go();
            for _ in 0..n {
                let t = Instant::now();
                let c = run(&mut r, Sqe::connect(1, gid, service));
                samples.push(t.elapsed());
                assert!(
                    c.res >= 0,
                    "CONNECT: {:?}",
                    krcore_uring::describe_failure(&c)
                );
                assert_eq!(run(&mut r, Sqe::disconnect(2, c.res as u32)).res, 0);
            }
        }
        Mode::Verbs { open_device } => {
            let (mut sock, peer) = UnixStream::pair().unwrap();
            std::thread::spawn(move || meta_server(peer));
            let shared = (!open_device).then(|| leak(Context::open("rxe0", 64).expect("verbs")));
            go();
            for _ in 0..n {
                let t = Instant::now();
                let ctx = shared.unwrap_or_else(|| leak(Context::open("rxe0", 64).expect("verbs")));
                let q = leak(RcQp::create(ctx, 16).expect("QP"));
                sock.write_all(&encode(q.endpoint(ROCE_V2_GID_INDEX).unwrap()))
                    .unwrap();
                let mut b = [0u8; 20];
                sock.read_exact(&mut b).unwrap();
                let peer = Endpoint {
                    qpn: u32::from_le_bytes(b[..4].try_into().unwrap()),
                    gid: b[4..].try_into().unwrap(),
                };
                q.connect(peer, ROCE_V2_GID_INDEX).expect("connect");
                samples.push(t.elapsed());
            }
        }
        Mode::Cm { addr, open_device } => {
            let connect = || Client::connect(addr, CM_PORT, 4096).expect("rdma_cm connect");
            if !open_device {
                drop(connect());
            }
            go();
            for _ in 0..n {
                let t = Instant::now();
                let c = connect();
                samples.push(t.elapsed());
                drop(c);
            }
        }
    }
    let ns: Vec<String> = samples.iter().map(|d| d.as_nanos().to_string()).collect();
    println!("lat {}", ns.join(" "));
}

/// What a round of workers measured.
pub struct Round {
    /// Every operation's latency.
    pub samples: Vec<Duration>,
    /// Each worker's setup, for those that time one (`set`).
    pub setup: Vec<Duration>,
    /// From the `go` of the timed operations to the last worker's answer.
    pub wall: Duration,
}

/// Each worker's next line, which must start with `prefix`: the durations after it.
fn answers(
    kids: &mut [(Child, BufReader<std::process::ChildStdout>)],
    mode: &str,
    prefix: &str,
) -> Vec<Duration> {
    let mut line = String::new();
    let mut all = Vec::new();
    for (_, out) in kids {
        line.clear();
        out.read_line(&mut line).unwrap();
        let rest = line
            .trim()
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("worker {mode} said {line:?}, not {prefix:?}"));
        all.extend(
            rest.split(' ')
                .filter(|v| !v.is_empty())
                .map(|v| Duration::from_nanos(v.parse().unwrap())),
        );
    }
    all
}

/// Runs `procs` workers at once: their latencies and the wall time of their timed
/// operations, and their setups for the workers that time one (`set`; all do or none).
pub fn round(mode: &str, procs: u32, n: usize) -> Round {
    let exe = std::env::current_exe().unwrap();
    let mut kids: Vec<(Child, BufReader<std::process::ChildStdout>)> = (0..procs)
        .map(|_| {
            let mut c = Command::new(&exe)
                .args(["worker", mode, &n.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn worker");
            let out = BufReader::new(c.stdout.take().unwrap());
            (c, out)
        })
        .collect();
    answers(&mut kids, mode, "ready");
    let go = |kids: &mut [(Child, _)]| {
        for (c, _) in kids {
            c.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        }
    };
    let setup = if mode.starts_with("echo") {
        go(&mut kids);
        answers(&mut kids, mode, "set ")
    } else {
        Vec::new()
    };
    let t = Instant::now();
    go(&mut kids);
    let samples = answers(&mut kids, mode, "lat ");
    let wall = t.elapsed();
    for (mut c, _) in kids {
        assert!(c.wait().unwrap().success(), "worker {mode} failed");
    }
    Round {
        samples,
        setup,
        wall,
    }
}

/// The `group` figure of `series` from `procs` processes over `rounds`: latencies and
/// the overall rate.
pub fn record(group: &str, series: &str, procs: u32, rounds: Vec<Round>) -> Record {
    let ops: usize = rounds.iter().map(|r| r.samples.len()).sum();
    let wall: Duration = rounds.iter().map(|r| r.wall).sum();
    let samples = rounds.into_iter().flat_map(|r| r.samples).collect();
    Record::times(group, series, procs, samples, 1).with_rate(ops as f64 / wall.as_secs_f64())
}

/// Warm krcore and both verbs variants.
pub fn figures(out: &mut Vec<Record>) {
    for procs in PROCS {
        for (series, mode, n) in [
            ("krcore-warm", "krcore", 1000),
            ("verbs-opening-device", "verbs", 20),
            ("verbs-device-already-open", "verbs-no-open", 20),
        ] {
            out.push(record(
                "connect",
                series,
                procs,
                vec![round(mode, procs, n)],
            ));
        }
    }
}

/// Runs a command; what failed unless it succeeds.
pub fn sh(args: &[&str]) -> Result<(), String> {
    match Command::new(args[0]).args(&args[1..]).status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{args:?}: {s}")),
        Err(e) => Err(format!("{args:?}: {e}")),
    }
}

/// krcore with a cold pool: before each round the module is reloaded with `prewarm=0`,
/// so the round's first CONNECT creates and connects the pool while the others wait on
/// it. Leaves the module loaded as the VM runner loaded it (`KRCORE_PARAMS`).
pub fn cold_figures(out: &mut Vec<Record>) {
    let ko = std::env::var("KRCORE_KO").expect("KRCORE_KO (set by the VM runner)");
    for procs in PROCS {
        let rounds = (0..5)
            .map(|_| {
                sh(&["rmmod", "krcore"]).unwrap_or_else(|e| panic!("{e}"));
                sh(&["insmod", &ko, "prewarm=0"]).unwrap_or_else(|e| panic!("{e}"));
                round("krcore", procs, 1)
            })
            .collect();
        out.push(record("connect", "krcore-cold", procs, rounds));
    }
    reload_as_loaded();
}

/// Loads the module afresh with `KRCORE_FIGURES_INSMOD`'s parameters (a cluster run's:
/// its cm port and MetaServer) and waits (30 s at most) until its pool serves a CONNECT
/// to this node's own GID, so what follows measures connection sets alone.
pub fn fresh_module() -> Result<(), String> {
    let ko = std::env::var("KRCORE_KO").map_err(|_| "KRCORE_KO unset (the VM runner sets it)")?;
    let params = std::env::var("KRCORE_FIGURES_INSMOD").unwrap_or_default();
    let me = crate::cluster::me()?;
    sh(&["rmmod", "krcore"])?;
    let mut insmod = vec!["insmod", &ko];
    insmod.extend(params.split_whitespace());
    sh(&insmod)?;
    let e = |e: krcore_uring::Error| e.to_string();
    let mut ring = Builder::new(8)
        .build(Device::open().map_err(e)?)
        .map_err(e)?;
    let local = retry(30, &[Reason::Unreachable], || ring.connect(gid_of(me), 0)).map_err(e)?;
    ring.disconnect(local).map_err(e)
}

/// Loads the module the VM runner loaded, with its parameters, in place of the current.
fn reload_as_loaded() {
    let ko = std::env::var("KRCORE_KO").expect("KRCORE_KO (set by the VM runner)");
    sh(&["rmmod", "krcore"]).unwrap_or_else(|e| panic!("{e}"));
    let params = std::env::var("KRCORE_PARAMS").unwrap_or_default();
    let mut insmod = vec!["insmod", &ko];
    insmod.extend(params.split_whitespace());
    sh(&insmod).unwrap_or_else(|e| panic!("{e}"));
}
