//! The three-guest figures of `make bench` (`krcore-figures cluster NODES..` on the first
//! node, `krcore-figures node` on the others): the serverless hand-off
//! ([`crate::handoff`]) and the full mesh ([`crate::mesh`]). The first node runs a daemon
//! like every node's ([`crate::node`]) and coordinates: it waits until every daemon
//! answers, runs each figure through them, prints the block, and ends the others.

use std::net::Ipv4Addr;
use std::sync::mpsc::channel;
use std::time::Duration;

use krcore_benches::record::Record;

use crate::node::{self, send, Msg};

/// This node's address on the guests' segment (`KRCORE_ADDR`, set by the VM runner).
pub fn me() -> Result<Ipv4Addr, String> {
    std::env::var("KRCORE_ADDR")
        .map_err(|_| "KRCORE_ADDR unset (the VM runner sets it)".to_string())?
        .parse()
        .map_err(|e| format!("KRCORE_ADDR: {e}"))
}

/// Every three-guest figure; `others` are the other nodes' addresses.
pub fn figures(others: &[Ipv4Addr], out: &mut Vec<Record>) {
    verify::guest::wait_for_tsc(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    let mut nodes = vec![me().unwrap_or_else(|e| panic!("{e}"))];
    nodes.extend_from_slice(others);
    let (tx, ends) = channel();
    std::thread::spawn(move || node::serve(Some(tx)));
    for &n in &nodes {
        node::wait_up(n, Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    }
    crate::run_sections(
        &[
            ("serverless hand-off", &|o| crate::handoff::figures(&nodes, &ends, o)),
            ("full mesh", &|o| crate::mesh::figures(&nodes, o)),
        ],
        out,
    );
    for &n in others {
        if let Err(e) = send(n, &Msg::Quit) {
            eprintln!("[figures] {n} did not take its quit: {e}");
        }
    }
}
