//! What one node or one user may hold of another's tables, across nodes.
//!
//! `wire-shares listen SERVICE ANSWERS SECS`: LISTENs on SERVICE and takes ANSWERS of
//! the listen's answers (accepted peers, and peers refused with a reason), waiting at
//! most SECS for each; prints `accepted A refused R (Quota Q)` and exits 0 (the caller
//! judges the figures).
//!
//! `wire-shares connect ADDR SERVICE N SECS`: CONNECTs N times to SERVICE at the node
//! at ADDR (a first contact retried while `Unreachable`), each refusal counted by
//! reason, holds what it got for SECS (or until killed), and prints `T taken, R refused
//! (REASON:COUNT ...)` before the hold.
//!
//! Run as another user with `setpriv`; the module's shares count users and nodes.
use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use krcore_abi::cqe::Reason;
use krcore_uring::{Builder, Device};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn listen(service: u32, answers: usize, secs: u64) -> Result<()> {
    let mut ring = Builder::new(64).cq_entries(512).build(Device::open()?)?;
    let mut l = ring.listen(service)?;
    println!("listening on service {service} for {answers} answers");
    std::io::stdout().flush()?;
    let (mut accepted, mut refused) = (Vec::new(), BTreeMap::new());
    while accepted.len() + refused.values().sum::<usize>() < answers {
        match ring.accept_timeout(&mut l, Duration::from_secs(secs)) {
            Ok(a) => accepted.push(a),
            Err(e) => match e.reason() {
                Some(r) => *refused.entry(format!("{r:?}")).or_insert(0) += 1,
                None => {
                    return Err(format!(
                        "after {} accepted and {refused:?} refused: {e}",
                        accepted.len()
                    )
                    .into())
                }
            },
        }
    }
    let quota = refused.get("Quota").copied().unwrap_or(0);
    println!(
        "accepted {} refused {} (Quota {quota})",
        accepted.len(),
        refused.values().sum::<usize>()
    );
    Ok(())
}

fn connect(addr: Ipv4Addr, service: u32, n: usize, secs: u64) -> Result<()> {
    let mut ring = Builder::new(64).cq_entries(512).build(Device::open()?)?;
    let (mut held, mut refused) = (Vec::new(), BTreeMap::new());
    let t = Instant::now();
    while held.len() + refused.values().sum::<usize>() < n {
        if (held.len() + refused.values().sum::<usize>()) % 50 == 0 {
            eprintln!(
                "{} taken, {refused:?} refused after {} ms",
                held.len(),
                t.elapsed().as_millis()
            );
        }
        match ring.connect(addr, service) {
            Ok(v) => held.push(v),
            // The first contact makes the set: a node not reached yet is retried.
            Err(e) if e.reason() == Some(Reason::Unreachable) && held.is_empty() => {
                if t.elapsed() > Duration::from_secs(60) {
                    return Err(format!("{addr} unreachable for 60 s: {e}").into());
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => match e.reason() {
                Some(r) => *refused.entry(format!("{r:?}")).or_insert(0) += 1,
                None => return Err(format!("CONNECT {}: {e}", held.len()).into()),
            },
        }
    }
    let why: Vec<String> = refused.iter().map(|(r, k)| format!("{r}:{k}")).collect();
    println!(
        "{} taken, {} refused ({})",
        held.len(),
        refused.values().sum::<usize>(),
        why.join(" ")
    );
    std::io::stdout().flush()?;
    std::thread::sleep(Duration::from_secs(secs));
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["listen", service, answers, secs] => {
            listen(service.parse()?, answers.parse()?, secs.parse()?)
        }
        ["connect", addr, service, n, secs] => {
            connect(addr.parse()?, service.parse()?, n.parse()?, secs.parse()?)
        }
        _ => Err("usage: wire-shares listen SERVICE ANSWERS SECS | \
                  wire-shares connect ADDR SERVICE N SECS"
            .into()),
    }
}
