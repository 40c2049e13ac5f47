//! A server that listens on a service and answers peers it never connected to.
//!
//! `listener serve SERVICE N`: an [`AsyncRing`] LISTENs on SERVICE (a second ring's
//! LISTEN on it must fail `ServiceTaken`), accepts N peers from any node, RECVs one
//! message from each on its own virtual QP (it must name the address the accept
//! reported: each peer's messages reach only its virtual QP), answers "echo: " and the
//! message, then UNLISTENs and DISCONNECTs. It never CONNECTs to anyone.
//!
//! `listener client ADDR SERVICE ME`: CONNECTs to the node at ADDR for SERVICE, SENDs
//! "hello from ME" (ME: this node's address) and waits for the echo.
#[path = "support/retry.rs"]
mod support;
#[path = "support/talk.rs"]
mod talk;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use krcore_abi::cqe::Reason;
use krcore_abi::sqe::MrAccess;
use krcore_uring::{AsyncRing, Builder, Device, MemoryRegion};
use support::retry;
use talk::{hear, say, SLOT};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn hello(from: Ipv4Addr) -> String {
    format!("hello from {from}")
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
        println!(
            "accepted {} as virtual QP {} after {} ms",
            a.peer,
            a.vqp.handle(),
            t.elapsed().as_millis()
        );
        peers.push(a);
    }
    for a in &peers {
        let mr = ring.register(SLOT as usize, MrAccess::LOCAL_WRITE).await?;
        let (done, mut regions) = ring
            .run(vec![mr], |b, r| {
                b.recv(&a.vqp, &r[0], 0, SLOT as u32).map(|_| ())
            })
            .await;
        let c = done?.remove(0)?;
        let text = String::from_utf8_lossy(&regions[0].bytes()[..c.res as usize]).into_owned();
        if text != hello(a.peer) {
            return Err(format!("from {} on its virtual QP: {text:?}", a.peer).into());
        }
        let echo = format!("echo: {text}");
        let mut mr: MemoryRegion = regions.remove(0);
        mr.bytes_mut()[..echo.len()].copy_from_slice(echo.as_bytes());
        let mut mrs = vec![mr];
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let (done, back) = ring
                .run(mrs, |b, r| {
                    b.send(&a.vqp, &r[0], 0, echo.len() as u32, None)
                        .map(|_| ())
                })
                .await;
            mrs = back;
            match done?.remove(0) {
                Ok(_) => break,
                Err(e) if e.reason() == Some(Reason::NoReceiver) && Instant::now() < until => {}
                Err(e) => return Err(format!("echo to {}: {e}", a.peer).into()),
            }
        }
    }
    println!("each of {n} peers' message came on its own virtual QP, and was answered");
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

fn client(addr: Ipv4Addr, service: u32, me: Ipv4Addr) -> Result<()> {
    let mut ring = Builder::new(16).build(Device::open()?)?;
    let vqp = retry(60, &[Reason::Unreachable], || {
        ring.connect_to(&addr.to_string(), service)
    })?;
    let mut mr = ring.register(SLOT as usize, MrAccess::LOCAL_WRITE)?;
    say(&mut ring, &vqp, &mut mr, &hello(me), 0)?;
    let (text, _) = hear(&mut ring, &vqp, &mut mr)?;
    if text != format!("echo: {}", hello(me)) {
        return Err(format!("answer from {addr}: {text:?}").into());
    }
    println!("{me}: {addr} answered {text:?} on service {service}");
    ring.disconnect(vqp)?;
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["serve", service, n] => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(serve(service.parse()?, n.parse()?)),
        ["client", addr, service, me] => client(addr.parse()?, service.parse()?, me.parse()?),
        _ => Err("usage: listener serve SERVICE N | listener client ADDR SERVICE ME".into()),
    }
}
