//! The user-space verbs baseline across nodes: `verbs-cm serve PORT CONNS
//! SECS` serves 64 KiB over rdma_cm to CONNS clients; `verbs-cm connect ADDR PORT`, in a
//! fresh process as an application starts, connects (every stage timed), READs 8 bytes
//! and prints one line: `verbs-cm: id .. addr .. route .. qp .. mr .. connect .. total
//! .. read .. us` (the word READ checked).
use std::net::Ipv4Addr;
use std::time::Instant;

use verify::cm_verbs::{serve, Client, Recvs};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The user-space verbs baseline across nodes.
#[derive(clap::Parser)]
#[command(name = "verbs-cm")]
enum Cli {
    /// Serve 64 KiB over rdma_cm on PORT to CONNS clients, for at most SECS.
    Serve { port: u16, conns: usize, secs: u64 },
    /// Connect to ADDR's PORT as a fresh process would, READ 8 bytes, print the stages.
    Connect { addr: Ipv4Addr, port: u16 },
}

fn main() -> Result<()> {
    match <Cli as clap::Parser>::parse() {
        Cli::Serve { port, conns, secs } => {
            // Each 8-byte word holds its index.
            let mut mem: Vec<u8> = (0..8192u64).flat_map(u64::to_le_bytes).collect();
            Ok(serve(port, &mut mem, conns, secs, Recvs::Drop(0))?)
        }
        Cli::Connect { addr, port } => {
            let (mut c, st) = Client::connect(addr, port, 4096)?;
            let t = Instant::now();
            let b = c.read(&[(8 * 5, 8)])?;
            let w = u64::from_le_bytes(b[..8].try_into()?);
            let read = t.elapsed();
            if w != 5 {
                return Err(format!("READ brought {w}, not 5").into());
            }
            let us = |d: std::time::Duration| d.as_micros();
            println!(
                "verbs-cm: id {} addr {} route {} qp {} mr {} connect {} total {} read {} us",
                us(st.id),
                us(st.resolve_addr),
                us(st.resolve_route),
                us(st.qp),
                us(st.reg_mr),
                us(st.connect),
                us(st.total()),
                us(read)
            );
            Ok(())
        }
    }
}
