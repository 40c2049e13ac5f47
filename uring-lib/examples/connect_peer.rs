//! CONNECT to another node's kernel by its IPv4 address, `N` times (a DISCONNECT after
//! each): the first contact makes this node's connection set to that node
//! (milliseconds), every later CONNECT binds to it (microseconds). Prints both, and
//! checks that every CONNECT landed on the same set's QP.
//!
//! Usage: `connect_peer ADDR [N]` (N defaults to 100).
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: Ipv4Addr = args.next().ok_or("usage: connect_peer ADDR [N]")?.parse()?;
    let n: usize = args.next().map_or(Ok(100), |s| s.parse())?;
    // The node's address as RoCE v2 names it: an IPv4-mapped GID.
    let gid = addr.to_ipv6_mapped().octets();
    let mut ring = krcore_uring::Builder::new(16).build(krcore_uring::Device::open()?)?;
    let mut times = Vec::with_capacity(n);
    let mut qpns = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let v = ring.connect(gid, 0)?;
        times.push(t.elapsed());
        qpns.push(v.qpn());
        ring.disconnect(v)?;
    }
    let first = times[0];
    let mut warm: Vec<Duration> = times[1..].to_vec();
    warm.sort();
    let median = warm.get(warm.len() / 2).copied().unwrap_or_default();
    println!(
        "CONNECT to {addr}: first contact {first:?}, then {} warm: median {median:?}, largest {:?}",
        warm.len(),
        warm.last().copied().unwrap_or_default()
    );
    if qpns.iter().any(|&q| q != qpns[0]) {
        return Err(format!("CONNECTs landed on different QPs: {qpns:?}").into());
    }
    println!("every CONNECT bound to the set's QP {}", qpns[0]);
    Ok(())
}
