//! One-sided RDMA to another node's memory, found by name through the MetaServer.
//!
//! `remote_memory export NAME SECS`: registers 64 KiB with remote access (a pattern at
//! offset 0, a compare-and-swap word at 4096 holding 100, a fetch-and-add word at 4104
//! holding 5), publishes it as NAME (retried while no MetaServer answers), checks that
//! the name cannot be published twice, then waits (up to SECS) for an importer to set
//! the done word at 8192, checks what the importer wrote (a pattern at 12288, the CAS
//! and FAA results) and deregisters the memory, which revokes the name (the DEREG_MR
//! completes once the importing node's kernel answered). A second name, NAME-2 (4 KiB),
//! stays until the importer sets its done word.
//!
//! `remote_memory import ADDR NAME`: CONNECTs to the node at ADDR, imports NAME
//! (retried while it is not published yet), READs the pattern, WRITEs its own, CASes
//! and FAAs the words with their old values checked, READs back what it wrote, sets
//! the done word; prints how long the first (uncached) and later (cached) imports
//! took, and checks the refusals: an unknown name, and the name through a virtual QP
//! that is not connected to its node. Then, once the exporter revoked NAME, its import
//! (cached here) fails `BadDescriptor` and a new IMPORT_NAME `NoSuchName`, while the set
//! stays up: NAME-2 is imported and READ over it, and its done word set.
//!
//! `remote_memory hammer ADDR NAME ROLE`: the failure test (see [`hammer`]).
//! `remote_memory probe ADDR NAME SECS`: import and READ, no more (see [`probe`]).
//! `remote_memory crowd NAME FILL SECS GO` and `remote_memory await-revoke ADDR NAME
//! SECS`: a revocation with the revocations' table full (see [`crowd`]).
//! `remote_memory fenced NAME SECS GO` and `remote_memory breach ADDR NAME SECS`: rights
//! held at the NIC, against a member kernel that checks nothing (see [`fenced`]).
//! `remote_memory churn NAME SECS GO` and `remote_memory stay ADDR NAME SECS`: a set the
//! importing node uses is not evicted for this node's other CONNECTs (see [`churn`]).
//! `remote_memory hold NAME SECS GO` is `churn` with no CONNECT: the importer's READs
//! go on over the set through whatever happens before GO (a forged disconnect request).
#[path = "support/retry.rs"]
mod support;
use std::net::Ipv4Addr;
use std::thread::sleep;
use std::time::{Duration, Instant};
use support::retry;

use krcore_abi::cqe::Reason;
use krcore_abi::sqe::MrAccess;
use krcore_uring::{Batch, Builder, Device, Error, MemoryRegion, RemoteRegion, Ring, Vqp};

const LEN: usize = 64 << 10;
const PATTERN: u64 = 0;
const CAS_WORD: u64 = 4096;
const FAA_WORD: u64 = 4104;
const DONE_WORD: u64 = 8192;
const THEIRS: u64 = 12288;
const DONE: u64 = 0xd0e;
/// Where [`churn`] says its CONNECT was refused, and [`stay`] that its READs went on.
const CHURNED_WORD: u64 = 8200;
const STAYED_WORD: u64 = 8208;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn word(b: &[u8], at: u64) -> u64 {
    let at = at as usize;
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn expect_reason<T>(what: &str, r: std::result::Result<T, Error>, want: Reason) -> Result<()> {
    match r {
        Err(e) if e.reason() == Some(want) => {
            println!("{what}: refused, {want:?}");
            Ok(())
        }
        Err(e) => Err(format!("{what}: {e}, not {want:?}").into()),
        Ok(_) => Err(format!("{what}: succeeded, should fail with {want:?}").into()),
    }
}

/// The name `export` publishes and revokes before `name`.
fn revoked_name(name: &str) -> String {
    format!("{name}-revoked")
}

/// The second name `export` publishes, kept after `name` is revoked.
fn kept_name(name: &str) -> String {
    format!("{name}-2")
}

/// The kept region's pattern byte at `i`, and where its done word is.
fn kept_byte(i: usize) -> u8 {
    (i * 13 + 1) as u8
}
const KEPT_DONE: u64 = 1024;

/// Waits up to `secs` for `mr`'s done word at `at`.
fn wait_done(mr: &mut MemoryRegion, at: u64, secs: u64, what: &str) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(secs);
    while word(mr.bytes(), at) != DONE {
        if Instant::now() > until {
            return Err(format!("no importer finished {what} within {secs} s").into());
        }
        sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn export(ring: &mut Ring, name: &str, secs: u64) -> Result<()> {
    let all = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_ATOMIC;
    let mut mr = ring.register(LEN, all)?;
    {
        let b = mr.bytes_mut();
        for (i, x) in b[..4096].iter_mut().enumerate() {
            *x = (i * 7) as u8;
        }
        b[CAS_WORD as usize..][..8].copy_from_slice(&100u64.to_le_bytes());
        b[FAA_WORD as usize..][..8].copy_from_slice(&5u64.to_le_bytes());
    }
    // A name published and revoked before NAME appears: an importer must be refused it.
    let gone = revoked_name(name);
    let t = Instant::now();
    let short = ring.register(4096, all)?;
    retry(secs, &[Reason::Unreachable], || ring.publish(&short, &gone))?;
    ring.deregister(short)?;
    retry(secs, &[Reason::Unreachable], || ring.publish(&mr, name))?;
    println!(
        "published {gone} and revoked it, then published {name}, in {:?}",
        t.elapsed()
    );
    let other = ring.register(4096, all)?;
    expect_reason(
        "the same name again",
        ring.publish(&other, name),
        Reason::NameTaken,
    )?;
    let local = ring.register(4096, MrAccess::LOCAL_WRITE)?;
    expect_reason(
        "memory without remote access",
        ring.publish(&local, "local-only"),
        Reason::MrAccess,
    )?;
    let mut kept = ring.register(4096, all)?;
    for (i, x) in kept.bytes_mut()[..KEPT_DONE as usize]
        .iter_mut()
        .enumerate()
    {
        *x = kept_byte(i);
    }
    retry(secs, &[Reason::Unreachable], || {
        ring.publish(&kept, &kept_name(name))
    })?;
    wait_done(&mut mr, DONE_WORD, secs, "")?;
    let b = mr.bytes();
    let wrote = (0..4096).all(|i| b[THEIRS as usize + i] == (i * 3) as u8);
    let (cas, faa) = (word(b, CAS_WORD), word(b, FAA_WORD));
    if !wrote || cas != 200 || faa != 1005 {
        return Err(format!("after the importer: its WRITE landed {wrote}, CAS word {cas} (200), FAA word {faa} (1005)").into());
    }
    println!("the importer's WRITE, CAS (100 -> 200) and FAA (5 + 1000) landed here");
    let t = Instant::now();
    ring.deregister(mr)?;
    println!(
        "deregistered: {name} revoked, the importing node's kernel answered in {:?}",
        t.elapsed()
    );
    wait_done(&mut kept, KEPT_DONE, secs, "with the kept name")?;
    ring.deregister(kept)?;
    Ok(())
}

fn import(ring: &mut Ring, addr: Ipv4Addr, name: &str) -> Result<()> {
    let gid = addr.to_ipv6_mapped().octets();
    let v = retry(60, &[Reason::Unreachable], || ring.connect(gid, 0))?;
    let t = Instant::now();
    let remote = retry(60, &[Reason::Unreachable, Reason::NoSuchName], || {
        ring.import_name(&v, name, LEN as u32)
    })?;
    let first = t.elapsed();
    // Each import takes a slot of the ring's imports table (freed by DISCONNECT).
    const CACHED: u32 = 16;
    let t = Instant::now();
    for _ in 0..CACHED {
        let r = ring.import_name(&v, name, LEN as u32)?;
        if r.addr() != remote.addr() {
            return Err("a cached import named another address".into());
        }
    }
    println!(
        "IMPORT_NAME {name} from {addr}: first {first:?} (MetaServer READs), then cached: {:?} each",
        t.elapsed() / CACHED
    );
    expect_reason(
        "an unknown name",
        ring.import_name(&v, "no-such-export", 8),
        Reason::NoSuchName,
    )?;
    expect_reason(
        "a revoked name",
        ring.import_name(&v, &revoked_name(name), 8),
        Reason::NoSuchName,
    )?;
    // A virtual QP connected to this node itself (its pool) does not reach the export.
    let gid = Device::open()?
        .query_devices()?
        .node_gid()
        .ok_or("no IPv4 GID")?;
    let own = ring.connect(gid, 0)?;
    expect_reason(
        "through a QP to another node",
        ring.import_name(&own, name, 8),
        Reason::NotOnPeer,
    )?;

    let mut mine = exercise(ring, &v, &remote)?;
    after_revocation(ring, &v, &mut mine, &remote, name)
}

/// READ the exporter's pattern, WRITE ours, CAS and FAA its words (old values
/// checked), READ back what we wrote, then set its done word. Returns the local region
/// it used.
fn exercise(ring: &mut Ring, v: &Vqp, remote: &RemoteRegion) -> Result<MemoryRegion> {
    let all = MrAccess::LOCAL_WRITE;
    let mut mine = ring.register(16 << 10, all)?;
    for (i, x) in mine.bytes_mut()[4096..8192].iter_mut().enumerate() {
        *x = (i * 3) as u8;
    }
    let mut b = Batch::new();
    b.read(v, &mine, 0, remote, PATTERN, 4096)?
        .write(v, &mine, 4096, remote, THEIRS, 4096)?
        .cas(v, &mine, 8192, remote, CAS_WORD, 100, 200)?
        .faa(v, &mine, 8200, remote, FAA_WORD, 1000)?
        .read(v, &mine, 12288, remote, THEIRS, 4096)?;
    for c in ring.run(b)? {
        c?;
    }
    let got = mine.bytes();
    if !(0..4096).all(|i| got[i] == (i * 7) as u8) {
        return Err("READ did not bring the exporter's pattern".into());
    }
    if (word(got, 8192), word(got, 8200)) != (100, 5) {
        return Err(format!(
            "old values: CAS {} (100), FAA {} (5)",
            word(got, 8192),
            word(got, 8200)
        )
        .into());
    }
    if got[12288..16384] != got[4096..8192] {
        return Err("READ back did not return what WRITE wrote".into());
    }
    println!("READ, WRITE, CAS (old 100), FAA (old 5) and READ back across nodes: bytes checked");
    mine.bytes_mut()[0..8].copy_from_slice(&DONE.to_le_bytes());
    let mut b = Batch::new();
    b.write(v, &mine, 0, remote, DONE_WORD, 8)?;
    for c in ring.run(b)? {
        c?;
    }
    Ok(mine)
}

/// The exporter revokes `name` once its done word is set: the import fails by name
/// from then on, a new one is refused, and the set stays up for its other name.
fn after_revocation(
    ring: &mut Ring,
    v: &Vqp,
    mine: &mut MemoryRegion,
    remote: &RemoteRegion,
    name: &str,
) -> Result<()> {
    let t = Instant::now();
    loop {
        let mut b = Batch::new();
        b.read(v, mine, 0, remote, PATTERN, 8)?;
        match ring.run(b)?.remove(0) {
            Ok(_) if t.elapsed() < Duration::from_secs(60) => sleep(Duration::from_millis(20)),
            Ok(_) => return Err(format!("{name}: still readable 60 s after the done word").into()),
            Err(e) if e.reason() == Some(Reason::BadDescriptor) => break,
            Err(e) => {
                return Err(format!("{name} after its revocation: {e}, not BadDescriptor").into())
            }
        }
    }
    println!(
        "{name} revoked by its exporter: this node's import of it fails BadDescriptor ({:?} after the done word)",
        t.elapsed()
    );
    // A lookup that read the record while the MetaServer's entry was being rewritten
    // (torn) fails Busy: read again.
    expect_reason(
        "IMPORT_NAME of the revoked name",
        retry(5, &[Reason::Busy], || ring.import_name(v, name, 0)),
        Reason::NoSuchName,
    )?;
    // The set is up: nothing stale reached the exporter's dead rkey.
    let kept = retry(60, &[Reason::NoSuchName], || {
        ring.import_name(v, &kept_name(name), 4096)
    })?;
    let mut b = Batch::new();
    b.read(v, mine, 0, &kept, 0, 64)?;
    ring.run(b)?.remove(0)?;
    if (0..64).any(|i| mine.bytes()[i] != kept_byte(i)) {
        return Err("the kept name's bytes differ".into());
    }
    mine.bytes_mut()[0..8].copy_from_slice(&DONE.to_le_bytes());
    let mut b = Batch::new();
    b.write(v, mine, 0, &kept, KEPT_DONE, 8)?;
    ring.run(b)?.remove(0)?;
    println!(
        "the set stayed up: {} imported and READ over it",
        kept_name(name)
    );
    Ok(())
}

/// Keeps 12 READs in flight to NAME at ADDR; after a while has the test runner kill
/// ROLE's guest (the exporter) and checks that the requests then in flight fail,
/// every one with a completion, within the bound; has ROLE booted again, and
/// connects, imports and READs anew once it is back.
fn hammer(ring: &mut Ring, addr: Ipv4Addr, name: &str, role: &str) -> Result<()> {
    let gid = addr.to_ipv6_mapped().octets();
    let v = retry(60, &[Reason::Unreachable], || ring.connect(gid, 0))?;
    let remote = retry(60, &[Reason::Unreachable, Reason::NoSuchName], || {
        ring.import_name(&v, name, LEN as u32)
    })?;
    let mine = ring.register(LEN, MrAccess::LOCAL_WRITE)?;
    let mut killed: Option<Instant> = None;
    for round in 0.. {
        let mut b = Batch::new();
        for k in 0..12u64 {
            b.read(&v, &mine, k * 4096, &remote, (k % 4) * 4096, 4096)?;
        }
        let got = ring.run(b)?;
        let failed: Vec<_> = got.iter().filter_map(|c| c.as_ref().err()).collect();
        if let (Some(at), Some(e)) = (killed, failed.first()) {
            println!(
                "{} s after the kill: {} of 12 READs in flight failed ({:?}), every one completed",
                at.elapsed().as_secs_f32(),
                failed.len(),
                e.reason()
            );
            break;
        }
        if !failed.is_empty() {
            return Err(format!("READs failed before the kill: {:?}", failed[0]).into());
        }
        match killed {
            None if round == 20 => {
                println!("KRCORE-CLUSTER: kill {role}");
                killed = Some(Instant::now());
            }
            Some(at) if at.elapsed() > Duration::from_secs(120) => {
                return Err("READs to a killed node still succeed after 120 s".into());
            }
            _ => {}
        }
    }
    println!("KRCORE-CLUSTER: boot {role}");
    let _ = ring.disconnect(v);
    // Back: a new set to it (the old one broke), the name resolved again (the node's
    // new incarnation: what was cached of the old one is gone).
    let v = retry(
        180,
        &[Reason::Unreachable, Reason::QpError, Reason::Deadline],
        || ring.connect(gid, 0),
    )?;
    let remote = retry(120, &[Reason::Unreachable, Reason::NoSuchName], || {
        ring.import_name(&v, name, LEN as u32)
    })?;
    let mut mine = exercise(ring, &v, &remote)?;
    println!("{role} back: connected, imported and used its memory again");
    after_revocation(ring, &v, &mut mine, &remote, name)
}

/// Connects to ADDR and imports NAME, retrying while the node, the MetaServer or the
/// name is not there yet, for up to SECS; READs its pattern. Exits 3 when it ends
/// `Unreachable` (the failover test expects that while the MetaServer is down).
fn probe(ring: &mut Ring, addr: Ipv4Addr, name: &str, secs: u64) -> Result<()> {
    let gid = addr.to_ipv6_mapped().octets();
    let t = Instant::now();
    let found = retry(secs, &[Reason::Unreachable], || ring.connect(gid, 0)).and_then(|v| {
        let r = retry(secs, &[Reason::Unreachable, Reason::NoSuchName], || {
            ring.import_name(&v, name, LEN as u32)
        })?;
        Ok((v, r))
    });
    let (v, remote) = match found {
        Ok(x) => x,
        Err(e) => {
            let unreachable = e.reason() == Some(Reason::Unreachable);
            println!("{name} at {addr}: not found after {:?}: {e}", t.elapsed());
            std::process::exit(if unreachable { 3 } else { 1 });
        }
    };
    let mine = ring.register(4096, MrAccess::LOCAL_WRITE)?;
    let mut b = Batch::new();
    b.read(&v, &mine, 0, &remote, PATTERN, 4096)?;
    for c in ring.run(b)? {
        c?;
    }
    let mut mine = mine;
    if !(0..4096).all(|i| mine.bytes()[i] == (i * 7) as u8) {
        return Err("READ did not bring the exporter's pattern".into());
    }
    println!(
        "{name} at {addr}: imported and READ after {:?}",
        t.elapsed()
    );
    Ok(())
}

/// Publishes NAME (the pattern) and, on a second ring, FILL more names; waits for an
/// importer to set NAME's done word, then for the file GO (the caller has killed a
/// third node with a set to this one meanwhile, so no revocation it is told of is ever
/// answered from there); then closes the second ring, whose FILL revocations wait for
/// that node until the deadline, and at once deregisters NAME. With the table full,
/// the DEREG_MR must wait for room and revoke NAME at the importer like any other,
/// never deregister it untold: the importer ([`await_revoke`]) then finds its import
/// dead (`BadDescriptor`), never failing on the wire.
fn crowd(ring: &mut Ring, name: &str, fill: usize, secs: u64, go: &str) -> Result<()> {
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let mut mr = ring.register(LEN, all)?;
    for (i, x) in mr.bytes_mut()[..4096].iter_mut().enumerate() {
        *x = (i * 7) as u8;
    }
    retry(secs, &[Reason::Unreachable], || ring.publish(&mr, name))?;
    let mut fillers = Builder::new(64).build(Device::open()?)?;
    let mut held = Vec::with_capacity(fill);
    for i in 0..fill {
        let r = fillers.register(4096, all)?;
        retry(secs, &[Reason::Unreachable], || {
            fillers.publish(&r, &format!("{name}-fill-{i}"))
        })?;
        held.push(r);
    }
    wait_done(&mut mr, DONE_WORD, secs, "")?;
    println!("crowd: {name} and {fill} more published, {name} imported");
    wait_file(go, secs)?;
    // Closing the ring revokes its exports at once: the fillers' revocations take the
    // table (each waits for the killed node). Its regions go after, with the ring.
    drop(fillers);
    drop(held);
    sleep(Duration::from_millis(300));
    let t = Instant::now();
    ring.deregister(mr)?;
    println!(
        "crowd: {name} deregistered {:?} after {fill} revocations began (the table full)",
        t.elapsed()
    );
    Ok(())
}

/// Waits up to `secs` for the file `go` (the caller's word).
fn wait_file(go: &str, secs: u64) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(secs);
    while !std::path::Path::new(go).exists() {
        if Instant::now() > until {
            return Err(format!("no {go} within {secs} s").into());
        }
        sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// The importer of [`crowd`]: imports NAME, READs it, sets its done word, then READs
/// until a READ fails, which must fail `BadDescriptor` (revoked here first), not on
/// the wire.
fn await_revoke(ring: &mut Ring, addr: Ipv4Addr, name: &str, secs: u64) -> Result<()> {
    let gid = addr.to_ipv6_mapped().octets();
    let v = retry(secs, &[Reason::Unreachable], || ring.connect(gid, 0))?;
    let remote = retry(secs, &[Reason::Unreachable, Reason::NoSuchName], || {
        ring.import_name(&v, name, LEN as u32)
    })?;
    let mut mine = ring.register(4096, MrAccess::LOCAL_WRITE)?;
    mine.bytes_mut()[..8].copy_from_slice(&DONE.to_le_bytes());
    let mut b = Batch::new();
    b.write(&v, &mine, 0, &remote, DONE_WORD, 8)?;
    for c in ring.run(b)? {
        c?;
    }
    let until = Instant::now() + Duration::from_secs(secs);
    let mut reads = 0u64;
    loop {
        let mut b = Batch::new();
        b.read(&v, &mine, 0, &remote, PATTERN, 64)?;
        match ring.run(b)?.remove(0) {
            Ok(_) => reads += 1,
            Err(e) if e.reason() == Some(Reason::BadDescriptor) => {
                println!("await-revoke: after {reads} READs, {name} revoked here: BadDescriptor");
                return Ok(());
            }
            Err(e) => {
                return Err(format!("a READ of the revoked {name} failed otherwise: {e}").into())
            }
        }
        if Instant::now() > until {
            return Err(format!("{name} still READ after {secs} s").into());
        }
        sleep(Duration::from_millis(20));
    }
}

/// Bytes of the read-only export of [`fenced`]: the hidden region's address and rkey,
/// then a pattern.
const FENCED_LEN: usize = 8192;

/// The rkey the kernel logged for the registration at `addr` (the test-only
/// `test_unchecked_wire` logs them; a user never sees one).
fn logged_rkey(addr: u64) -> Result<u32> {
    let line = logged(&format!("krcore: test: MR {addr:#x} "))?;
    let hex = line.rsplit("rkey 0x").next().unwrap_or("");
    Ok(u32::from_str_radix(hex.trim(), 16)?)
}

/// The MetaServer's region, as this kernel (`test_unchecked_wire`) logged it when it
/// connected: its base and rkey.
fn logged_region() -> Result<(u64, u32)> {
    let line = logged("krcore: test: MetaServer region 0x")?;
    let mut words = line
        .rsplit("region 0x")
        .next()
        .unwrap_or("")
        .split(" rkey 0x");
    let base = u64::from_str_radix(words.next().unwrap_or("").trim(), 16)?;
    let rkey = u32::from_str_radix(words.next().unwrap_or("").trim(), 16)?;
    Ok((base, rkey))
}

/// This load's kernel log (from its "serving the MetaServer") says a member's SEND
/// closed a key and was dropped, and then that the region was keyed anew.
fn closed_and_keyed_anew() -> Result<()> {
    let log = std::process::Command::new("dmesg").output()?;
    let log = String::from_utf8_lossy(&log.stdout);
    let lines: Vec<&str> = log.lines().collect();
    let from = lines
        .iter()
        .rposition(|l| l.contains("serving the MetaServer"))
        .ok_or("this node does not serve the MetaServer")?;
    let dropped = lines[from..]
        .iter()
        .position(|l| {
            l.contains("dropped a MetaServer connection") && l.contains("invalidated a key")
        })
        .ok_or("no member's SEND that closed a key was seen")?;
    lines[from + dropped..]
        .iter()
        .find(|l| l.contains("MetaServer's region was keyed anew"))
        .ok_or("the region was not keyed anew after a member closed its key")?;
    println!("fenced: a member's SEND closed the region's key; it was dropped, and the region keyed anew");
    Ok(())
}

/// The kernel log's last line holding `needle` (test_unchecked_wire logs keys).
fn logged(needle: &str) -> Result<String> {
    let log = std::process::Command::new("dmesg").output()?;
    String::from_utf8_lossy(&log.stdout)
        .lines()
        .rev()
        .find(|l| l.contains(needle))
        .map(str::to_owned)
        .ok_or_else(|| {
            format!("no `{needle}` in the kernel log (test_unchecked_wire not set?)").into()
        })
}

/// The exporter of a test of rights held by the NIC (both modules loaded with the
/// test-only `test_unchecked_wire`): publishes 8 KiB as NAME, readable only, and
/// registers 4 KiB (locally writable, as a receive buffer is) that is never exported;
/// writes that region's address and rkey into NAME's first 16 bytes, for the importer
/// ([`breach`]) to aim at. Once GO exists (the importer is done), neither region may
/// have changed.
fn fenced(ring: &mut Ring, name: &str, secs: u64, go: &str) -> Result<()> {
    let mut ro = ring.register(FENCED_LEN, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ)?;
    let mut hidden = ring.register(4096, MrAccess::LOCAL_WRITE)?;
    hidden.bytes_mut().fill(0x5a);
    let rkey = logged_rkey(hidden.addr())?;
    {
        let b = ro.bytes_mut();
        for (i, x) in b.iter_mut().enumerate() {
            *x = (i * 7) as u8;
        }
        b[..8].copy_from_slice(&hidden.addr().to_le_bytes());
        b[8..16].copy_from_slice(&u64::from(rkey).to_le_bytes());
    }
    let want = ro.bytes().to_vec();
    retry(secs, &[Reason::Unreachable], || ring.publish(&ro, name))?;
    println!(
        "fenced: {name} published read-only; 4 KiB at {:#x} (rkey {rkey:#x}) not exported",
        hidden.addr()
    );
    let until = Instant::now() + Duration::from_secs(secs);
    while !std::path::Path::new(go).exists() {
        if Instant::now() > until {
            return Err(format!("no {go} within {secs} s").into());
        }
        sleep(Duration::from_millis(100));
    }
    if ro.bytes() != &want[..] {
        return Err(format!("the read-only {name} was written").into());
    }
    if hidden.bytes().iter().any(|&x| x != 0x5a) {
        return Err("the memory that was never exported was written".into());
    }
    closed_and_keyed_anew()?;
    println!("fenced: after the importer's WRITEs, {name} and the hidden memory are unchanged");
    Ok(())
}

/// Sets a module parameter (root).
fn set_param(name: &str, value: u64) -> Result<()> {
    std::fs::write(
        format!("/sys/module/krcore/parameters/{name}"),
        value.to_string(),
    )?;
    Ok(())
}

/// The importer of [`fenced`], on a kernel that checks nothing (`test_unchecked_wire`):
/// READs NAME (allowed), then WRITEs into it, then into the memory that was never
/// exported, with that memory's own rkey, then into the MetaServer's region (on the
/// same node), with the region's rkey. The exporting node's NIC must refuse all three
/// (each failing the set, made again for the next). Then it closes the region's key
/// with a request SENT with an invalidation: the MetaServer must key the region anew,
/// so the import works again.
fn breach(ring: &mut Ring, addr: Ipv4Addr, name: &str, secs: u64) -> Result<()> {
    let gid = addr.to_ipv6_mapped().octets();
    let mut mine = ring.register(4096, MrAccess::LOCAL_WRITE)?;
    let mut target = None;
    // Logged when this kernel connected to the MetaServer (its first import at the
    // latest). Aimed at node slot 1023: no node's, so a WRITE that landed harms none.
    let (mut region, mut region_rkey) = (0, 0);
    for round in 0..3 {
        // A refused WRITE fails the set's QP: a new set (another port pair, the first's
        // virtual QP still holding its own), and the import again.
        let v = retry(
            secs,
            &[Reason::Unreachable, Reason::QpError, Reason::PeerGone],
            || ring.pair(gid, 100 + round as u16, 100 + round as u16),
        )?;
        let remote = retry(secs, &[Reason::Unreachable, Reason::NoSuchName], || {
            ring.import_name(&v, name, FENCED_LEN as u32)
        })?;
        // Throttled while the failed set's QPs are recovered.
        retry(secs, &[Reason::Throttled], || {
            let mut b = Batch::new();
            b.read(&v, &mine, 0, &remote, 0, 64)?;
            ring.run(b)?.remove(0)
        })?;
        let (hidden, rkey) = (word(mine.bytes(), 0), word(mine.bytes(), 8));
        match round {
            0 => println!("breach: READ {name}, read-only: the hidden memory is at {hidden:#x}, rkey {rkey:#x}"),
            1 => {
                target = Some((hidden, rkey));
                set_param("test_wire_addr", hidden)?;
                set_param("test_wire_rkey", rkey)?;
            }
            _ => {
                (region, region_rkey) = logged_region()?;
                set_param("test_wire_addr", region + 1023 * 64)?;
                set_param("test_wire_rkey", region_rkey.into())?;
            }
        }
        mine.bytes_mut().fill(0xee);
        let what = match round {
            0 => format!("a WRITE into the read-only {name}"),
            1 => "a WRITE into memory never exported, with its own rkey".to_owned(),
            _ => format!(
                "a WRITE into the MetaServer's region at {:#x}, with its rkey {region_rkey:#x}",
                region + 1023 * 64
            ),
        };
        let mut b = Batch::new();
        b.write(&v, &mine, 0, &remote, 64, 64)?;
        let r = ring.run(b)?.remove(0);
        set_param("test_wire_rkey", 0)?;
        expect_reason(&what, r, Reason::RemoteError)?;
    }
    let (hidden, rkey) = target.expect("round 1");
    println!("breach: all three refused by the exporter's NIC (the hidden memory at {hidden:#x}, rkey {rkey:#x}; the region at {region:#x}, rkey {region_rkey:#x})");
    // Every member knows the region's rkey: a request SENT with an invalidation of it
    // closes it at the MetaServer's NIC. The MetaServer drops the connection that did
    // it and keys the region anew; lookups (this one uncached: the sets that failed
    // above dropped what was cached) work again.
    set_param("test_meta_inv", region_rkey.into())?;
    let bait = ring.register(4096, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ)?;
    let r = ring.publish(&bait, "breach-inv");
    println!(
        "breach: a request closing the region's key: {}",
        if r.is_ok() {
            "answered".into()
        } else {
            format!("{:?}", r.err())
        }
    );
    let left = std::fs::read_to_string("/sys/module/krcore/parameters/test_meta_inv")?;
    if left.trim() != "0" {
        return Err("no request carried the invalidation (test_meta_inv left set)".into());
    }
    let v = retry(
        secs,
        &[Reason::Unreachable, Reason::QpError, Reason::PeerGone],
        || ring.connect(gid, 0),
    )?;
    retry(
        secs,
        &[Reason::Unreachable, Reason::NoSuchName, Reason::Busy],
        || ring.import_name(&v, name, FENCED_LEN as u32),
    )?;
    println!("breach: {name} imported again after the region's key was closed");
    Ok(())
}

/// The node at `addr` as a CONNECT names it.
fn gid(addr: Ipv4Addr) -> [u8; 16] {
    addr.to_ipv6_mapped().octets()
}

/// Publishes NAME and waits for an importer ([`stay`]) to set its done word, then for
/// the file GO (the caller saw the importer's use of the set in the peers file). This
/// node's peer table (module parameter `max_peers=1`) then holds one set, which only
/// the importing node's virtual QPs are bound to. A CONNECT to a node this one has no
/// set with must not evict it for the new node: it fails `TableFull`, and the
/// importer's READs go on. Says so in the churned word, then waits for the importer's.
/// Without `connect` (`hold`), only the waits.
fn churn(ring: &mut Ring, name: &str, secs: u64, go: &str, connect: bool) -> Result<()> {
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let mut mr = ring.register(LEN, all)?;
    for (i, x) in mr.bytes_mut()[..4096].iter_mut().enumerate() {
        *x = (i * 7) as u8;
    }
    retry(secs, &[Reason::Unreachable], || ring.publish(&mr, name))?;
    wait_done(&mut mr, DONE_WORD, secs, "")?;
    println!("churn: {name} imported");
    wait_file(go, secs)?;
    if connect {
        // An address in the cluster that no node answers at.
        let nobody = Ipv4Addr::new(192, 0, 2, 250);
        expect_reason(
            "a CONNECT to a new node, the one set held by the other node's importer",
            ring.connect(gid(nobody), 0),
            Reason::TableFull,
        )?;
    }
    mr.bytes_mut()[CHURNED_WORD as usize..][..8].copy_from_slice(&DONE.to_le_bytes());
    wait_done(&mut mr, STAYED_WORD, secs, "READs after the churn")?;
    println!("churn: the set the importer uses stayed up");
    Ok(())
}

/// The importer of [`churn`]: imports NAME, sets its done word, and READs until the
/// exporter's churned word is set, then the pattern once more: every READ must succeed
/// (the exporter kept the set), and it says so in the stayed word.
fn stay(ring: &mut Ring, addr: Ipv4Addr, name: &str, secs: u64) -> Result<()> {
    let v = retry(secs, &[Reason::Unreachable], || ring.connect(gid(addr), 0))?;
    let remote = retry(secs, &[Reason::Unreachable, Reason::NoSuchName], || {
        ring.import_name(&v, name, LEN as u32)
    })?;
    let mut mine = ring.register(4096, MrAccess::LOCAL_WRITE)?;
    let write_word = |ring: &mut Ring, mine: &mut MemoryRegion, at: u64| -> Result<()> {
        mine.bytes_mut()[..8].copy_from_slice(&DONE.to_le_bytes());
        let mut b = Batch::new();
        b.write(&v, mine, 0, &remote, at, 8)?;
        for c in ring.run(b)? {
            c?;
        }
        Ok(())
    };
    write_word(ring, &mut mine, DONE_WORD)?;
    let until = Instant::now() + Duration::from_secs(secs);
    let mut reads = 0u64;
    loop {
        let mut b = Batch::new();
        b.read(&v, &mine, 8, &remote, CHURNED_WORD, 8)?;
        for c in ring.run(b)? {
            c.map_err(|e| format!("a READ after {reads}, while the exporter churned: {e}"))?;
        }
        reads += 1;
        if word(mine.bytes(), 8) == DONE {
            break;
        }
        if Instant::now() > until {
            return Err(format!("no churn from {addr} within {secs} s").into());
        }
        sleep(Duration::from_millis(20));
    }
    let mut b = Batch::new();
    b.read(&v, &mine, 64, &remote, PATTERN, 64)?;
    for c in ring.run(b)? {
        c?;
    }
    if (0..64).any(|i| mine.bytes()[64 + i] != (i * 7) as u8) {
        return Err("the pattern READ after the churn is not the exporter's".into());
    }
    write_word(ring, &mut mine, STAYED_WORD)?;
    println!("stay: {reads} READs through the exporter's churn, all answered");
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: remote_memory export NAME SECS | import ADDR NAME | hammer ADDR NAME ROLE | probe ADDR NAME SECS | crowd NAME FILL SECS GO | await-revoke ADDR NAME SECS | fenced NAME SECS GO | breach ADDR NAME SECS | churn NAME SECS GO | hold NAME SECS GO | stay ADDR NAME SECS";
    let mut ring = Builder::new(64).build(Device::open()?)?;
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["export", name, secs] => export(&mut ring, name, secs.parse()?),
        ["import", addr, name] => import(&mut ring, addr.parse()?, name),
        ["hammer", addr, name, role] => hammer(&mut ring, addr.parse()?, name, role),
        ["probe", addr, name, secs] => probe(&mut ring, addr.parse()?, name, secs.parse()?),
        ["crowd", name, fill, secs, go] => crowd(&mut ring, name, fill.parse()?, secs.parse()?, go),
        ["await-revoke", addr, name, secs] => {
            await_revoke(&mut ring, addr.parse()?, name, secs.parse()?)
        }
        ["fenced", name, secs, go] => fenced(&mut ring, name, secs.parse()?, go),
        ["breach", addr, name, secs] => breach(&mut ring, addr.parse()?, name, secs.parse()?),
        ["churn", name, secs, go] => churn(&mut ring, name, secs.parse()?, go, true),
        ["hold", name, secs, go] => churn(&mut ring, name, secs.parse()?, go, false),
        ["stay", addr, name, secs] => stay(&mut ring, addr.parse()?, name, secs.parse()?),
        _ => Err(usage.into()),
    }
}
