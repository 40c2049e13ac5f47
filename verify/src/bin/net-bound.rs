//! `net-bound ADDR`: a user's bounded enter stays bounded while other users' network work
//! waits on a node that never answers (ADDR: it answers ARP, never the CM; the module is
//! loaded with it as the MetaServer).
//!
//! Two other rings leave network work that cannot finish for seconds: a PUBLISH (the
//! MetaServer at ADDR) and a CONNECT to ADDR, each on its own thread. Then this user's
//! NOPs, each in an enter bounded at 100 ms, and a CONNECT to ADDR bounded the same,
//! must each return within the bound (plus `SLACK_MS` for emulation): the NOP done, the
//! CONNECT done or timed out (`ETIME`), never waiting for another user's dial. Exits 1
//! otherwise.
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use krcore_abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device, Ring};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The bound each enter is given.
const BOUND: Duration = Duration::from_millis(100);
/// What emulation (TCG) may add to it: scheduling, not network work (a dial waits 10 s).
const SLACK_MS: u128 = 900;

fn ring() -> Result<Ring> {
    Ok(Builder::new(16).build(Device::open()?)?)
}

/// Pushes `sqe`, enters bounded at [`BOUND`], and says how long the enter took and how
/// it ended.
fn bounded(r: &mut Ring, sqe: Sqe, what: &str) -> Result<u128> {
    // SAFETY: a NOP or a CONNECT names no memory.
    unsafe { r.push(&sqe) }.map_err(|_| "the SQ is full")?;
    let t = Instant::now();
    let got = r.submit_and_wait_timeout(1, BOUND);
    let ms = t.elapsed().as_millis();
    let how = match &got {
        Ok(_) => "done".to_string(),
        Err(e) => format!("{e}"),
    };
    println!("net-bound: {what}: the enter returned in {ms} ms ({how})");
    r.completions().for_each(drop);
    Ok(ms)
}

fn main() -> Result<()> {
    let addr: Ipv4Addr = std::env::args().nth(1).ok_or("usage: net-bound ADDR")?.parse()?;
    let gid = addr.to_ipv6_mapped().octets();
    // Other users' network work: a PUBLISH waiting for the MetaServer, a first contact.
    let publisher = std::thread::spawn(|| -> Result<()> {
        let mut r = ring()?;
        let mr = r.register(4096, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ)?;
        let t = Instant::now();
        let got = r.publish(&mr, "net-bound");
        println!("net-bound: the other user's PUBLISH ended after {:?}: {got:?}", t.elapsed());
        Ok(())
    });
    let dialer = std::thread::spawn(move || -> Result<()> {
        let mut r = ring()?;
        let t = Instant::now();
        let got = r.connect(gid, 9);
        println!("net-bound: the other user's CONNECT ended after {:?}: {:?}", t.elapsed(), got.err());
        Ok(())
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut r = ring()?;
    let mut worst = 0;
    for i in 0..5 {
        worst = worst.max(bounded(&mut r, Sqe::nop(i), "a NOP")?);
    }
    worst = worst.max(bounded(&mut r, Sqe::connect(9, gid, 10), "a CONNECT to the silent node")?);
    let limit = BOUND.as_millis() + SLACK_MS;
    if worst > limit {
        return Err(format!("an enter bounded at {} ms took {worst} ms", BOUND.as_millis()).into());
    }
    println!("net-bound: every bounded enter returned within {limit} ms (the longest {worst} ms)");
    for t in [publisher, dialer] {
        t.join().map_err(|_| "a thread panicked")??;
    }
    Ok(())
}
