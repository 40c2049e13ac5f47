//! RPC echo across nodes: one krcore LISTEN on the far node serves every client process
//! of the measuring node, each on its own accepted virtual QP; beside it, user-space
//! verbs with one rdma_cm connection per client process to a verbs echo server on the
//! far node ([`serve`] runs both there).
//!
//! Each client process (`krcore-figures worker echo@FAR N` or `echo-cm@FAR N`, run by
//! [`crate::control::round`]) times its connection setup (krcore: CONNECT to the
//! service; verbs: the whole rdma_cm connect, device open included), makes one untimed
//! round trip, and once every process is set up sends its N requests one at a time.
//! Each echo is checked at its sender: it carries the sender's process id and the
//! request's number, so a reply that reached the wrong client fails the run.

use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use krcore_benches::record::Record;
use krcore_uring::abi::cqe::{Cqe, CqeFlags, Reason};
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device, MemoryRegion, Ring, Vqp};
use verify::cm_verbs::{Client, Recvs};

use crate::control::{record, round, say_and_wait};
use crate::far::retry;
use crate::paths::{gid_of, leak, run};

/// The service the far node's krcore echo listener listens on.
const ECHO_SERVICE: u32 = 40;
/// The rdma_cm port of the far node's verbs echo server.
const ECHO_CM_PORT: u16 = 7475;
/// Client processes per figure.
const PROCS: [u32; 3] = [1, 8, 64];
/// Bytes of a request, and of its echo.
const LEN: u32 = 32;
/// Receives each server keeps posted per client.
const RECVS: u32 = 2;
/// How long a client waits for an echo before the run fails.
const TRIP_BOUND: Duration = Duration::from_secs(20);
/// The krcore listener's receive slots (64 B each), all clients together.
const SLOTS: usize = 1024;

/// Requests per client process: 1,600 per figure, at least 25 each.
fn requests(procs: u32) -> usize {
    (1600 / procs as usize).clamp(25, 800)
}

/// The far node's echo servers, until the process ends (at most `secs` for the verbs
/// one): krcore's listener and the verbs server, a thread each.
pub fn serve(secs: u64) {
    std::thread::spawn(listener);
    std::thread::spawn(move || {
        let mem = leak(vec![0u8; 64]).as_ptr() as *mut u8;
        // SAFETY: leaked, so it lives as long as the server; nothing else touches it.
        let mem = unsafe { std::slice::from_raw_parts_mut(mem, 64) };
        verify::cm_verbs::serve(ECHO_CM_PORT, mem, usize::MAX, secs, Recvs::Echo(RECVS))
            .expect("the verbs echo server");
    });
}

/// A listener completion's `user_data`.
const LISTEN_TAG: u64 = 1 << 60;
/// A SEND's `user_data`: its slot with this bit (a receive's is its slot alone).
const SEND_TAG: u64 = 1 << 62;
/// A DISCONNECT's `user_data`.
const GONE_TAG: u64 = 1 << 61;

/// Pushes `sqe`, entering first while the SQ is full.
fn push(ring: &mut Ring, sqe: &Sqe) {
    // SAFETY: every entry names a registered buffer that outlives it (the listener's is
    // leaked; a client waits for its own), or none.
    while unsafe { ring.submission().push(sqe) }.is_err() {
        ring.submit().expect("enter");
    }
}

/// krcore's echo server: one LISTEN; each accepted virtual QP gets [`RECVS`] receives,
/// each request is sent back from its own slot, whose receive is posted again once the
/// echo completed. A client that left (its receives fail) is disconnected.
fn listener() {
    let mut ring = Builder::new(256)
        .cq_entries(1024)
        .build(Device::open().expect("open /dev/krcore"))
        .expect("ring");
    let buf = leak(vec![0u64; SLOTS * 64 / 8]);
    let base = buf.as_ptr() as u64;
    let c = run(
        &mut ring,
        Sqe::reg_mr(0, base, (SLOTS * 64) as u32, MrAccess::LOCAL_WRITE),
    );
    assert!(c.res >= 0, "the echo buffer: {c:?}");
    let mr = c.res as u32;
    let at = |s: usize| base + s as u64 * 64;
    let recv = |s: usize, v: u32| Sqe::two_sided(Opcode::Recv, s as u64, v, mr, at(s), 64);
    // Whose each slot is, and the slots free.
    let mut owner: Vec<Option<u32>> = vec![None; SLOTS];
    let mut free: Vec<usize> = (0..SLOTS).rev().collect();
    let mut open = std::collections::HashSet::new();
    push(&mut ring, &Sqe::listen(LISTEN_TAG, ECHO_SERVICE));
    let mut accepted = 0u64;
    loop {
        ring.submit_and_wait(1).expect("the echo listener's enter");
        let done: Vec<Cqe> = ring.completions().collect();
        for c in done {
            let tag = c.user_data;
            if tag == LISTEN_TAG {
                if c.flags & CqeFlags::ACCEPT.bits() == 0 {
                    assert!(
                        c.res >= 0,
                        "LISTEN: {:?}",
                        krcore_uring::describe_failure(&c)
                    );
                    eprintln!("[far] echo: listening on service {ECHO_SERVICE}");
                    continue;
                }
                assert!(
                    c.res >= 0,
                    "accept: {:?}",
                    krcore_uring::describe_failure(&c)
                );
                let v = c.res as u32;
                open.insert(v);
                accepted += 1;
                if accepted.is_power_of_two() {
                    eprintln!("[far] echo: {accepted} clients accepted");
                }
                for _ in 0..RECVS {
                    let s = free.pop().expect("a free echo slot");
                    owner[s] = Some(v);
                    push(&mut ring, &recv(s, v));
                }
            } else if tag & GONE_TAG != 0 {
                // A client's virtual QP let go: nothing more to do.
            } else {
                let s = (tag & !SEND_TAG) as usize;
                let Some(v) = owner[s] else { continue };
                if c.res < 0 {
                    // The client left: its slots go, and so does its virtual QP.
                    owner[s] = None;
                    free.push(s);
                    if open.remove(&v) {
                        push(&mut ring, &Sqe::disconnect(GONE_TAG | v as u64, v));
                    }
                } else if tag & SEND_TAG != 0 {
                    push(&mut ring, &recv(s, v));
                } else {
                    let send = Sqe::two_sided(
                        Opcode::Send,
                        SEND_TAG | s as u64,
                        v,
                        mr,
                        at(s),
                        c.res as u32,
                    );
                    push(&mut ring, &send);
                }
            }
        }
    }
}

/// How a client connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// krcore: a CONNECT to the listener's service.
    Krcore,
    /// Verbs: an rdma_cm connection of its own.
    Verbs,
}

/// A client's connection: one round trip at a time.
enum Conn {
    Krcore {
        ring: Ring,
        vqp: Vqp,
        mr: MemoryRegion,
    },
    Verbs(Client),
}

impl Conn {
    fn open(kind: Kind, far: Ipv4Addr) -> (Conn, Duration) {
        match kind {
            Kind::Krcore => {
                let mut ring = Builder::new(8)
                    .build(Device::open().expect("open /dev/krcore"))
                    .expect("ring");
                let mr = ring
                    .register(2 * LEN as usize, MrAccess::LOCAL_WRITE)
                    .expect("REG_MR");
                let t = Instant::now();
                let vqp = retry(30, &[Reason::Unreachable], || {
                    ring.connect(gid_of(far), ECHO_SERVICE)
                })
                .expect("CONNECT to the echo service");
                (Conn::Krcore { ring, vqp, mr }, t.elapsed())
            }
            Kind::Verbs => {
                let t = Instant::now();
                let (c, _) = Client::connect(far, ECHO_CM_PORT, 2 * LEN as usize)
                    .expect("rdma_cm connect to the echo server");
                (Conn::Verbs(c), t.elapsed())
            }
        }
    }

    /// Sends `req` and waits for its echo, which must be `req`.
    fn trip(&mut self, req: &[u8; LEN as usize]) {
        let n = LEN as usize;
        let got = match self {
            Conn::Krcore { ring, vqp, mr } => {
                mr.bytes_mut()[..n].copy_from_slice(req);
                let (v, m, at) = (vqp.handle(), mr.handle(), mr.addr());
                push(
                    ring,
                    &Sqe::two_sided(Opcode::Recv, 1, v, m, at + LEN as u64, LEN),
                );
                push(ring, &Sqe::two_sided(Opcode::Send, 2, v, m, at, LEN));
                // A bounded wait: an echo that never comes fails the run, saying so.
                let until = Instant::now() + TRIP_BOUND;
                let mut done = 0;
                while done < 2 {
                    let left = until.saturating_duration_since(Instant::now());
                    assert!(
                        !left.is_zero(),
                        "no echo within {TRIP_BOUND:?} ({done} of 2 completions)"
                    );
                    let _ = ring.submit_and_wait_timeout(1, left);
                    for c in ring.completions() {
                        assert!(
                            c.res >= 0,
                            "the round trip: {:?}",
                            krcore_uring::describe_failure(&c)
                        );
                        done += 1;
                    }
                }
                mr.bytes()[n..2 * n].to_vec()
            }
            Conn::Verbs(c) => {
                c.bytes()[..n].copy_from_slice(req);
                c.post_recv(1, LEN as u64, LEN).expect("ibv_post_recv");
                c.post_send(2, 0, LEN).expect("ibv_post_send");
                let mut done = 0;
                while done < 2 {
                    done += c.poll(2 - done).expect("the round trip");
                }
                c.bytes()[n..2 * n].to_vec()
            }
        };
        assert_eq!(got, req, "an echo that is not this client's request");
    }

    /// Disconnects (krcore; verbs disconnects as the client drops).
    fn close(self) {
        if let Conn::Krcore { mut ring, vqp, .. } = self {
            ring.disconnect(vqp).expect("DISCONNECT");
        }
    }
}

/// `krcore-figures worker echo@FAR N` (or `echo-cm@FAR`): says `ready`, waits for `go`,
/// connects and says `set NS` (its setup), waits for `go`, makes N round trips and says
/// `lat NS ..`.
pub fn worker(kind: Kind, far: Ipv4Addr, n: usize) {
    say_and_wait("ready");
    let (mut conn, setup) = Conn::open(kind, far);
    let me = std::process::id() as u64;
    let request = |i: u64| -> [u8; LEN as usize] {
        let mut r = [0xa5u8; LEN as usize];
        r[..8].copy_from_slice(&me.to_le_bytes());
        r[8..16].copy_from_slice(&i.to_le_bytes());
        r
    };
    // The first round trip, untimed: the server's receives are posted by then.
    conn.trip(&request(u64::MAX));
    say_and_wait(&format!("set {}", setup.as_nanos()));
    let mut samples = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let t = Instant::now();
        conn.trip(&request(i));
        samples.push(t.elapsed());
    }
    conn.close();
    let ns: Vec<String> = samples.iter().map(|d| d.as_nanos().to_string()).collect();
    println!("lat {}", ns.join(" "));
    std::io::stdout().flush().unwrap();
}

/// Echo from 1, 8 and 64 client processes against the far node's one listener (and
/// its verbs server): requests (`across-echo`) and each client's setup
/// (`across-echo-setup`).
pub fn figures(far: Ipv4Addr, group: &str, out: &mut Vec<Record>) {
    for procs in PROCS {
        for (series, mode) in [("krcore-listen", "echo"), ("verbs-cm", "echo-cm")] {
            let r = round(&format!("{mode}@{far}"), procs, requests(procs));
            let setup: Vec<Duration> = r.setup.clone();
            out.push(Record::times(
                &format!("{group}-setup"),
                series,
                procs,
                setup,
                1,
            ));
            out.push(record(group, series, procs, vec![r]));
        }
    }
}
