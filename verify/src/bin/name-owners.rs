//! Names have owners across nodes: what each class of user gets of a published name.
//!
//! `name-owners hold NAME SECS`, as the owner: registers 4 KiB with every remote right,
//! publishes it as NAME with mode 0640 (the owner reads and writes, its group reads)
//! and as NAME-p with no mode (the owner's alone), then waits up to SECS for the owner
//! (on another node) to set the done word.
//!
//! `name-owners check ADDR NAME CLASS OWNER`, on another node, run as the owner, as a user of
//! the owner's group, or as another user (CLASS `owner`, `group`, `other`), CONNECTs
//! to ADDR (the holder's node) and checks what this user gets, each by name:
//! - owner: NAME and NAME-p, READ and WRITE; NAME expecting this uid as its owner;
//!   NAME-p by name alone (`connect_name_owned`: no address), READ; last, sets the done word;
//! - group: NAME by a plain lookup (naming no owner) `WrongOwner`: another user's name
//!   is not taken for it; NAME naming its owner (`OWNER`, the holder's uid), READ but
//!   no WRITE (`MrAccess`, refused before the wire); NAME-p `NotPermitted`; NAME
//!   expecting this uid as its owner `WrongOwner`, through a virtual QP or by name
//!   alone (`connect_name_owned`); publishing NAME itself `NameTaken` (a name held is
//!   not taken);
//! - other: NAME and NAME-p `NotPermitted`, and where NAME lives too.
//!
//! `name-owners fill PREFIX EXPECT HOLD`, as some user, publishes one 4 KiB region as
//! PREFIX-0, PREFIX-1, ... one name for each word of EXPECT (comma-separated: `ok` or a
//! reason's name, e.g. `ok,ok,quota`), checks each outcome, prints `filled PREFIX`, and
//! keeps its names until the file HOLD exists (at most 120 s): the shares of names per
//! user and per node, tried while other users hold theirs.
//!
//! Exits 1 at the first difference, saying what it got.
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use krcore_abi::cqe::Reason;
use krcore_abi::sqe::MrAccess;
use krcore_uring::{Batch, Builder, Device, Error, Registered, RemoteRegion, Ring, Vqp};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const LEN: usize = 4096;
const DONE_WORD: u64 = 1024;
const DONE: u64 = 0xd0e;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut ring = Builder::new(16).build(Device::open()?)?;
    match args[..] {
        ["hold", name, secs] => hold(&mut ring, name, Duration::from_secs(secs.parse()?)),
        ["check", addr, name, class, owner] => check(&mut ring, addr.parse()?, name, class, owner.parse()?),
        ["fill", prefix, expect, hold] => fill(&mut ring, prefix, expect, hold),
        _ => Err("usage: name-owners hold NAME SECS | check ADDR NAME owner|group|other OWNER_UID | fill PREFIX EXPECT HOLD".into()),
    }
}

/// Retries `f` for up to 60 s while it fails for one of `passing`.
fn retry<T>(
    passing: &[Reason],
    mut f: impl FnMut() -> std::result::Result<T, Error>,
) -> std::result::Result<T, Error> {
    let t = Instant::now();
    loop {
        match f() {
            Err(e)
                if e.reason().is_some_and(|r| passing.contains(&r))
                    && t.elapsed().as_secs() < 60 =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

fn hold(ring: &mut Ring, name: &str, secs: Duration) -> Result<()> {
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let mut mr = ring.register(LEN, all)?;
    let private = ring.register(LEN, all)?;
    retry(&[Reason::Unreachable], || {
        ring.publish_mode(&mr, name, 0o640)
    })?;
    ring.publish(&private, &format!("{name}-p"))?;
    println!(
        "published {name} (0640) and {name}-p (0600) as uid {}",
        uid()
    );
    let t = Instant::now();
    while t.elapsed() < secs {
        let b = mr.bytes();
        let at = DONE_WORD as usize;
        if u64::from_le_bytes(b[at..at + 8].try_into()?) == DONE {
            println!("the owner on another node set the done word");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("no done word from the owner in {secs:?}").into())
}

fn fill(ring: &mut Ring, prefix: &str, expect: &str, hold: &str) -> Result<()> {
    let mr = ring.register(LEN, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ)?;
    for (i, want) in expect.split(',').enumerate() {
        let name = format!("{prefix}-{i}");
        let got = outcome(retry(&[Reason::Unreachable], || ring.publish(&mr, &name)));
        let got = got.map_or("ok", Reason::name);
        println!("uid {}: publishing {name}: {got}", uid());
        if got != want {
            return Err(
                format!("publishing {name} as uid {} ended {got}, not {want}", uid()).into(),
            );
        }
    }
    println!("filled {prefix}");
    let t = Instant::now();
    while !std::path::Path::new(hold).exists() && t.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// This process's uid.
fn uid() -> u32 {
    // SAFETY: getuid never fails.
    unsafe { libc::getuid() }
}

/// What an operation ended with: `None` for success, else its reason.
fn outcome<T>(r: std::result::Result<T, Error>) -> Option<Reason> {
    r.err().map(|e| {
        if e.reason().is_none() {
            eprintln!("name-owners: {e}");
        }
        e.reason().unwrap_or(Reason::Verbs)
    })
}

/// One READ (`write` false) or WRITE of 64 bytes between `local` and `remote` at `off`.
fn io(
    ring: &mut Ring,
    vqp: &Vqp,
    local: &Registered<'_>,
    remote: &RemoteRegion,
    off: u64,
    write: bool,
) -> std::result::Result<(), Error> {
    let mut b = Batch::new();
    if write {
        b.write(vqp, local, 0, remote, off, 64)?;
    } else {
        b.read(vqp, local, 0, remote, off, 64)?;
    }
    ring.run(b)?.into_iter().try_for_each(|c| c.map(|_| ()))
}

fn check(ring: &mut Ring, addr: Ipv4Addr, name: &str, class: &str, owner: u32) -> Result<()> {
    let vqp = retry(&[Reason::Unreachable], || {
        ring.connect(addr.to_ipv6_mapped().octets(), 0)
    })?;
    let mut local = ring.register(LEN, MrAccess::LOCAL_WRITE)?;
    let private = format!("{name}-p");
    // NAME is there once the holder published it (named as its owner's: a plain
    // lookup takes only this user's or root's).
    let first = retry(&[Reason::Unreachable, Reason::NoSuchName], || {
        ring.import_name_owned(&vqp, name, LEN as u32, owner)
    });
    let me = uid();
    let got = |what: &str, want: Option<Reason>, r: Option<Reason>| -> Result<()> {
        if r == want {
            println!(
                "{class} (uid {me}): {what}: {}",
                want.map_or("done".to_owned(), |w| format!("{w:?}"))
            );
            Ok(())
        } else {
            Err(format!("{class} (uid {me}): {what}: got {r:?}, want {want:?}").into())
        }
    };
    let read_write = |ring: &mut Ring, n: &str| -> std::result::Result<RemoteRegion, Error> {
        let r = ring.import_name(&vqp, n, LEN as u32)?;
        io(ring, &vqp, &local, &r, 0, false)?;
        io(ring, &vqp, &local, &r, 64, true)?;
        Ok(r)
    };
    match class {
        "owner" => {
            got(
                "NAME, read and write",
                None,
                outcome(read_write(ring, name)),
            )?;
            got(
                "NAME-p, read and write",
                None,
                outcome(read_write(ring, &private)),
            )?;
            let r = ring.import_name_owned(&vqp, name, LEN as u32, me);
            let why = r
                .as_ref()
                .err()
                .map(|e| e.reason().unwrap_or(Reason::Verbs));
            got("NAME as its owner's", None, why)?;
            // By name alone: no address given, the kernel finds the node (and the
            // name is checked as its owner's).
            let (v2, r2) = ring.connect_name_owned(&private, LEN as u32, me)?;
            got(
                "NAME-p by name alone, read",
                None,
                outcome(io(ring, &v2, &local, &r2, 0, false)),
            )?;
            if ring.resolve_name(name)? != addr {
                return Err(format!("{name} resolved to another node than {addr}").into());
            }
            let r = r?;
            local.bytes_mut()[..8].copy_from_slice(&DONE.to_le_bytes());
            let mut b = Batch::new();
            b.write(&vqp, &local, 0, &r, DONE_WORD, 8)?;
            ring.run(b)?.into_iter().try_for_each(|c| c.map(|_| ()))?;
        }
        "group" => {
            let r = first?;
            got(
                "NAME by a plain lookup",
                Some(Reason::WrongOwner),
                outcome(ring.import_name(&vqp, name, LEN as u32)),
            )?;
            got(
                "NAME, read",
                None,
                outcome(io(ring, &vqp, &local, &r, 0, false)),
            )?;
            got(
                "NAME, write",
                Some(Reason::MrAccess),
                outcome(io(ring, &vqp, &local, &r, 64, true)),
            )?;
            got(
                "NAME-p",
                Some(Reason::NotPermitted),
                outcome(ring.import_name(&vqp, &private, LEN as u32)),
            )?;
            got(
                "NAME expected as its own",
                Some(Reason::WrongOwner),
                outcome(ring.import_name_owned(&vqp, name, LEN as u32, me)),
            )?;
            got(
                "NAME by name alone, expected as its own",
                Some(Reason::WrongOwner),
                outcome(ring.connect_name_owned(name, LEN as u32, me)),
            )?;
            let mine = ring.register(LEN, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ)?;
            got(
                "publishing NAME itself",
                Some(Reason::NameTaken),
                outcome(ring.publish(&mine, name)),
            )?;
        }
        "other" => {
            got("NAME", Some(Reason::NotPermitted), outcome(first))?;
            got(
                "where NAME lives",
                Some(Reason::NotPermitted),
                outcome(ring.resolve_name(name)),
            )?;
            got(
                "NAME-p",
                Some(Reason::NotPermitted),
                outcome(ring.import_name(&vqp, &private, LEN as u32)),
            )?;
        }
        _ => return Err(format!("no class {class}: owner, group or other").into()),
    }
    Ok(())
}
