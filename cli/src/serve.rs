//! `krcore serve`: the other side of `lat` and `bw` run from another node, as perftest's
//! server is: memory published under a name for the one-sided tests, and a listen on a
//! service that echoes every message back for the SEND/RECV tests.

use std::time::Duration;

use krcore_uring::abi::cqe::Cqe;
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::Sqe;
use krcore_uring::{Batch, Builder, Device, MemoryRegion, MrAccess, Ring, Vqp};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A peer silent this long is let go (its CONNECT's ring may have closed), and the next
/// one served: shorter than the module's request deadline, so a peer that joined
/// meanwhile does not see its first SEND fail `NoReceiver`.
const IDLE: Duration = Duration::from_secs(1);

/// `user_data` bit of an echo's SEND (its RECV slot in the low bits).
const SENT: u64 = 1 << 32;

/// What `serve` offers.
#[derive(clap::Args)]
pub struct Args {
    /// Publish memory under this name, for `lat`/`bw --node THIS --name NAME`.
    #[arg(long)]
    name: Option<String>,
    /// Who may use the published memory, as a file's mode (octal; every user by
    /// default).
    #[arg(long, default_value = "666", value_parser = octal_mode)]
    mode: u16,
    /// Listen on this service and echo every message, for `lat`/`bw --op send
    /// --node THIS --service SERVICE` (peers one at a time).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    service: Option<u32>,
    /// Bytes published, and the largest message echoed.
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u32).range(8..=1 << 26))]
    size: u32,
    /// Receives posted at once (1 to 512).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=512))]
    depth: u32,
    /// End after serving this many peers (by default, serve until killed).
    #[arg(long)]
    peers: Option<u32>,
}

/// A file mode in octal, at most `0o666`.
fn octal_mode(s: &str) -> std::result::Result<u16, String> {
    match u16::from_str_radix(s.trim_start_matches("0o"), 8) {
        Ok(m) if m <= 0o666 => Ok(m),
        _ => Err(format!("{s:?} is not a mode of at most 666 (octal)")),
    }
}

pub fn serve(a: &Args) -> Result<()> {
    if a.name.is_none() && a.service.is_none() {
        return Err("nothing to serve: give --name, --service or both".into());
    }
    let mut ring = Builder::new(2 * a.depth).build(Device::open()?)?;
    let all = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_ATOMIC;
    // Kept registered (and published) while this serves.
    let _target = match &a.name {
        Some(name) => {
            let target = ring.register(a.size as usize, all)?;
            ring.publish_mode(&target, name, a.mode)?;
            println!("published {} B as {name:?} (mode {:o})", a.size, a.mode);
            Some(target)
        }
        None => None,
    };
    let Some(service) = a.service else {
        println!("serving until killed");
        loop {
            std::thread::park();
        }
    };
    let slots = (a.size as u64 * a.depth as u64)
        .try_into()
        .ok()
        .filter(|&n: &u32| n < u32::MAX - 7)
        .ok_or("--size times --depth is more memory than one region holds (4 GiB)")?;
    let buf = ring.register(slots as usize, MrAccess::LOCAL_WRITE)?;
    let mut listener = ring.listen(service)?;
    println!(
        "echoing messages of up to {} B on service {service}",
        a.size
    );
    let mut served = 0;
    while a.peers.is_none_or(|n| served < n) {
        let peer = ring.accept(&mut listener)?;
        let (n, end) = echo(&mut ring, &peer.vqp, &buf, a.size, a.depth)?;
        println!(
            "peer {}:{}: {n} messages echoed; {end}",
            peer.peer, peer.peer_port
        );
        let mut b = Batch::new();
        b.disconnect(peer.vqp);
        for c in ring.run(b)? {
            c?;
        }
        // The receives the DISCONNECT cancelled.
        ring.completions().for_each(drop);
        served += 1;
    }
    Ok(())
}

/// Echoes each message `vqp` receives (into one of `depth` slots of `size` bytes of
/// `buf`) until it is silent for [`IDLE`] or a receive fails (the peer went); returns
/// how many, and why it ended. Receives are left posted: the caller's DISCONNECT
/// cancels them.
fn echo(
    ring: &mut Ring,
    vqp: &Vqp,
    buf: &MemoryRegion,
    size: u32,
    depth: u32,
) -> Result<(u64, String)> {
    let slot = |k: u64| buf.addr() + k * size as u64;
    let entry = |op, ud: u64, len| {
        Sqe::two_sided(op, ud, vqp.handle(), buf.handle(), slot(ud & !SENT), len)
    };
    let mut sq = ring.submission();
    for k in 0..depth as u64 {
        // SAFETY: `buf` stays registered until after the DISCONNECT that cancels them.
        unsafe { sq.push(&entry(Opcode::Recv, k, size)) }?;
    }
    drop(sq);
    let mut echoed = 0;
    loop {
        match ring.submit_and_wait_timeout(1, IDLE) {
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Ok((echoed, format!("silent for {IDLE:?}")))
            }
            r => r?,
        };
        let done: Vec<Cqe> = ring.completions().collect();
        let mut sq = ring.submission();
        for c in done {
            let k = c.user_data & !SENT;
            let next = match (c.user_data & SENT != 0, c.res) {
                // The echo went (or failed): the slot receives again.
                (true, _) => entry(Opcode::Recv, k, size),
                (false, n) if n >= 0 => {
                    echoed += 1;
                    entry(Opcode::Send, k | SENT, n as u32)
                }
                (false, _) => {
                    let why = krcore_uring::describe_failure(&c).unwrap_or_default();
                    return Ok((echoed, format!("a receive failed: {why}")));
                }
            };
            // SAFETY: as above; one entry per slot is ever in flight, and the SQ has
            // room for both halves of every slot.
            unsafe { sq.push(&next) }?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> std::result::Result<Args, clap::Error> {
        crate::parse_only(args)
    }

    #[test]
    fn modes_are_octal_and_at_most_666() {
        assert_eq!(octal_mode("640"), Ok(0o640));
        assert_eq!(octal_mode("0o600"), Ok(0o600));
        assert!(octal_mode("777").is_err() && octal_mode("9").is_err() && octal_mode("").is_err());
        assert_eq!(
            parse(&["--name", "t"]).unwrap().mode,
            0o666,
            "every user by default"
        );
    }

    #[test]
    fn bad_sizes_depths_and_services_are_refused_by_name() {
        assert!(
            parse(&["--service", "0"]).is_err(),
            "service 0 is no endpoint"
        );
        assert!(parse(&["--size", "4"]).is_err() && parse(&["--size", "1000000000"]).is_err());
        assert!(parse(&["--depth", "0"]).is_err() && parse(&["--depth", "513"]).is_err());
        let a = parse(&["--service", "7", "--depth", "512", "--size", "67108864"]).unwrap();
        assert_eq!(
            (a.size as u64) * (a.depth as u64),
            1 << 35,
            "its buffer is refused when made"
        );
    }
}
