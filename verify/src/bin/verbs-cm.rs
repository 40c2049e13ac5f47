//! The user-space verbs baseline across nodes (issue 12): `verbs-cm serve PORT CONNS
//! SECS` serves 64 KiB over rdma_cm to CONNS clients; `verbs-cm connect ADDR PORT`, in a
//! fresh process as an application starts, connects (every stage timed), READs 8 bytes
//! and prints one line: `verbs-cm: id .. addr .. route .. qp .. mr .. connect .. total
//! .. read .. us` (the word READ checked).
use std::net::Ipv4Addr;
use std::time::Instant;

use verify::cm_verbs::{serve, Client};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: verbs-cm serve PORT CONNS SECS | connect ADDR PORT";
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["serve", port, conns, secs] => {
            // Each 8-byte word holds its index.
            let mut mem: Vec<u8> = (0..8192u64).flat_map(u64::to_le_bytes).collect();
            Ok(serve(
                port.parse()?,
                &mut mem,
                conns.parse()?,
                secs.parse()?,
                0,
            )?)
        }
        ["connect", addr, port] => {
            let (mut c, st) = Client::connect(addr.parse::<Ipv4Addr>()?, port.parse()?, 4096)?;
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
        _ => Err(usage.into()),
    }
}
