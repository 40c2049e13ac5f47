//! An elastic worker: a short-lived process that starts, reaches another node's memory
//! by name, reads it, and exits, as a serverless function or a freshly added compute
//! node does. Each stage is timed: with krcore they are microseconds once the node's
//! kernel has a connection set to the memory node (made by whoever contacted it first).
//!
//! ```text
//! elastic_worker NODE NAME [LEN]
//! ```
//! NODE is the memory node's address or host name; NAME the export it published
//! (`remote_memory export` publishes one); LEN the bytes to READ (4096). Prints the
//! stages and the first 8 bytes read. Retries for up to 60 s while the node or the
//! name is not there yet.
#[path = "support/retry.rs"]
mod support;
use std::time::Instant;
use support::retry;

use krcore_abi::cqe::Reason;
use krcore_abi::sqe::MrAccess;
use krcore_uring::{Batch, Builder, Device};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(node), Some(name)) = (args.next(), args.next()) else {
        return Err("usage: elastic_worker NODE NAME [LEN]".into());
    };
    let len: u32 = args.next().map_or(Ok(4096), |s| s.parse())?;
    let t = Instant::now();
    let stage = |what: &str| println!("  {what:<22} {:>10.3} ms", t.elapsed().as_secs_f64() * 1e3);

    let mut ring = Builder::new(16).build(Device::open()?)?;
    stage("ring set up");
    let vqp = retry(60, &[Reason::Unreachable], || {
        // No endpoint: the worker's requests are one-sided.
        ring.connect(&node, 0)
    })?;
    stage("connected");
    let remote = retry(60, &[Reason::NoSuchName, Reason::Unreachable], || {
        ring.import_name(&vqp, &name, len)
    })?;
    stage("imported by name");
    // The landing buffer is the worker's own Vec, lent to the NIC for the READ.
    let mut buf = vec![0u8; len as usize];
    let mut mine = ring.register_slice(&mut buf, MrAccess::LOCAL_WRITE)?;
    stage("buffer registered");
    let mut b = Batch::new();
    b.read(&vqp, &mine, 0, &remote, 0, len)?;
    for c in ring.run(b)? {
        c?;
    }
    stage("READ done");
    let first: Vec<String> = mine.bytes()[..8.min(len as usize)]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    drop(mine);
    ring.disconnect(vqp)?;
    stage("disconnected");
    println!("read {len} bytes of {name} at {node}: {}", first.join(" "));
    Ok(())
}
