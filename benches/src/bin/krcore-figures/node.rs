//! The node daemon of the three-guest figures (`make bench`: the serverless hand-off
//! and the full mesh). Every node runs one (`krcore-figures node` on the others,
//! in-process beside the coordinator on the first, [`crate::cluster`]). It is what a
//! serverless platform's per-node agent would be: it takes requests on a TCP port and
//! starts fresh processes for them:
//! - [`Msg::Run`]: start the hand-off chain's next function here
//!   ([`crate::handoff::function`]), timed from this request's arrival;
//! - [`Msg::Mesh`]: start processes that will each connect to every other node, and
//!   answer once all are ready; [`Msg::Go`]: have them connect, and answer once all are
//!   connected ([`crate::mesh::process`]);
//! - [`Msg::Reach`]: answer once this node's module reaches the others and the
//!   MetaServer;
//! - [`Msg::Reload`]: load the krcore module afresh and answer once its pool serves;
//! - [`Msg::Done`] and [`Msg::Failed`] (the coordinator's node only): a chain ended.
//!
//! It also serves the mesh's verbs connections over rdma_cm on [`MESH_CM_PORT`]. The
//! requests travel over TCP on the guests' segment, the same for krcore and verbs: the
//! platform's own messages, not what is compared.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::{sleep, spawn};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use verify::guest::mono_ns;

use crate::handoff::{Account, Call};

/// The daemons' TCP port.
pub const PORT: u16 = 7480;
/// The rdma_cm port of each node's verbs server for the mesh.
pub const MESH_CM_PORT: u16 = 7475;
/// How long a daemon serves at most.
const SERVE_FOR: Duration = Duration::from_secs(1800);
/// How long a request waits for its answer at most (a mesh round of fresh verbs
/// processes is the longest).
const ANSWER_IN: Duration = Duration::from_secs(300);

/// Which control plane a process uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum System {
    /// krcore: the kernel's connection sets, the MetaServer for names.
    Krcore,
    /// User-space verbs through rdma_cm, in the process.
    Verbs,
}

impl System {
    /// Both, in the order they are measured.
    pub const ALL: [System; 2] = [System::Krcore, System::Verbs];

    /// The series name.
    pub fn name(self) -> &'static str {
        match self {
            System::Krcore => "krcore",
            System::Verbs => "verbs",
        }
    }
}

/// A request to a node daemon.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Answered at once: the daemon is up.
    Ping,
    /// Start the chain's function `call.k` here.
    Run(Call),
    /// The chain `run` ended: each function's account.
    Done {
        /// The chain.
        run: u32,
        /// Its functions' accounts, in order.
        trail: Vec<Account>,
    },
    /// Function `k` of chain `run` failed.
    Failed {
        /// The chain.
        run: u32,
        /// The function.
        k: u32,
        /// What its process said or how it ended.
        why: String,
    },
    /// Start `procs` processes that will each connect to every node of `nodes` but this
    /// one; answer once all are ready.
    Mesh {
        /// Which control plane.
        system: System,
        /// Processes on this node.
        procs: u32,
        /// Every node of the mesh, this one included.
        nodes: Vec<Ipv4Addr>,
    },
    /// Have the processes [`Msg::Mesh`] started connect; answer once all are connected.
    Go,
    /// Answer once this node's module reaches every other node of `nodes` (a CONNECT)
    /// and the MetaServer (an import of `name`, which `exporter` published).
    Reach {
        /// Every node, this one included.
        nodes: Vec<Ipv4Addr>,
        /// The node that published `name`.
        exporter: Ipv4Addr,
        /// The probe's name.
        name: String,
    },
    /// Load the krcore module afresh (`KRCORE_FIGURES_INSMOD`'s parameters); answer once
    /// its pool serves.
    Reload,
    /// End the daemon.
    Quit,
}

/// Sends `msg` to the daemon at `addr`; its answer (`ok`, or what failed).
pub fn send(addr: Ipv4Addr, msg: &Msg) -> Result<(), String> {
    let what = |e: std::io::Error| format!("daemon at {addr}: {e}");
    let mut s = TcpStream::connect((addr, PORT)).map_err(what)?;
    s.set_read_timeout(Some(ANSWER_IN)).map_err(what)?;
    // One line, so a mesh round's requests leave at once.
    s.set_nodelay(true).map_err(what)?;
    let mut line = serde_json::to_string(msg).map_err(|e| e.to_string())?;
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(what)?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).map_err(what)?;
    match answer.trim() {
        "ok" => Ok(()),
        "" => Err(format!("daemon at {addr}: no answer")),
        other => Err(format!("daemon at {addr}: {other}")),
    }
}

/// [`send`]s `Ping` until the daemon at `addr` answers (its guest still booting), for
/// `limit` at most.
pub fn wait_up(addr: Ipv4Addr, limit: Duration) -> Result<(), String> {
    let t = Instant::now();
    loop {
        match send(addr, &Msg::Ping) {
            Ok(()) => return Ok(()),
            Err(e) if t.elapsed() > limit => return Err(format!("{e} (waited {limit:?})")),
            Err(_) => sleep(Duration::from_millis(500)),
        }
    }
}

/// Serves requests until `Quit` or [`SERVE_FOR`]; `Done` and `Failed` go to
/// `coordinator` (this node's coordinator, if it has one).
pub fn serve(coordinator: Option<Sender<Msg>>) {
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).expect("the daemon's port");
    spawn(|| {
        let mem = crate::paths::leak(vec![0u8; 64]).as_ptr() as *mut u8;
        // SAFETY: leaked, so it lives as long as the server; nothing else touches it.
        let mem = unsafe { std::slice::from_raw_parts_mut(mem, 64) };
        verify::cm_verbs::serve(
            MESH_CM_PORT,
            mem,
            usize::MAX,
            SERVE_FOR.as_secs(),
            verify::cm_verbs::Recvs::Drop(0),
        )
        .expect("the mesh's verbs server");
    });
    // The mesh processes started and ready, until their go.
    let ready: Arc<Mutex<Vec<Mesher>>> = Arc::default();
    let t = Instant::now();
    for s in listener.incoming() {
        let Ok(s) = s else { continue };
        let at = mono_ns();
        let mut line = String::new();
        let mut reader = BufReader::new(s.try_clone().expect("a second handle"));
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        let msg: Msg = match serde_json::from_str(&line) {
            Ok(m) => m,
            Err(e) => {
                answer(s, Err(format!("not a request ({e}): {line:?}")));
                continue;
            }
        };
        match msg {
            Msg::Quit => {
                answer(s, Ok(()));
                return;
            }
            Msg::Ping => answer(s, Ok(())),
            Msg::Run(call) => answer(s, run(call, at)),
            m @ (Msg::Done { .. } | Msg::Failed { .. }) => match &coordinator {
                Some(c) => answer(s, c.send(m).map_err(|_| "the coordinator is gone".into())),
                None => answer(s, Err("no coordinator on this node".into())),
            },
            // Seconds long: answered from a thread of its own.
            Msg::Mesh {
                system,
                procs,
                nodes,
            } => {
                let ready = ready.clone();
                spawn(move || answer(s, mesh(system, procs, &nodes, &ready)));
            }
            Msg::Go => {
                let ready = std::mem::take(&mut *ready.lock().expect("the mesh processes"));
                spawn(move || {
                    let mut ready = ready;
                    answer(s, go(&mut ready));
                    reap(ready);
                });
            }
            Msg::Reach {
                nodes,
                exporter,
                name,
            } => {
                spawn(move || answer(s, crate::cluster::reach(&nodes, exporter, &name)));
            }
            Msg::Reload => {
                spawn(move || answer(s, crate::control::fresh_module()));
            }
        }
        if t.elapsed() > SERVE_FOR {
            eprintln!("[node] served {SERVE_FOR:?}: ending");
            return;
        }
    }
}

fn answer(mut s: TcpStream, r: Result<(), String>) {
    let line = match r {
        Ok(()) => "ok\n".to_string(),
        Err(e) => format!("{}\n", e.replace('\n', " ")),
    };
    let _ = s.write_all(line.as_bytes());
}

/// Starts function `call.k` (its request arrived at `at`); a thread reports it to the
/// coordinator if it fails.
fn run(call: Call, at: u64) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let json = serde_json::to_string(&call).map_err(|e| e.to_string())?;
    let child = Command::new(exe)
        .args(["function", &json, &at.to_string()])
        .spawn()
        .map_err(|e| format!("starting function {}: {e}", call.k))?;
    spawn(move || {
        let out = child.wait_with_output();
        let why = match out {
            Ok(o) if o.status.success() => return,
            Ok(o) => format!("it ended with {}", o.status),
            Err(e) => e.to_string(),
        };
        let failed = Msg::Failed {
            run: call.run,
            k: call.k,
            why,
        };
        if let Err(e) = send(call.coordinator, &failed) {
            eprintln!("[node] function {} of chain {} failed, and telling the coordinator failed too: {e}", call.k, call.run);
        }
    });
    Ok(())
}

/// A mesh process and its output.
type Mesher = (Child, BufReader<ChildStdout>);

/// Reads a mesh process's next line; it must be `want`.
fn expect_line(m: &mut Mesher, want: &str) -> Result<(), String> {
    let mut line = String::new();
    m.1.read_line(&mut line).map_err(|e| e.to_string())?;
    if line.trim() == want {
        return Ok(());
    }
    let st = m.0.wait().map(|s| s.to_string()).unwrap_or_default();
    Err(format!(
        "a mesh process said {:?} where {want:?} was due ({st})",
        line.trim()
    ))
}

/// Starts `procs` mesh processes and waits until each is ready; they join `ready`.
fn mesh(
    system: System,
    procs: u32,
    nodes: &[Ipv4Addr],
    ready: &Mutex<Vec<Mesher>>,
) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let me = crate::cluster::me()?;
    let mut args = vec!["meshproc".to_string(), system.name().into(), me.to_string()];
    args.extend(nodes.iter().map(|n| n.to_string()));
    for _ in 0..procs {
        let mut c = Command::new(&exe)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting a mesh process: {e}"))?;
        let out = BufReader::new(c.stdout.take().expect("piped"));
        let mut m = (c, out);
        expect_line(&mut m, "ready")?;
        ready.lock().expect("the mesh processes").push(m);
    }
    Ok(())
}

/// Tells every ready mesh process to go; waits until each is connected.
fn go(ready: &mut [Mesher]) -> Result<(), String> {
    for m in ready.iter_mut() {
        let stdin = m.0.stdin.as_mut().expect("piped");
        stdin
            .write_all(b"go\n")
            .map_err(|e| format!("a mesh process's go: {e}"))?;
    }
    for m in ready.iter_mut() {
        expect_line(m, "connected")?;
    }
    Ok(())
}

/// Waits for mesh processes to end, saying which failed.
fn reap(ready: Vec<Mesher>) {
    for (mut c, _) in ready {
        // A process still waiting for its go ends on the closed input.
        drop(c.stdin.take());
        match c.wait() {
            Ok(s) if s.success() => {}
            r => eprintln!("[node] a mesh process ended with {r:?}"),
        }
    }
}
