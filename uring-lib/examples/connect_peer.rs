//! CONNECT to another node's kernel by its IPv4 address, `N` times (a DISCONNECT after
//! each): the first contact makes this node's connection set to that node
//! (milliseconds), every later CONNECT binds to it (microseconds). Prints both, and
//! checks that every CONNECT landed on the same set's QP.
//!
//! Usage: `connect_peer ADDR [N [PORT [PROCS]]]` (N defaults to 100; no PORT, or 0: no
//! endpoint). With a PORT, each CONNECT is an endpoint: it pairs this node's PORT with
//! the peer's PORT (a link, the peer's kernel told with a Hello, and with a Leave at the
//! DISCONNECT; nobody pairs back), as a short-lived process's; with PROCS, as many
//! processes cycle at once, process i on PORT + i, and any failure (`TableFull` among
//! them) fails the run.
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: Ipv4Addr = args
        .next()
        .ok_or("usage: connect_peer ADDR [N [SERVICE [PROCS]]]")?
        .parse()?;
    let n: usize = args.next().map_or(Ok(100), |s| s.parse())?;
    let port: u16 = args.next().map_or(Ok(0), |s| s.parse())?;
    if let Some(procs) = args.next() {
        let procs: u16 = procs.parse()?;
        let exe = std::env::current_exe()?;
        let t = Instant::now();
        let kids: Vec<_> = (0..procs)
            .map(|i| {
                Command::new(&exe)
                    .args([addr.to_string(), n.to_string(), (port + i).to_string()])
                    .stdout(std::process::Stdio::null())
                    .spawn()
            })
            .collect::<std::io::Result<_>>()?;
        let failed = kids
            .into_iter()
            .map(|mut k| k.wait())
            .collect::<std::io::Result<Vec<_>>>()?
            .iter()
            .filter(|s| !s.success())
            .count();
        if failed > 0 {
            return Err(format!("{failed} of {procs} processes failed").into());
        }
        println!(
            "{procs} processes x {n} CONNECT/DISCONNECT cycles to {addr}, each an endpoint \
             (ports {port}-{}): none failed, in {} ms",
            port + procs - 1,
            t.elapsed().as_millis()
        );
        return Ok(());
    }
    // The node's address as RoCE v2 names it: an IPv4-mapped GID.
    let gid = addr.to_ipv6_mapped().octets();
    let mut ring = krcore_uring::Builder::new(16).build(krcore_uring::Device::open()?)?;
    let mut times = Vec::with_capacity(n);
    let mut qpns = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let v = match port {
            0 => ring.connect(gid, 0)?,
            p => ring.pair(gid, p, p)?,
        };
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
    // With no endpoint every CONNECT binds the set's first QP; an endpoint's ports pick
    // one of its QPs.
    if port == 0 {
        if qpns.iter().any(|&q| q != qpns[0]) {
            return Err(format!("CONNECTs landed on different QPs: {qpns:?}").into());
        }
        println!("every CONNECT bound to the set's QP {}", qpns[0]);
    }
    Ok(())
}
