//! The serverless hand-off: a chain of short-lived functions on different
//! nodes, each a fresh process that starts, connects to the previous function's node,
//! takes its output (4 KiB to 1 MiB) with one-sided READs, checks it, and offers its own
//! to the next: krcore beside user-space verbs through rdma_cm.
//!
//! A function is started by its node's daemon ([`crate::node`], as a serverless
//! platform's agent would) when the previous one asks, and it asks the next one's node
//! in turn. What each system does between:
//! - krcore: open, ring, REG_MR of its buffer; CONNECT to the previous node, IMPORT_NAME
//!   of the previous output (the MetaServer), READ, check, WRITE the previous's `taken`
//!   word, DISCONNECT; fill its own output and PUBLISH it by name;
//! - verbs: rdma_cm to the previous function's listener (the device opened, PD, CQ, QP,
//!   MR, the accept carrying the descriptor), READ, check, disconnect (the previous one
//!   sees it go); fill its own output and listen on a port of its own.
//!
//! Then it triggers the next and waits until its output was taken. The coordinator times
//! each chain end to end (the start of the first function to the last one's done, one
//! clock); each function's account (from its request's arrival to its trigger, on its
//! node's clock, and its stages) travels down the chain with it.

use std::net::Ipv4Addr;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::{sleep, JoinHandle};
use std::time::{Duration, Instant};

use krcore_benches::record::Record;
use krcore_uring::abi::sqe::MrAccess;
use krcore_uring::{Batch, Builder, Device, MemoryRegion, Ring};
use serde::{Deserialize, Serialize};
use verify::cm_verbs::{Client, Listener};
use verify::guest::{mono_ns, Stages};

use crate::node::{send, Msg, System};
use crate::paths::gid_of;

/// The sizes handed off.
pub const SIZES: [u32; 3] = [4 << 10, 64 << 10, 1 << 20];
/// Chains measured per size and system (after one untimed chain per system).
const CHAINS: u32 = 5;
/// Hand-offs per chain: functions on the nodes in turn, so every hand-off crosses nodes.
const HOPS: usize = 6;
/// The first rdma_cm port of the verbs functions' listeners.
const BASE_PORT: u16 = 7500;
/// How long a function waits for its output to be taken, and the coordinator for a chain.
const WAIT: Duration = Duration::from_secs(120);

/// What a node's daemon is asked to run: function `k` of chain `run`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Call {
    /// Which control plane.
    pub system: System,
    /// The chain (unique in a run: it names the outputs).
    pub run: u32,
    /// This function's place in the chain; 0 makes the input.
    pub k: u32,
    /// Bytes handed off.
    pub len: u32,
    /// Each function's node, in order.
    pub route: Vec<Ipv4Addr>,
    /// Where the chain's end is reported.
    pub coordinator: Ipv4Addr,
    /// The accounts of the functions before.
    pub trail: Vec<Account>,
}

/// One function's account of itself.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Account {
    /// Its place in the chain.
    pub k: u32,
    /// From its request's arrival at its node's daemon to its trigger of the next, µs.
    pub total_us: f64,
    /// Its stages, µs, the first being its exec.
    pub stages: Vec<(String, f64)>,
}

/// The name of chain `run`'s output of function `k` (krcore).
fn name(run: u32, k: u32) -> String {
    format!("h{run}-{k}")
}

/// The rdma_cm port of chain `run`'s function `k` (verbs): a port is used again only
/// eight chains later, long after its listener was closed.
fn port(run: u32, k: u32) -> u16 {
    BASE_PORT + (run % 8) as u16 * 16 + k as u16
}

/// Byte `i` of chain `run`'s output of function `k`: every output differs.
fn byte(run: u32, k: u32, i: usize) -> u8 {
    (i as u32).wrapping_mul(131).wrapping_add(run * 7 + k * 13) as u8 ^ (i >> 8) as u8
}

fn fill(buf: &mut [u8], run: u32, k: u32) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = byte(run, k, i);
    }
}

fn check(buf: &[u8], run: u32, k: u32) -> Result<(), String> {
    match buf.iter().enumerate().find(|&(i, &b)| b != byte(run, k, i)) {
        None => Ok(()),
        Some((i, b)) => Err(format!(
            "function {k}'s output of chain {run}: byte {i} of {} is {b:#x}, not {:#x}",
            buf.len(),
            byte(run, k, i)
        )),
    }
}

/// What keeps a function's output offered until the next one took it.
enum Offer {
    /// Its registered buffer (published; revoked when the ring closes) and the `taken`
    /// word's offset, which the next function WRITEs.
    Krcore(Box<Ring>, MemoryRegion, usize),
    /// Its listener's thread, which ends when the next function disconnected.
    Verbs(JoinHandle<Result<(), String>>),
    /// The last function offers nothing.
    Nothing,
}

impl Offer {
    fn wait_taken(self) -> Result<(), String> {
        let t = Instant::now();
        match self {
            Offer::Krcore(_ring, mut mr, at) => loop {
                // SAFETY: 8 bytes of our own registered buffer, which the next function
                // WRITEs remotely: read fresh each time.
                let w =
                    unsafe { std::ptr::read_volatile(mr.bytes().as_ptr().add(at).cast::<u64>()) };
                if w == 1 {
                    return Ok(());
                }
                if t.elapsed() > WAIT {
                    return Err(format!("the output was not taken in {WAIT:?}"));
                }
                sleep(Duration::from_millis(1));
            },
            Offer::Verbs(h) => h.join().map_err(|_| "the listener panicked".to_string())?,
            Offer::Nothing => Ok(()),
        }
    }
}

/// Runs `b`; what failed unless every operation did not.
fn run_all(ring: &mut Ring, b: Batch<'_>) -> Result<(), String> {
    for c in ring.run(b).map_err(|e| e.to_string())? {
        c.map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn krcore(call: &Call, st: &mut Stages) -> Result<Offer, String> {
    let e = |e: krcore_uring::Error| e.to_string();
    let (k, len) = (call.k, call.len as usize);
    let dev = st.time("open", || Device::open().map_err(e))?;
    let mut ring = st.time("ring", || Builder::new(16).build(dev).map_err(e))?;
    // The output, then its `taken` word, then the word this function WRITEs.
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let mut mr = st.time("REG_MR", || ring.register(len + 16, access).map_err(e))?;
    if k > 0 {
        let prev = call.route[k as usize - 1];
        // No endpoint: the hand-off is one-sided.
        let v = st.time("CONNECT", || ring.connect(gid_of(prev), 0).map_err(e))?;
        let input = st.time("IMPORT_NAME", || {
            ring.import_name(&v, &name(call.run, k - 1), len as u32 + 16)
                .map_err(e)
        })?;
        st.time("READ", || {
            let mut b = Batch::new();
            b.read(&v, &mr, 0, &input, 0, len as u32).map_err(e)?;
            run_all(&mut ring, b)
        })?;
        st.time("check", || check(&mr.bytes()[..len], call.run, k - 1))?;
        mr.bytes_mut()[len + 8..].copy_from_slice(&1u64.to_le_bytes());
        st.time("WRITE taken", || {
            let mut b = Batch::new();
            b.write(&v, &mr, len as u64 + 8, &input, len as u64, 8)
                .map_err(e)?;
            run_all(&mut ring, b)
        })?;
        st.time("DISCONNECT", || ring.disconnect(v).map_err(e))?;
    }
    if k as usize == call.route.len() - 1 {
        return Ok(Offer::Nothing);
    }
    st.time("fill", || {
        fill(&mut mr.bytes_mut()[..len], call.run, k);
        Ok::<_, String>(())
    })?;
    st.time("PUBLISH", || {
        ring.publish(&mr, &name(call.run, k)).map_err(e)
    })?;
    Ok(Offer::Krcore(Box::new(ring), mr, len))
}

fn verbs(call: &Call, st: &mut Stages) -> Result<Offer, String> {
    let e = |e: verify::verbs::VerbsError| e.to_string();
    let (k, len) = (call.k, call.len as usize);
    if k > 0 {
        let prev = call.route[k as usize - 1];
        let (mut c, s) = Client::connect(prev, port(call.run, k - 1), len).map_err(e)?;
        st.push_cm(&s);
        let input = st.time("READ", || c.read(&[(0, len as u32)]).map_err(e))?;
        st.time("check", || check(&input, call.run, k - 1))?;
        // The previous function's listener sees the connection go: its output was taken.
        st.time("disconnect", || {
            drop(c);
            Ok::<_, String>(())
        })?;
    }
    if k as usize == call.route.len() - 1 {
        return Ok(Offer::Nothing);
    }
    let mut out = vec![0u8; len];
    st.time("fill", || {
        fill(&mut out, call.run, k);
        Ok::<_, String>(())
    })?;
    let l = st.time("listen", || Listener::bind(port(call.run, k)).map_err(e))?;
    let secs = WAIT.as_secs();
    Ok(Offer::Verbs(std::thread::spawn(move || {
        l.serve(&mut out, 1, secs, verify::cm_verbs::Recvs::Drop(0))
            .map_err(|e| e.to_string())
    })))
}

/// `krcore-figures function CALL LAUNCH_NS`: one function of a chain, its request having
/// arrived at its node's daemon at `launch_ns`.
pub fn function(call: Call, launch_ns: u64) -> Result<(), String> {
    let mut st = Stages::new(launch_ns);
    let offer = match call.system {
        System::Krcore => krcore(&call, &mut st)?,
        System::Verbs => verbs(&call, &mut st)?,
    };
    let mut trail = call.trail.clone();
    trail.push(Account {
        k: call.k,
        total_us: mono_ns().saturating_sub(launch_ns) as f64 / 1e3,
        stages: std::mem::take(&mut st.list),
    });
    let next = call.k as usize + 1;
    if next < call.route.len() {
        let call = Call {
            k: next as u32,
            trail,
            ..call.clone()
        };
        send(call.route[next], &Msg::Run(call))?;
    } else {
        send(
            call.coordinator,
            &Msg::Done {
                run: call.run,
                trail,
            },
        )?;
    }
    offer.wait_taken()
}

/// Runs chain `run` and waits for its end: its time end to end and its accounts.
fn chain(
    system: System,
    run: u32,
    len: u32,
    route: &[Ipv4Addr],
    ends: &Receiver<Msg>,
) -> (Duration, Vec<Account>) {
    let call = Call {
        system,
        run,
        k: 0,
        len,
        route: route.to_vec(),
        coordinator: route[0],
        trail: Vec::new(),
    };
    let t = Instant::now();
    send(route[0], &Msg::Run(call)).unwrap_or_else(|e| panic!("starting chain {run}: {e}"));
    loop {
        match ends.recv_timeout(WAIT) {
            Ok(Msg::Done { run: r, trail }) if r == run => return (t.elapsed(), trail),
            Ok(Msg::Failed { run: r, k, why }) if r == run => {
                panic!(
                    "{} chain {run} ({len} B): function {k} failed: {why}",
                    system.name()
                )
            }
            Ok(other) => eprintln!("[figures] ignored, not of chain {run}: {other:?}"),
            Err(RecvTimeoutError::Timeout) => {
                panic!(
                    "{} chain {run} ({len} B) did not end in {WAIT:?}",
                    system.name()
                )
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the node daemon ended"),
        }
    }
}

/// The hand-off figures over `nodes` (this node first; it coordinates and its daemon
/// sends chain ends to `ends`): per size and system, the time per hand-off end to end,
/// each function's time on its node, and its stages.
pub fn figures(nodes: &[Ipv4Addr], ends: &Receiver<Msg>, out: &mut Vec<Record>) {
    let route: Vec<Ipv4Addr> = (0..=HOPS).map(|i| nodes[i % nodes.len()]).collect();
    let mut run = 0;
    // Untimed: the execs cached, every connection set made.
    for system in System::ALL {
        run += 1;
        chain(system, run, SIZES[0], &route, ends);
    }
    let us = |v: f64| Duration::from_nanos((v * 1e3) as u64);
    for len in SIZES {
        let mut ends_to_ends = [Vec::new(), Vec::new()];
        let mut accounts = [Vec::new(), Vec::new()];
        for _ in 0..CHAINS {
            for (i, system) in System::ALL.into_iter().enumerate() {
                run += 1;
                let (t, trail) = chain(system, run, len, &route, ends);
                ends_to_ends[i].push(t);
                accounts[i].extend(trail.into_iter().filter(|a| a.k > 0));
            }
        }
        for (i, system) in System::ALL.into_iter().enumerate() {
            let s = system.name();
            let e2e = std::mem::take(&mut ends_to_ends[i]);
            out.push(Record::times("across-handoff", s, len, e2e, HOPS as u32));
            let funcs = &accounts[i];
            out.push(Record::times(
                "across-handoff-function",
                s,
                len,
                funcs.iter().map(|a| us(a.total_us)).collect(),
                1,
            ));
            // Each stage's times, in the order a function goes through them.
            let mut names: Vec<&str> = Vec::new();
            for (n, _) in funcs.iter().flat_map(|a| &a.stages) {
                if !names.contains(&n.as_str()) {
                    names.push(n);
                }
            }
            for n in names {
                let times = funcs
                    .iter()
                    .flat_map(|a| &a.stages)
                    .filter(|(m, _)| m == n)
                    .map(|&(_, v)| us(v))
                    .collect();
                out.push(Record::times(
                    &format!("across-handoff-stages-{s}"),
                    n,
                    len,
                    times,
                    1,
                ));
            }
        }
        eprintln!("[figures] hand-off of {len} B: {CHAINS} chains of {HOPS} per system");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_checks_only_as_itself() {
        let mut buf = vec![0u8; 4096];
        fill(&mut buf, 3, 2);
        assert_eq!(check(&buf, 3, 2), Ok(()));
        assert!(check(&buf, 3, 1).is_err(), "another function's output");
        assert!(check(&buf, 4, 2).is_err(), "another chain's output");
        buf[1000] ^= 1;
        let e = check(&buf, 3, 2).unwrap_err();
        assert!(e.contains("byte 1000 of 4096"), "{e}");
    }

    #[test]
    fn ports_of_overlapping_functions_differ() {
        // A chain's functions live at once, and the next chains' may start before the
        // last ones closed: none of them shares a port.
        let mut seen = std::collections::HashSet::new();
        for run in 10..18 {
            for k in 0..HOPS as u32 {
                assert!(
                    seen.insert(port(run, k)),
                    "port of chain {run}, function {k}"
                );
            }
        }
    }
}
