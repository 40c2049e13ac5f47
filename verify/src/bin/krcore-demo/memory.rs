//! The memory node: the table in registered memory, published through krcore and served
//! to verbs over rdma_cm, the same bytes both ways.

use std::thread::sleep;
use std::time::{Duration, Instant};

use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::sqe::MrAccess;
use krcore_uring::{Builder, Device};
use verify::demo::Record;
use verify::kv;

use crate::{Res, NAME, PORT};

/// Builds, publishes and serves a table of `keys` keys; returns once `clients` verbs
/// connections came and left, or after `secs`.
pub fn run(keys: u64, clients: usize, secs: u64) -> Res<()> {
    let e = |e: krcore_uring::Error| e.to_string();
    let g = kv::Geometry::new(keys);
    let dev = Device::open().map_err(e)?;
    let mut ring = Builder::new(8).build(dev).map_err(e)?;
    let len = usize::try_from(g.len).map_err(|_| "table too large")?;
    let mut region = ring
        .register(len, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ)
        .map_err(e)?;
    let t = Instant::now();
    kv::build(region.bytes_mut(), keys)?;
    let build_ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "memory node: {keys} keys, a {:.1} MiB table built in {build_ms:.0} ms",
        g.len as f64 / (1 << 20) as f64
    );
    // The MetaServer is this node's own module, up once its pool is.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match ring.publish(&region, NAME) {
            Err(x) if x.reason() == Some(Reason::Unreachable) && Instant::now() < until => {
                sleep(Duration::from_millis(200))
            }
            r => break r.map_err(|x| format!("publishing {NAME}: {x}"))?,
        }
    }
    println!(
        "{}",
        Record::Store {
            keys,
            bytes: g.len,
            build_ms,
        }
        .line()
    );
    println!("memory node: published as `{NAME}`; serving verbs on rdma_cm port {PORT}");
    verify::cm_verbs::serve(
        PORT,
        region.bytes_mut(),
        clients,
        secs,
        verify::cm_verbs::Recvs::Drop(0),
    )
    .map_err(|x| x.to_string())?;
    ring.deregister(region).map_err(e)?;
    println!("memory node: done");
    Ok(())
}
