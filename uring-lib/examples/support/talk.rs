//! Shared by the examples: one message said or heard on a virtual QP (blocking).
use krcore_abi::cqe::Reason;
use krcore_uring::{Batch, Error, MemoryRegion, Ring, Vqp};

use super::support::retry;

/// The receive buffer of a message, bytes.
pub const SLOT: u64 = 256;

/// SENDs `text` on `vqp` with immediate `imm` (retried while the peer has posted no
/// receive: `NoReceiver` after the deadline).
pub fn say(
    ring: &mut Ring,
    vqp: &Vqp,
    mr: &mut MemoryRegion,
    text: &str,
    imm: u32,
) -> Result<(), Error> {
    mr.bytes_mut()[..text.len()].copy_from_slice(text.as_bytes());
    retry(60, &[Reason::NoReceiver], || {
        let mut b = Batch::new();
        b.send(vqp, mr, 0, text.len() as u32, Some(imm))?;
        ring.run(b)?.remove(0)
    })?;
    Ok(())
}

/// RECVs one message on `vqp`: its text and immediate.
pub fn hear(ring: &mut Ring, vqp: &Vqp, mr: &mut MemoryRegion) -> Result<(String, u32), Error> {
    let mut b = Batch::new();
    b.recv(vqp, mr, 0, SLOT as u32)?;
    let c = ring.run(b)?.remove(0)?;
    let text = String::from_utf8_lossy(&mr.bytes()[..c.res as usize]).into_owned();
    Ok((text, c.aux as u32))
}
