//! A server that listens on a service and answers peers it never connected to.
//!
//! `listener serve SERVICE N`: an [`AsyncRing`] LISTENs on SERVICE (a second ring's
//! LISTEN on it must fail `ServiceTaken`), accepts N connecting virtual QPs from any
//! nodes (several processes per node, this node's own included), RECVs one message
//! from each on its own virtual QP, all at once (each must name the address and port
//! the accept reported: each client's messages reach only its virtual QP), answers
//! "echo: " and the message to each, then UNLISTENs and DISCONNECTs. It never CONNECTs
//! to anyone.
//!
//! `listener client ADDR SERVICE ME [PROCS [HOLD_MS]]`: CONNECTs to the node at ADDR for
//! SERVICE (from an ephemeral port), SENDs "hello from ME:PORT" (ME: this node's address,
//! PORT: the CONNECT's port) and waits for its own echo; with PROCS, as many processes
//! do so at once, and each must get its own. With HOLD_MS, each waits that long between
//! its CONNECT and its hello: a connection outlives the deadline its CONNECT had.
#[path = "support/retry.rs"]
mod support;
#[path = "support/talk.rs"]
mod talk;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

use krcore_abi::cqe::Reason;
use krcore_abi::sqe::MrAccess;
use krcore_uring::{AsyncRing, Builder, Device};
use support::retry;
use talk::{hear, say, SLOT};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn hello(from: Ipv4Addr, port: u16) -> String {
    format!("hello from {from}:{port}")
}

async fn serve(service: u32, n: usize) -> Result<()> {
    let ring = AsyncRing::new(Builder::new(64).cq_entries(256).build(Device::open()?)?)?;
    let mut listener = ring.listen(service).await?;
    let mut other = Builder::new(8).build(Device::open()?)?;
    match other.listen(service) {
        Err(e) if e.reason() == Some(Reason::ServiceTaken) => {
            println!("a second ring's LISTEN on service {service}: refused, ServiceTaken")
        }
        r => return Err(format!("a second ring's LISTEN on service {service}: {r:?}").into()),
    }
    println!("listening on service {service} for {n} peers");
    let t = Instant::now();
    let mut peers = Vec::new();
    while peers.len() < n {
        let a = tokio::time::timeout(Duration::from_secs(120), ring.accept(&mut listener))
            .await
            .map_err(|_| format!("{} of {n} peers joined in 120 s", peers.len()))??;
        if n <= 4 {
            println!(
                "accepted {}:{} as virtual QP {} after {} ms",
                a.peer,
                a.peer_port,
                a.vqp.handle(),
                t.elapsed().as_millis()
            );
        }
        peers.push(a);
    }
    // Every peer's receive at once, in one region: a slot each.
    let mr = ring
        .register(n * SLOT as usize, MrAccess::LOCAL_WRITE)
        .await?;
    let (done, mut regions) = ring
        .run(vec![mr], |b, r| {
            for (i, a) in peers.iter().enumerate() {
                b.recv(&a.vqp, &r[0], i as u64 * SLOT, SLOT as u32)?;
            }
            Ok(())
        })
        .await;
    let mut echoes = Vec::with_capacity(n);
    for ((i, a), c) in peers.iter().enumerate().zip(done?) {
        let c = c?;
        let at = i * SLOT as usize;
        let bytes = &regions[0].bytes()[at..at + c.res as usize];
        let text = String::from_utf8_lossy(bytes).into_owned();
        if text != hello(a.peer, a.peer_port) {
            return Err(format!(
                "from {}:{} on its virtual QP: {text:?}",
                a.peer, a.peer_port
            )
            .into());
        }
        echoes.push(format!("echo: {text}"));
    }
    for (i, e) in echoes.iter().enumerate() {
        let at = i * SLOT as usize;
        regions[0].bytes_mut()[at..at + e.len()].copy_from_slice(e.as_bytes());
    }
    // Every echo at once; one whose client has not posted its receive yet goes again.
    let mut left: Vec<usize> = (0..n).collect();
    let until = Instant::now() + Duration::from_secs(120);
    while !left.is_empty() {
        let (done, back) = ring
            .run(regions, |b, r| {
                for &i in &left {
                    let len = echoes[i].len() as u32;
                    b.send(&peers[i].vqp, &r[0], i as u64 * SLOT, len, None)?;
                }
                Ok(())
            })
            .await;
        regions = back;
        let mut again = Vec::new();
        for (&i, c) in left.iter().zip(done?) {
            match c {
                Ok(_) => {}
                Err(e) if e.reason() == Some(Reason::NoReceiver) && Instant::now() < until => {
                    again.push(i)
                }
                Err(e) => {
                    let a = &peers[i];
                    return Err(format!("echo to {}:{}: {e}", a.peer, a.peer_port).into());
                }
            }
        }
        left = again;
    }
    println!(
        "each of {n} peers' message came on its own virtual QP, and was answered, in {} ms",
        t.elapsed().as_millis()
    );
    let mut ring = ring;
    let left = ring.ring().unlisten(listener)?;
    if !left.is_empty() {
        return Err(format!("peers joined past the {n} expected: {left:?}").into());
    }
    for a in peers {
        ring.ring().disconnect(a.vqp)?;
    }
    Ok(())
}

fn client(addr: Ipv4Addr, service: u32, me: Ipv4Addr, hold: Duration) -> Result<()> {
    let mut ring = Builder::new(16).build(Device::open()?)?;
    let mut mr = ring.register(SLOT as usize, MrAccess::LOCAL_WRITE)?;
    // A server that did not listen within the deadline refuses: connect again.
    let mut tries = 0;
    let (vqp, mine) = loop {
        let vqp = retry(60, &[Reason::Unreachable], || ring.connect(addr, service))?;
        let mine = hello(me, vqp.port());
        std::thread::sleep(hold);
        match say(&mut ring, &vqp, &mut mr, &mine, 0) {
            Err(e) if e.reason() == Some(Reason::Refused) && tries < 6 => {
                tries += 1;
                ring.disconnect(vqp)?;
            }
            r => break r.map(|()| (vqp, mine))?,
        }
    };
    let (text, _) = hear(&mut ring, &vqp, &mut mr)?;
    if text != format!("echo: {mine}") {
        return Err(format!("answer from {addr} to {me}:{}: {text:?}", vqp.port()).into());
    }
    ring.disconnect(vqp)?;
    Ok(())
}

/// `procs` client processes at once (this program again, as `client`), each checking
/// its own echo.
fn clients(addr: Ipv4Addr, service: u32, me: Ipv4Addr, procs: usize, hold: Duration) -> Result<()> {
    let exe = std::env::current_exe()?;
    let t = Instant::now();
    let kids: Vec<_> = (0..procs)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "client",
                    &addr.to_string(),
                    &service.to_string(),
                    &me.to_string(),
                ])
                .args(["1", &hold.as_millis().to_string()])
                .spawn()
        })
        .collect::<std::io::Result<_>>()?;
    let mut failed = 0;
    for mut k in kids {
        if !k.wait()?.success() {
            failed += 1;
        }
    }
    if failed > 0 {
        return Err(format!("{failed} of {procs} client processes failed").into());
    }
    println!(
        "{me}: {procs} client processes, each answered its own echo by {addr} on service \
         {service}, in {} ms",
        t.elapsed().as_millis()
    );
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["serve", service, n] => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(serve(service.parse()?, n.parse()?)),
        ["client", addr, service, me, ref rest @ ..] if rest.len() <= 2 => {
            let (addr, service, me) = (addr.parse()?, service.parse()?, me.parse()?);
            let procs: usize = rest.first().map_or(Ok(1), |p| p.parse())?;
            let hold = Duration::from_millis(rest.get(1).map_or(Ok(0), |h| h.parse())?);
            match procs {
                1 => client(addr, service, me, hold),
                _ => clients(addr, service, me, procs, hold),
            }
        }
        _ => Err(
            "usage: listener serve SERVICE N | listener client ADDR SERVICE ME [PROCS [HOLD_MS]]"
                .into(),
        ),
    }
}
