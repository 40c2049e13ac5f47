//! A host on the segment that is not a member of the cluster, with plain librdmacm:
//! what it can get from a member kernel's listener.
//!
//! - `cm-intruder capture FILE SECS`: listens to the segment (eth0, promiscuous) until a
//!   member's proof goes by (a connection request whose private data is a krcore hello
//!   with a proof, FRESH or PROVE, or the hello of the module before proofs), and writes that
//!   hello's 56 bytes to FILE.
//! - `cm-intruder knock ADDR PORT [FILE]`: asks ADDR's listener for connections with
//!   crafted private data: the hello of the module before proofs (key 0 in the clear),
//!   an ASK (which must be answered with a challenge: the listener is there), a PROVE
//!   answering that challenge with no key's tag, the same for the MetaServer, and the
//!   captured proof replayed. Every one must be refused: no QP, so no byte of the
//!   MetaServer's region or of any MR. Exits 1 otherwise.
//! - `cm-intruder spoof ADDR PORT AS SECS`: for SECS, as fast as it can, sends ADDR's
//!   listener proofs with no key's tag and challenges it never issued, each from the
//!   local address AS (another node's, added here: what any host on the segment can
//!   write into a RoCE packet), never waiting for an answer. They must cost that node
//!   nothing: its own dials go on being admitted.
//! - `cm-intruder hog ADDR PORT FROM KEYFILE COUNT SECS`: a member's user program with
//!   the key its root read (KEYFILE, hex): asks ADDR's listener for COUNT MetaServer
//!   connections from FROM (this host's address), each with a true proof, holds those
//!   accepted for SECS, and says how many were accepted and refused. The listener
//!   must take only that node's part of its connections.
//! - `cm-intruder yielder PORT SECS`: listens on PORT as a member would, and refuses
//!   every request for SECS with a yield whose tag no key made (what any host on the
//!   segment can send a dialer). The dialer must not yield: that would have it wait
//!   for a set nobody makes.
//! - `cm-intruder dreq SECS`: listens to the segment for SECS and, for every peer
//!   connection it sees made between two members (a REQ carrying a krcore hello for a
//!   set, its REP and RTU), forges a disconnect request (DREQ) to each end as from the
//!   other, with the comm IDs and QP numbers those carried in the clear: what any host on
//!   the path can send. Every CM frame's ICRC is checked against rxe's, so the forged ones
//!   are as good. Exits 1 if it forged none. The members must keep their sets.
//! - `cm-intruder impostor PORT SECS READ_SECS`: listens on PORT as a member would (SECS
//!   at most), and accepts the first request (a member dialing this host) with an
//!   accept that proves no key, then READs from the dialer's QP at once. The dialer
//!   must not answer: its QP may not be ready to receive before it checked the accept's
//!   proof. Exits 1 if it answered within READ_SECS (the READ completed, or failed with
//!   a remote access error).
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use krcore_abi::cluster::hello::{Accept, Hello, Kind, Offer, Proof, Refusal, Step, HELLO_LEN};
use verify::cm_verbs::{Client, Knock, Listener};
use verify::roce::{self, CmMad};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The kind byte of the module's hello before proofs.
const PEER: u8 = 1;

#[derive(clap::Parser)]
#[command(name = "cm-intruder")]
enum Cli {
    /// Capture a member's proof from the segment into FILE, waiting SECS at most.
    Capture { file: String, secs: u64 },
    /// Knock on ADDR's listener at PORT with crafted requests (and FILE's, replayed).
    Knock {
        addr: Ipv4Addr,
        port: u16,
        replay: Option<String>,
    },
    /// Accept the first request on PORT (SECS at most) with no key's proof and READ at
    /// once (READ_SECS at most).
    Impostor {
        port: u16,
        secs: u64,
        read_secs: u64,
    },
    /// For SECS, send ADDR's listener at PORT bad proofs from the local address AS.
    Spoof {
        addr: Ipv4Addr,
        port: u16,
        from: Ipv4Addr,
        secs: u64,
    },
    /// For SECS, forge a DREQ to both ends of every set connection seen made.
    Dreq { secs: u64 },
    /// Refuse every request on PORT for SECS with an unproved yield.
    Yielder { port: u16, secs: u64 },
    /// Hold COUNT proved MetaServer connections to ADDR's listener at PORT, from FROM,
    /// with the cluster key in KEYFILE, for SECS.
    Hog {
        addr: Ipv4Addr,
        port: u16,
        from: Ipv4Addr,
        keyfile: String,
        count: usize,
        secs: u64,
    },
}

/// A hello as a member writes one: kind, the dialer's nonce, and the proof answering
/// a challenge if any (else an ASK).
fn hello(kind: Kind, proof: Option<Proof>) -> [u8; HELLO_LEN] {
    Hello {
        kind,
        index: 0,
        nonce_i: [0x5a; 16],
        step: proof.map_or(Step::Ask, Step::Prove),
    }
    .write()
}

/// A proof answering `nonce_r` with `tag`.
fn proof(nonce_r: [u8; 16], tag: [u8; 16]) -> Option<Proof> {
    Some(Proof { nonce_r, tag })
}

/// The module's hello before proofs: "KRC1", a peer connection, key 0.
fn old_hello() -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..4].copy_from_slice(b"KRC1");
    h[4] = PEER;
    h
}

fn knock(addr: Ipv4Addr, port: u16, what: &str, private: &[u8]) -> Result<Vec<u8>> {
    match Client::knock(addr, port, private)? {
        Knock::Refused(status, data) => {
            println!("cm-intruder: {what}: refused (status {status})");
            Ok(data)
        }
        Knock::Accepted(data) => Err(format!(
            "{what}: ACCEPTED, a QP connected to the member (accept's data {:02x?})",
            &data[..data.len().min(40)]
        )
        .into()),
        Knock::Failed(ev, status) => Err(format!(
            "{what}: neither accepted nor refused (event {ev}, status {status})"
        )
        .into()),
    }
}

fn knocks(addr: Ipv4Addr, port: u16, replay: Option<String>) -> Result<()> {
    knock(addr, port, "the old hello with key 0", &old_hello())?;
    let answer = knock(addr, port, "an ASK", &hello(Kind::Peer, None))?;
    // The listener is there and answers as a member would: with a challenge.
    let Refusal::Challenge(nonce_r) = Refusal::read(&answer) else {
        return Err(format!(
            "an ASK was refused without a challenge ({:02x?})",
            &answer[..answer.len().min(20)]
        )
        .into());
    };
    knock(
        addr,
        port,
        "a PROVE with no key's tag",
        &hello(Kind::Peer, proof(nonce_r, [0; 16])),
    )?;
    knock(
        addr,
        port,
        "the same challenge again",
        &hello(Kind::Peer, proof(nonce_r, [0xff; 16])),
    )?;
    knock(
        addr,
        port,
        "a MetaServer PROVE with no key's tag",
        &hello(Kind::Meta, proof(nonce_r, [0; 16])),
    )?;
    if let Some(file) = replay {
        let captured = std::fs::read(&file)?;
        knock(
            addr,
            port,
            "a member's proof replayed from the segment",
            &captured,
        )?;
    }
    println!("cm-intruder: every request refused: no QP, nothing read");
    Ok(())
}

/// Bad proofs from `from` to `addr`'s listener for `secs`: PROVEs and MetaServer PROVEs
/// with no key's tag, answering challenges never issued, a new one each; every request
/// is kept 2 s (the CM sends it again meanwhile), 64 at most.
fn spoof(addr: Ipv4Addr, port: u16, from: Ipv4Addr, secs: u64) -> Result<()> {
    let start = Instant::now();
    let mut live = std::collections::VecDeque::new();
    let mut sent = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        let mut nonce_r = [0u8; 16];
        nonce_r[..8].copy_from_slice(&sent.to_le_bytes());
        let kind = if sent % 2 == 0 {
            Kind::Peer
        } else {
            Kind::Meta
        };
        let bad = hello(kind, proof(nonce_r, [0xa5; 16]));
        live.push_back((
            Instant::now(),
            Client::request_from(from, addr, port, &bad)?,
        ));
        sent += 1;
        while live.len() > 64
            || live
                .front()
                .is_some_and(|(t, _)| t.elapsed() > Duration::from_secs(2))
        {
            live.pop_front();
        }
    }
    let s = start.elapsed().as_secs_f64();
    println!(
        "cm-intruder: {sent} bad proofs claiming {from} sent to {addr} in {s:.1} s ({:.0} a second)",
        sent as f64 / s
    );
    Ok(())
}

/// HMAC-SHA256 of `msg` with the key `hex`, cut to a tag, as the kernels make it
/// (cm_auth.c), by openssl: what a member's user program with the key can compute.
fn tag(hex: &str, msg: &[u8]) -> Result<[u8; 16]> {
    use std::io::Write;
    let mut child = std::process::Command::new("openssl")
        .args([
            "dgst",
            "-sha256",
            "-mac",
            "HMAC",
            "-macopt",
            &format!("hexkey:{hex}"),
            "-binary",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    child.stdin.take().ok_or("no stdin")?.write_all(msg)?;
    let out = child.wait_with_output()?;
    if !out.status.success() || out.stdout.len() < 16 {
        return Err(format!("openssl dgst: {}", out.status).into());
    }
    let mut t = [0u8; 16];
    t.copy_from_slice(&out.stdout[..16]);
    Ok(t)
}

/// COUNT MetaServer connections to `addr`'s listener, each proved with the key, held
/// `secs`: prints how many were accepted and refused.
fn hog(
    addr: Ipv4Addr,
    port: u16,
    from: Ipv4Addr,
    keyfile: &str,
    count: usize,
    secs: u64,
) -> Result<()> {
    use krcore_abi::cluster::hello::{Endpoint, Role, Transcript, PROVE};
    let key = std::fs::read_to_string(keyfile)?
        .trim()
        .trim_start_matches("0x")
        .to_string();
    let (mut held, mut refused) = (Vec::new(), 0);
    for i in 0..count {
        let nonce_i = [0x5a; 16];
        // The listener's challenge for this host, then a request that answers it. An
        // ASK refused without one: the listener has no room at all.
        let answer = match Client::knock(addr, port, &hello(Kind::Meta, None))? {
            Knock::Refused(_, answer) => answer,
            other => return Err(format!("an ASK was answered {other:?}").into()),
        };
        let Refusal::Challenge(nonce_r) = Refusal::read(&answer) else {
            refused += 1;
            continue;
        };
        let c = Client::prepared(addr, port)?;
        let (sport, qpn) = c.names();
        let t = Transcript {
            kind: Kind::Meta,
            step: PROVE,
            index: 0,
            initiator: Endpoint {
                addr: from.octets(),
                port: sport,
            },
            responder: Endpoint {
                addr: addr.octets(),
                port,
            },
            initiator_qpn: qpn,
            responder_qpn: 0,
            nonce_i,
            nonce_r,
        };
        let proof = Proof {
            nonce_r,
            tag: tag(&key, &t.bytes(Role::Initiator))?,
        };
        match c.ask(&hello(Kind::Meta, Some(proof)))? {
            Knock::Accepted(_) => held.push(c),
            // Refused, or dropped unanswered (a listener returning an error has the CM
            // destroy the request): either way not held.
            Knock::Refused(status, _) | Knock::Failed(_, status) => {
                refused += 1;
                if refused <= 2 {
                    println!("cm-intruder: hog: request {i} refused (status {status})");
                }
            }
        }
    }
    println!(
        "cm-intruder: hog: {} accepted, {refused} refused",
        held.len()
    );
    std::thread::sleep(Duration::from_secs(secs));
    drop(held);
    Ok(())
}

/// Sets socket option `name` of `level` on `fd` to `value`.
fn setsockopt<T>(fd: i32, level: i32, name: i32, value: &T) -> std::io::Result<()> {
    // SAFETY: `value` is a live `T` of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The first member's hello with a proof in the frames seen on eth0 within `secs`.
/// eth0 in promiscuous mode, every frame on the segment: a raw socket (its fd, closed at
/// exit) whose receives wait 200 ms at most, and eth0's index.
fn sniffer() -> Result<(i32, i32)> {
    // SAFETY: plain socket call; the fd is closed at exit.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW,
            (libc::ETH_P_ALL as u16).to_be() as i32,
        )
    };
    if fd < 0 {
        return Err(format!("AF_PACKET socket: {}", std::io::Error::last_os_error()).into());
    }
    let name = std::ffi::CString::new("eth0")?;
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
    // SAFETY: plain data.
    let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
    mr.mr_ifindex = ifindex;
    mr.mr_type = libc::PACKET_MR_PROMISC as u16;
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mr)
        .map_err(|e| format!("promiscuous eth0: {e}"))?;
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 200_000,
    };
    // A receive that ends without a frame only checks the clock again.
    let _ = setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv);
    Ok((fd, ifindex))
}

/// The next frame into `buf` (None when the receive timed out).
fn next_frame(fd: i32, buf: &mut [u8]) -> Option<&[u8]> {
    // SAFETY: `buf` has room for its length.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    (n > 0).then(|| &buf[..n as usize])
}

fn capture(file: &str, secs: u64) -> Result<()> {
    let (fd, _) = sniffer()?;
    let until = Instant::now() + Duration::from_secs(secs);
    let mut frame = vec![0u8; 2048];
    let mut frames = 0u64;
    while Instant::now() < until {
        let Some(f) = next_frame(fd, &mut frame) else {
            continue;
        };
        frames += 1;
        // A proof, or the hello of the module before proofs (its key in the clear).
        let proof = |w: &&[u8]| Hello::read(w).is_some_and(|h| h.step.proof().is_some());
        let old = |w: &&[u8]| w[..4] == *b"KRC1" && (w[4] == 1 || w[4] == 2);
        let found = f.windows(HELLO_LEN).find(|w| proof(w) || old(w));
        if let Some(h) = found {
            std::fs::write(file, h)?;
            println!("cm-intruder: captured a member's proof after {frames} frames");
            return Ok(());
        }
    }
    Err(format!("no member's proof among {frames} frames in {secs} s").into())
}

/// A connection seen being made: its dialer's (initiator's) and listener's
/// (responder's) addresses, comm IDs and QP numbers.
struct Seen {
    i: CmMad,
    r_comm: Option<u32>,
    r_qpn: u32,
}

fn dreq(secs: u64) -> Result<()> {
    let (fd, ifindex) = sniffer()?;
    let until = Instant::now() + Duration::from_secs(secs);
    let mut frame = vec![0u8; 2048];
    let (mut checked, mut forged) = (0u64, 0u64);
    let mut seen: Vec<Seen> = Vec::new();
    while Instant::now() < until {
        let Some(f) = next_frame(fd, &mut frame) else {
            continue;
        };
        let Some(m) = roce::parse_cm(f) else {
            continue;
        };
        if !roce::icrc_ok(f) {
            return Err(format!(
                "a CM frame's ICRC is not the one computed here: {:02x?}",
                &f[f.len() - 4..]
            )
            .into());
        }
        checked += 1;
        let peer_hello = || {
            m.body
                .windows(HELLO_LEN)
                .any(|w| Hello::read(w).is_some_and(|h| h.kind == Kind::Peer))
        };
        match m.attr {
            roce::REQ if peer_hello() => seen.push(Seen {
                i: m,
                r_comm: None,
                r_qpn: 0,
            }),
            roce::REP => {
                // The reply to a request: the remote comm ID is the dialer's.
                if let Some(c) = seen
                    .iter_mut()
                    .find(|c| c.i.ip_src == m.ip_dst && c.i.word(0) == m.word(4))
                {
                    (c.r_comm, c.r_qpn) = (Some(m.word(0)), m.qpn(12));
                }
            }
            roce::RTU => {
                let at = seen.iter().position(|c| {
                    c.i.ip_src == m.ip_src
                        && c.i.word(0) == m.word(0)
                        && c.r_comm == Some(m.word(4))
                });
                let Some(c) = at.map(|k| seen.swap_remove(k)) else {
                    continue;
                };
                // Once the listener took the RTU: the connection is up at both ends.
                std::thread::sleep(Duration::from_millis(100));
                let (i_comm, r_comm) = (c.i.word(0), c.r_comm.unwrap_or(0));
                let to_dialer = roce::CmMad {
                    eth_src: c.i.eth_dst,
                    eth_dst: c.i.eth_src,
                    ip_src: c.i.ip_dst,
                    ip_dst: c.i.ip_src,
                    attr: roce::DREQ,
                    body: roce::dreq_body(r_comm, i_comm, c.i.qpn(32)),
                };
                let to_listener = roce::CmMad {
                    eth_src: c.i.eth_src,
                    eth_dst: c.i.eth_dst,
                    ip_src: c.i.ip_src,
                    ip_dst: c.i.ip_dst,
                    attr: roce::DREQ,
                    body: roce::dreq_body(i_comm, r_comm, c.r_qpn),
                };
                for d in [to_dialer, to_listener] {
                    send_frame(
                        fd,
                        ifindex,
                        &roce::cm_frame(&d, 0xc000 | (forged as u16 & 0xfff)),
                    )?;
                    forged += 1;
                }
                println!(
                    "cm-intruder: forged a DREQ to each end of {}:{:#x} (QP {}) - {}:{:#x} (QP {})",
                    Ipv4Addr::from(c.i.ip_src),
                    i_comm,
                    c.i.qpn(32),
                    Ipv4Addr::from(c.i.ip_dst),
                    r_comm,
                    c.r_qpn
                );
            }
            _ => {}
        }
    }
    println!("cm-intruder: {forged} DREQs forged; {checked} CM frames seen, each ICRC as rxe's");
    if forged == 0 {
        return Err(format!("no set connection seen made in {secs} s").into());
    }
    Ok(())
}

/// Sends Ethernet frame `f` (its own source and destination) out of interface `ifindex`.
fn send_frame(fd: i32, ifindex: i32, f: &[u8]) -> Result<()> {
    // SAFETY: plain data.
    let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    to.sll_family = libc::AF_PACKET as u16;
    to.sll_ifindex = ifindex;
    to.sll_halen = 6;
    to.sll_addr[..6].copy_from_slice(&f[..6]);
    // SAFETY: `f` and `to` are live for the call, of the sizes given.
    let n = unsafe {
        libc::sendto(
            fd,
            f.as_ptr().cast(),
            f.len(),
            0,
            (&to as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if n != f.len() as isize {
        return Err(format!("sending a frame: {}", std::io::Error::last_os_error()).into());
    }
    Ok(())
}

/// Accepts a member's dial with an accept that proves no key, and READs at once.
fn impostor(port: u16, secs: u64, read_secs: u64) -> Result<()> {
    let accept = Accept {
        offer: Offer::default(),
        tag: [0; 16],
    };
    let l = Listener::bind(port)?;
    println!("cm-intruder: listening on {port} as an impostor");
    let got = l.impostor(&accept.write(), secs, read_secs)?;
    let asked = Hello::read(&got.request).map_or("no hello".to_string(), |h| {
        format!("{:?} {}", h.kind, h.index)
    });
    println!("cm-intruder: accepted a request ({asked}) with no key's proof; READ at once");
    use rdma_sys::ibv_wc_status::{IBV_WC_REM_ACCESS_ERR, IBV_WC_SUCCESS};
    match got.read {
        Some(s @ (IBV_WC_SUCCESS | IBV_WC_REM_ACCESS_ERR)) => Err(format!(
            "the dialer's QP answered a READ before it checked the accept's proof (status {s})"
        )
        .into()),
        Some(s) => {
            println!("cm-intruder: the READ failed unanswered (status {s})");
            Ok(())
        }
        None => {
            println!("cm-intruder: the dialer's QP never answered the READ in {read_secs} s");
            Ok(())
        }
    }
}

fn main() -> Result<()> {
    match <Cli as clap::Parser>::parse() {
        Cli::Capture { file, secs } => capture(&file, secs),
        Cli::Dreq { secs } => dreq(secs),
        Cli::Knock { addr, port, replay } => knocks(addr, port, replay),
        Cli::Impostor {
            port,
            secs,
            read_secs,
        } => impostor(port, secs, read_secs),
        Cli::Spoof {
            addr,
            port,
            from,
            secs,
        } => spoof(addr, port, from, secs),
        Cli::Hog {
            addr,
            port,
            from,
            keyfile,
            count,
            secs,
        } => hog(addr, port, from, &keyfile, count, secs),
        Cli::Yielder { port, secs } => {
            let n = Listener::bind(port)?.refuse_all(&Refusal::yielding(&[0; 16]), secs)?;
            println!("cm-intruder: refused {n} requests with a yield no key proved");
            if n == 0 {
                return Err("no request came".into());
            }
            Ok(())
        }
    }
}
