//! Two-sided messages across nodes: two services between a pair of nodes, each
//! receiving only its own messages, over two rings that share the nodes' set.
//!
//! `messages recv ADDR N`: one ring CONNECTs to the node at ADDR for services 7 and 8
//! (a second CONNECT for 7 must fail `ServiceTaken`) and posts N receives of 256 bytes
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
#[path = "support/retry.rs"]
mod support;
use std::net::Ipv4Addr;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::retry;

use krcore_abi::cqe::{CqeFlags, Reason};
use krcore_abi::sqe::MrAccess;
use krcore_uring::{Batch, Builder, Device, MemoryRegion, Ring, Vqp};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const SLOT: u64 = 256;
const RETRACTED: u64 = 4;

fn new_ring() -> Result<Ring> {
    Ok(Builder::new(256).cq_entries(1024).build(Device::open()?)?)
}

fn connect(ring: &mut Ring, gid: [u8; 16], service: u32) -> Result<Vqp> {
    Ok(retry(60, &[Reason::Unreachable], || {
        ring.connect(gid, service)
    })?)
}

fn message(service: u32, i: u64) -> String {
    format!("s{service}-{i}")
}

/// SENDs `text` on `vqp` with immediate `imm` (retried while the peer has posted no
/// receive: `NoReceiver` after the deadline).
fn say(ring: &mut Ring, vqp: &Vqp, mr: &mut MemoryRegion, text: &str, imm: u32) -> Result<()> {
    mr.bytes_mut()[..text.len()].copy_from_slice(text.as_bytes());
    retry(60, &[Reason::NoReceiver], || {
        let mut b = Batch::new();
        b.send(vqp, mr, 0, text.len() as u32, Some(imm))?;
        ring.run(b)?.remove(0)
    })?;
    Ok(())
}

/// RECVs one message on `vqp`: its text and immediate.
fn hear(ring: &mut Ring, vqp: &Vqp, mr: &mut MemoryRegion) -> Result<(String, u32)> {
    let mut b = Batch::new();
    b.recv(vqp, mr, 0, SLOT as u32)?;
    let c = ring.run(b)?.remove(0)?;
    let text = String::from_utf8_lossy(&mr.bytes()[..c.res as usize]).into_owned();
    Ok((text, c.aux as u32))
}

fn recv_side(gid: [u8; 16], n: u64) -> Result<()> {
    let (posted, go) = mpsc::channel();
    std::thread::scope(|s| {
        let receiver = s.spawn(move || -> Result<()> {
            let mut ring = new_ring()?;
            let v7 = connect(&mut ring, gid, 7)?;
            let v8 = connect(&mut ring, gid, 8)?;
            match ring.connect(gid, 7) {
                Err(e) if e.reason() == Some(Reason::ServiceTaken) => {
                    println!("a second CONNECT for service 7: refused, ServiceTaken")
                }
                r => return Err(format!("a second CONNECT for service 7: {r:?}").into()),
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
        receiver.join().map_err(|_| "receiver panicked")??;
        say(&mut ring, &v9, &mut mr, "ack", 2)?;
        ring.disconnect(v9)?;
        Ok(())
    })
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

fn send_side(gid: [u8; 16], n: u64) -> Result<()> {
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

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: messages recv|send ADDR N";
    let (role, addr, n) = match &args[1..] {
        [r, a, n] => (r.as_str(), a.parse::<Ipv4Addr>()?, n.parse::<u64>()?),
        _ => return Err(usage.into()),
    };
    let gid = addr.to_ipv6_mapped().octets();
    match role {
        "recv" => recv_side(gid, n),
        "send" => send_side(gid, n),
        _ => Err(usage.into()),
    }
}
