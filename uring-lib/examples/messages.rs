//! Two-sided messages across nodes: two services between a pair of nodes, each
//! receiving only its own messages, over two rings that share the nodes' set.
//!
//! Each side's CONNECTs pair (they name their port and the peer's, the same: see
//! `Ring::pair`), so neither listens.
//!
//! `messages recv ADDR N`: one ring CONNECTs to the node at ADDR for services 7 and 8
//! (a second CONNECT pairing 7 must fail `ServiceTaken`: the four-tuple is in use) and posts N receives of 256 bytes
//! on each; another ring CONNECTs for service 9 and SENDs "ready" there (retried while
//! the peer has no receive yet). Each of the 2N receives must get its own service's
//! message, in order, with its immediate. Then 4 receives are posted on service 8 and
//! it DISCONNECTs: they must come back `Cancelled` once the peer's kernel confirmed it
//! will write none of them. Last, "ack" goes to the peer on service 9.
//!
//! `messages send ADDR N`: CONNECTs for 7, 8 (one ring) and 9 (another), waits for
//! "ready" on 9, checks that a message longer than the peer's receive fails `TooLong`
//! (the receive stays for the next), SENDs N messages on each of 7 and 8, interleaved
//! ("s7-i" with immediate 7000+i, "s8-i" with 8000+i), then waits for "ack" on 9.
//!
//! With a MetaServer (a last argument `imm`), WRITE_IMM too: after the messages, the
//! receiving side publishes 64 KiB as "msgbuf-ADDR" (its own address), posts N more
//! receives on 7 and says "imm" on 9; the sending side imports the name through its
//! virtual QP on 7 and WRITE_IMMs N pieces into it (immediate 9000+i): each consumes a
//! receive, which completes with the length and immediate, and the bytes land in the
//! published memory, where the receiving side checks them.
//!
//! `messages vanish ADDR`: CONNECTs for service 7, posts one receive, prints "a receive
//! is posted" and waits up to 30 s: the peer's module is unloaded meanwhile
//! (cluster-smoke.sh's `vanish` role), and the receive must end `PeerGone` (nothing
//! else is in flight, so no request's deadline could end it).
#[path = "support/retry.rs"]
mod support;
#[path = "support/talk.rs"]
mod talk;
use std::net::Ipv4Addr;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::retry;
use talk::{hear, say, SLOT};

use krcore_abi::cqe::{CqeFlags, Reason};
use krcore_abi::opcode::Opcode;
use krcore_abi::sqe::MrAccess;
use krcore_abi::sqe::Sqe;
use krcore_uring::{Batch, Builder, Device, MemoryRegion, Ring, Vqp};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const RETRACTED: u64 = 4;

fn new_ring() -> Result<Ring> {
    Ok(Builder::new(256).cq_entries(1024).build(Device::open()?)?)
}

/// A CONNECT that pairs port `service` with the peer's port `service` (both sides name
/// the same: neither listens).
fn connect(ring: &mut Ring, gid: [u8; 16], service: u32) -> Result<Vqp> {
    Ok(retry(60, &[Reason::Unreachable], || {
        ring.pair(gid, service as u16, service as u16)
    })?)
}

fn message(service: u32, i: u64) -> String {
    format!("s{service}-{i}")
}

/// The i-th piece WRITE_IMM puts into the published memory, at `i * SLOT`.
fn piece(i: u64) -> String {
    format!("w-{i}")
}

/// The name the receiving node at `addr` publishes its WRITE_IMM target under.
fn msgbuf_name(addr: Ipv4Addr) -> String {
    format!("msgbuf-{addr}")
}

fn recv_side(gid: [u8; 16], n: u64, imm: Option<String>) -> Result<()> {
    let (posted, go) = mpsc::channel();
    let with_imm = imm.is_some();
    std::thread::scope(|s| {
        let receiver = s.spawn(move || -> Result<()> {
            let mut ring = new_ring()?;
            let v7 = connect(&mut ring, gid, 7)?;
            let v8 = connect(&mut ring, gid, 8)?;
            match ring.pair(gid, 7, 7) {
                Err(e) if e.reason() == Some(Reason::ServiceTaken) => {
                    println!("a second CONNECT pairing port 7: refused, ServiceTaken")
                }
                r => return Err(format!("a second CONNECT pairing port 7: {r:?}").into()),
            }
            let mut mr = ring.register(
                (2 * n + RETRACTED) as usize * SLOT as usize,
                MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE,
            )?;
            posted.send(()).ok();
            let mut b = Batch::new();
            for i in 0..n {
                b.recv(&v7, &mr, i * SLOT, SLOT as u32)?;
                b.recv(&v8, &mr, (n + i) * SLOT, SLOT as u32)?;
            }
            let got = ring.run(b)?;
            let bytes = mr.bytes().to_vec();
            for (k, c) in got.into_iter().enumerate() {
                let (i, service, at) = match k % 2 {
                    0 => (k as u64 / 2, 7, k as u64 / 2),
                    _ => (k as u64 / 2, 8, n + k as u64 / 2),
                };
                let c = c?;
                let want = message(service, i);
                let at = (at * SLOT) as usize;
                let text = &bytes[at..at + c.res.max(0) as usize];
                if text != want.as_bytes()
                    || c.aux != (service * 1000) as u64 + i
                    || c.flags & CqeFlags::IMM.bits() == 0
                {
                    return Err(format!(
                        "service {service} receive {i}: {:?} imm {} (flags {:#x}), not {want:?} imm {}",
                        String::from_utf8_lossy(text),
                        c.aux,
                        c.flags,
                        service * 1000 + i as u32
                    )
                    .into());
                }
            }
            println!("services 7 and 8: {n} messages each, each in its own service's receives, in order, bytes and immediates checked");
            if let Some(name) = &imm {
                writes_imm(&mut ring, &v7, &mut mr, n, name, &posted)?;
            }
            retract(&mut ring, v8, &mut mr, n)?;
            ring.disconnect(v7)?;
            ring.deregister(mr)?;
            Ok(())
        });
        let mut ring = new_ring()?;
        let v9 = connect(&mut ring, gid, 9)?;
        let mut mr = ring.register(SLOT as usize, MrAccess::LOCAL_WRITE)?;
        go.recv_timeout(Duration::from_secs(90))?;
        say(&mut ring, &v9, &mut mr, "ready", 1)?;
        if with_imm {
            // Its receives for the WRITE_IMMs are posted, its memory published.
            go.recv_timeout(Duration::from_secs(90))?;
            say(&mut ring, &v9, &mut mr, "imm", 3)?;
        }
        receiver.join().map_err(|_| "receiver panicked")??;
        say(&mut ring, &v9, &mut mr, "ack", 2)?;
        ring.disconnect(v9)?;
        Ok(())
    })
}

/// Publishes 64 KiB as `name`, posts `n` receives on `v7` (after `posted` tells the
/// other thread, which says "imm" to the peer), and checks what the peer's WRITE_IMMs
/// did: each receive completes with its piece's length and immediate, and the pieces
/// are in the published memory, not in the receives.
fn writes_imm(
    ring: &mut Ring,
    v7: &Vqp,
    mr: &mut MemoryRegion,
    n: u64,
    name: &str,
    posted: &mpsc::Sender<()>,
) -> Result<()> {
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE;
    let mut target = ring.register(64 << 10, all)?;
    retry(60, &[Reason::Unreachable], || ring.publish(&target, name))?;
    posted.send(()).ok();
    let mut b = Batch::new();
    for i in 0..n {
        b.recv(v7, mr, i * SLOT, SLOT as u32)?;
    }
    let got = ring.run(b)?;
    let bytes = target.bytes().to_vec();
    for (i, c) in got.into_iter().enumerate() {
        let c = c?;
        let want = piece(i as u64);
        let at = i * SLOT as usize;
        if c.res as usize != want.len()
            || c.aux != 9000 + i as u64
            || &bytes[at..at + want.len()] != want.as_bytes()
        {
            return Err(format!(
                "WRITE_IMM {i}: receive res {} imm {}, memory {:?}; not {} bytes, imm {}, {want:?}",
                c.res,
                c.aux,
                String::from_utf8_lossy(&bytes[at..at + want.len()]),
                want.len(),
                9000 + i
            )
            .into());
        }
    }
    println!("WRITE_IMM across nodes: {n} pieces in the published memory, each receive completed with its length and immediate");
    ring.deregister(target)?;
    Ok(())
}

/// Posts receives on `v8` and DISCONNECTs it: each comes back `Cancelled` (after the
/// peer's kernel confirmed), then the DISCONNECT completes.
fn retract(ring: &mut Ring, v8: Vqp, mr: &mut MemoryRegion, n: u64) -> Result<()> {
    let t = Instant::now();
    let mut b = Batch::new();
    for i in 0..RETRACTED {
        b.recv(&v8, mr, (2 * n + i) * SLOT, SLOT as u32)?;
    }
    // The receives and the DISCONNECT in one submission: the receives are advertised
    // first, then the DISCONNECT waits for the peer's answer.
    b.disconnect(v8);
    let mut outcomes = ring.run(b)?;
    let disconnect = outcomes.pop().expect("the DISCONNECT's");
    disconnect.map_err(|e| format!("DISCONNECT: {e}"))?;
    let cancelled = outcomes
        .iter()
        .filter(|r| matches!(r, Err(e) if e.reason() == Some(Reason::Cancelled)))
        .count();
    if cancelled as u64 != RETRACTED {
        return Err(format!(
            "receives left at DISCONNECT: {outcomes:?}, not {RETRACTED} Cancelled"
        )
        .into());
    }
    println!(
        "DISCONNECT with {RETRACTED} receives advertised: each Cancelled once the peer answered, in {} us",
        t.elapsed().as_micros()
    );
    Ok(())
}

fn send_side(gid: [u8; 16], n: u64, msgbuf: Option<String>) -> Result<()> {
    let mut ring = new_ring()?;
    let mut side = new_ring()?;
    let v7 = connect(&mut ring, gid, 7)?;
    let v8 = connect(&mut ring, gid, 8)?;
    let v9 = connect(&mut side, gid, 9)?;
    let mut small = side.register(SLOT as usize, MrAccess::LOCAL_WRITE)?;
    let (text, imm) = hear(&mut side, &v9, &mut small)?;
    if (text.as_str(), imm) != ("ready", 1) {
        return Err(format!("on service 9: {text:?} imm {imm}, not \"ready\" imm 1").into());
    }
    let mut mr = ring.register((2 * n as usize + 2) * SLOT as usize, MrAccess::LOCAL_WRITE)?;
    let mut b = Batch::new();
    b.send(&v7, &mr, 0, SLOT as u32 + 44, None)?;
    match ring.run(b)?.remove(0) {
        Err(e) if e.reason() == Some(Reason::TooLong) => {
            println!("a message longer than the peer's receive: TooLong (the receive stays)")
        }
        r => return Err(format!("an over-long message: {r:?}, not TooLong").into()),
    }
    for i in 0..n {
        for (k, service) in [(i, 7), (n + i, 8)] {
            let m = message(service, i);
            let at = (k * SLOT) as usize;
            mr.bytes_mut()[at..at + m.len()].copy_from_slice(m.as_bytes());
        }
    }
    let t = Instant::now();
    let mut b = Batch::new();
    for i in 0..n {
        for (k, v, service) in [(i, &v7, 7u32), (n + i, &v8, 8)] {
            let len = message(service, i).len() as u32;
            b.send(v, &mr, k * SLOT, len, Some(service * 1000 + i as u32))?;
        }
    }
    for (k, c) in ring.run(b)?.into_iter().enumerate() {
        c.map_err(|e| format!("send {k}: {e}"))?;
    }
    println!(
        "{} messages to 2 services across nodes in {} us",
        2 * n,
        t.elapsed().as_micros()
    );
    if let Some(name) = &msgbuf {
        let (text, _) = hear(&mut side, &v9, &mut small)?;
        if text != "imm" {
            return Err(format!("on service 9: {text:?}, not \"imm\"").into());
        }
        let remote = retry(60, &[Reason::NoSuchName, Reason::Unreachable], || {
            ring.import_name(&v7, name, 64 << 10)
        })?;
        for i in 0..n {
            let p = piece(i);
            let at = (i * SLOT) as usize;
            mr.bytes_mut()[at..at + p.len()].copy_from_slice(p.as_bytes());
        }
        let mut b = Batch::new();
        for i in 0..n {
            let len = piece(i).len() as u32;
            b.write_imm(&v7, &mr, i * SLOT, &remote, i * SLOT, len, 9000 + i as u32)?;
        }
        for (k, c) in ring.run(b)?.into_iter().enumerate() {
            c.map_err(|e| format!("WRITE_IMM {k}: {e}"))?;
        }
        println!("{n} WRITE_IMMs into {name} across nodes");
    }
    let (text, imm) = hear(&mut side, &v9, &mut small)?;
    if (text.as_str(), imm) != ("ack", 2) {
        return Err(format!("on service 9: {text:?} imm {imm}, not \"ack\" imm 2").into());
    }
    println!("the peer's ack arrived: every message was received where it belonged");
    ring.disconnect(v7)?;
    ring.disconnect(v8)?;
    side.disconnect(v9)?;
    Ok(())
}

fn vanish(gid: [u8; 16]) -> Result<()> {
    let mut ring = new_ring()?;
    let v7 = connect(&mut ring, gid, 7)?;
    let mr = ring.register(SLOT as usize, MrAccess::LOCAL_WRITE)?;
    let recv = Sqe::two_sided(
        Opcode::Recv,
        1,
        v7.handle(),
        mr.handle(),
        mr.addr(),
        SLOT as u32,
    );
    // SAFETY: `mr` stays registered, and is not touched, until the receive ends.
    unsafe { ring.submission().push(&recv) }.map_err(|_| "the SQ is full")?;
    ring.submit()?;
    println!("a receive is posted");
    let t = Instant::now();
    ring.submit_and_wait_timeout(1, Duration::from_secs(30))
        .map_err(|e| format!("the receive did not end in 30 s: {e}"))?;
    let c = ring.completions().next().ok_or("no completion")?;
    match c.failure() {
        Some(Reason::PeerGone) => {
            let why = krcore_uring::describe_failure(&c).unwrap_or_default();
            println!(
                "the receive ended PeerGone after {} ms: {why}",
                t.elapsed().as_millis()
            );
            Ok(())
        }
        r => Err(format!("the receive ended {r:?} (res {}), not PeerGone", c.res).into()),
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: messages recv|send ADDR N [imm] | messages vanish ADDR";
    if let [v, a] = &args[1..] {
        if v == "vanish" {
            return vanish(a.parse::<Ipv4Addr>()?.to_ipv6_mapped().octets());
        }
    }
    let (role, addr, n, with_imm) = match &args[1..] {
        [r, a, n] => (r.as_str(), a.parse::<Ipv4Addr>()?, n.parse::<u64>()?, false),
        [r, a, n, i] if i == "imm" => (r.as_str(), a.parse::<Ipv4Addr>()?, n.parse::<u64>()?, true),
        _ => return Err(usage.into()),
    };
    let gid = addr.to_ipv6_mapped().octets();
    match role {
        // The receiving side names its memory by its own address: ADDR is the peer's.
        "recv" => {
            let own = own_ipv4()?;
            recv_side(gid, n, with_imm.then(|| msgbuf_name(own)))
        }
        "send" => send_side(gid, n, with_imm.then(|| msgbuf_name(addr))),
        _ => Err(usage.into()),
    }
}

/// This node's IPv4 address, from its device's GIDs.
fn own_ipv4() -> Result<Ipv4Addr> {
    let rows = Device::open()?.query_devices()?.rows;
    Ok(rows.iter().find_map(|r| r.ipv4()).ok_or("no IPv4 GID")?)
}
