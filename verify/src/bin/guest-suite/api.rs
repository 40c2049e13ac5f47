//! uring-lib's safe API against the real module: batches, reasons, the example.

use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Batch, Builder, Device, Vqp};

use crate::datapath::LOCAL_GID;
use crate::harness::{check, fails_as, sh};

pub fn safe_batches_and_reasons() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut ring = Builder::new(8).build(dev).map_err(|e| e.to_string())?;
    let vqp = ring.pair(LOCAL_GID, 3, 3).map_err(|e| e.to_string())?;
    // One user's pairs on one four-tuple of this node pair in order (`Ring::pair`'s
    // doc): a second pair(3, 3) is the first's other end, a third and a fourth make a
    // link of their own.
    let other = ring.pair(LOCAL_GID, 3, 3).map_err(|e| e.to_string())?;
    for _ in 0..2 {
        let v = ring
            .pair(LOCAL_GID, 3, 3)
            .map_err(|e| format!("a further pair(3, 3): {e}"))?;
        ring.disconnect(v).map_err(|e| e.to_string())?;
    }
    let access = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_ATOMIC;
    let mut mr = ring.register(8192, access).map_err(|e| e.to_string())?;
    for (i, b) in mr.bytes_mut()[..4096].iter_mut().enumerate() {
        *b = i as u8;
    }
    // Imported smaller than the region: the kernel must refuse beyond it.
    let mut d = mr
        .export()
        .ok_or("no descriptor for a region with remote rights")?;
    d.len = 4096;
    let remote = ring.import(&vqp, &d).map_err(|e| e.to_string())?;
    // A raw entry in flight meanwhile: its completion must not be lost.
    // SAFETY: a NOP names no memory.
    unsafe { ring.submission().push(&Sqe::nop(77)) }.map_err(|e| e.to_string())?;
    let mut b = Batch::new();
    for k in 0..20u64 {
        // 20 reads of 64 B: more than the SQ holds, so the batch is fed in parts.
        b.read(&vqp, &mr, 4096 + k * 64, &remote, k * 64, 64)
            .map_err(|e| e.to_string())?;
    }
    let out = ring.run(b).map_err(|e| e.to_string())?;
    check(
        out.len() == 20 && out.iter().all(|c| c.as_ref().is_ok_and(|c| c.res == 64)),
        || format!("{out:?}"),
    )?;
    let bytes = mr.bytes();
    check(bytes[4096..4096 + 1280] == bytes[..1280], || {
        "READ data differs".into()
    })?;
    let raw: Vec<u64> = ring.completions().map(|c| c.user_data).collect();
    check(raw == [77], || {
        format!("raw completion lost or duplicated: {raw:?}")
    })?;
    // The library checks ranges before submitting (the kernel's own check is tested in
    // datapath).
    check(
        Batch::new().read(&vqp, &mr, 0, &remote, 4090, 8).is_err(),
        || "out-of-range read built".into(),
    )?;
    let e = ring.disconnect(vqp).err().or(ring.disconnect(other).err());
    check(e.is_none(), || format!("disconnect: {e:?}"))?;
    fails_as(
        "connect to a foreign GID",
        ring.connect([9; 16], 0),
        |e| e.raw_os_error() == Some(libc::ENETUNREACH) && e.reason() == Some(Reason::Verbs),
        "foreign GID accepted",
    )?;
    // An IPv4 node that is not there (and this module listens for none): the dial
    // fails and the CONNECT says so by name.
    let nobody = std::net::Ipv4Addr::new(192, 0, 2, 99)
        .to_ipv6_mapped()
        .octets();
    fails_as(
        "connect to a node that is not there",
        ring.connect(nobody, 0),
        |e| e.reason() == Some(Reason::Unreachable),
        "CONNECT to an absent node did not fail Unreachable",
    )?;
    ring.deregister(mr).map_err(|e| e.to_string())
}

pub fn example_read_write_runs() -> Result<(), String> {
    let out = sh(&["target/release/examples/read_write"])?;
    for l in out.lines() {
        println!("  {l}");
    }
    check(
        out.contains("read back Some(\"hello\")") || out.contains("read back \"hello\""),
        || format!("output: {out}"),
    )
}

/// The tokio example: a TCP front end answering GETs by READs through an AsyncRing,
/// driven by its own clients.
pub fn example_async_service_runs() -> Result<(), String> {
    let out = sh(&["target/release/examples/async_service", "selftest"])?;
    for l in out.lines() {
        println!("  {l}");
    }
    check(
        out.contains("async service: 100 GETs from 4 clients answered and checked"),
        || format!("output: {out}"),
    )
}

extern "C" fn ignore(_: libc::c_int) {}

/// A handled signal (or io_uring's task work) makes the kernel return from a wait early,
/// as io_uring_enter does; `submit_and_wait` must still return with the CQE visible.
pub fn wait_survives_signals() -> Result<(), String> {
    // SAFETY: a no-op handler for SIGUSR1, without SA_RESTART.
    unsafe {
        libc::signal(
            libc::SIGUSR1,
            ignore as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut r = Builder::new(8).build(dev).map_err(|e| e.to_string())?;
    let (v, _) = crate::datapath::ok(&mut r, Sqe::connect(1, LOCAL_GID, 0))?;
    let buf = crate::datapath::Buf::new(512);
    let a = buf.addr();
    let (mr, descriptor) = crate::datapath::ok(
        &mut r,
        Sqe::reg_mr(2, a, 4096, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ),
    )?;
    let (rmr, _) = crate::datapath::ok(&mut r, Sqe::import_mr(3, v as u32, a, 4096, descriptor))?;
    // SAFETY: plain call.
    let main = unsafe { libc::pthread_self() };
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let sent = std::sync::Arc::new(AtomicU64::new(0));
    let (s2, n2) = (stop.clone(), sent.clone());
    let pelter = std::thread::spawn(move || {
        while !s2.load(Relaxed) {
            // SAFETY: the main thread outlives this loop (joined below).
            unsafe { libc::pthread_kill(main, libc::SIGUSR1) };
            n2.fetch_add(1, Relaxed);
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    });
    let mut result = Ok(());
    let mut reads = 0u64;
    // At least 200 READs, and until 50 signals have landed during them.
    for i in 0..20_000u64 {
        if i >= 200 && sent.load(Relaxed) >= 50 {
            break;
        }
        reads += 1;
        let read = Sqe::one_sided(
            krcore_uring::abi::opcode::Opcode::Read,
            100 + i,
            v as u32,
            mr as u32,
            a + 2048,
            8,
            rmr as u32,
            a,
        );
        // SAFETY: the buffer is registered and outlives the wait.
        unsafe { r.submission().push(&read) }.map_err(|e| e.to_string())?;
        if let Err(e) = r.submit_and_wait(1) {
            result = Err(format!("READ {i}: {e}"));
            break;
        }
        if r.completions().next().map(|c| c.user_data) != Some(100 + i) {
            result = Err(format!(
                "READ {i}: submit_and_wait(1) returned without its completion"
            ));
            break;
        }
    }
    stop.store(true, Relaxed);
    pelter.join().map_err(|_| "pelter panicked")?;
    // SAFETY: restore the default disposition.
    unsafe { libc::signal(libc::SIGUSR1, libc::SIG_DFL) };
    println!(
        "  {reads} READs with submit_and_wait(1) under {} SIGUSR1s",
        sent.load(Relaxed)
    );
    drop(buf);
    result
}

/// LISTEN in the real module, on one node (peers from other nodes are the cluster
/// runs'): one ring per service; a ring's listens bounded (4); UNLISTEN ends a listen
/// with its last completion, and a closed ring's listens end with it, freeing the
/// service; a wait for a peer that never comes is bounded.
pub fn listen_is_one_ring_per_service() -> Result<(), String> {
    let ring = || {
        Builder::new(8)
            .build(Device::open().map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())
    };
    let (mut a, mut b) = (ring()?, ring()?);
    let mut la = a.listen(77).map_err(|e| e.to_string())?;
    let taken = b.listen(77).err().and_then(|e| e.reason());
    check(taken == Some(Reason::ServiceTaken), || {
        format!("a second ring's LISTEN on 77: {taken:?}")
    })?;
    let t = std::time::Instant::now();
    let e = a
        .accept_timeout(&mut la, std::time::Duration::from_millis(50))
        .err()
        .and_then(|e| e.raw_os_error());
    check(e == Some(libc::ETIME), || {
        format!("accept with nobody: {e:?}")
    })?;
    let waited = t.elapsed();
    let mut more: Vec<_> = (78..81).map(|s| a.listen(s)).collect();
    let fifth = a.listen(81).err().and_then(|e| e.reason());
    check(
        more.iter().all(Result::is_ok) && fifth == Some(Reason::TableFull),
        || format!("listens 2-5 of a ring: {more:?}, {fifth:?}"),
    )?;
    let left = a
        .unlisten(more.remove(0).unwrap())
        .map_err(|e| e.to_string())?;
    check(left.is_empty(), || format!("peers of nobody: {left:?}"))?;
    let again = a.listen(78).map_err(|e| e.to_string());
    check(again.is_ok(), || {
        format!("LISTEN after UNLISTEN: {again:?}")
    })?;
    // Dropping a listener ends its listen, as closing a listening socket does (before,
    // the ring went on listening, and this LISTEN failed ServiceTaken).
    drop(more.remove(0));
    let freed = b.listen(79).map(|_| ()).map_err(|e| e.to_string());
    check(freed.is_ok(), || {
        format!("LISTEN after the listener was dropped: {freed:?}")
    })?;
    drop(a);
    let after = b.listen(77).map_err(|e| e.to_string());
    check(after.is_ok(), || {
        format!("LISTEN after the listener's ring closed: {after:?}")
    })?;
    println!(
        "  one listener per service, 4 per ring, freed by UNLISTEN, by a dropped listener and by close; an accept with nobody ended ETIME after {} ms",
        waited.as_millis()
    );
    Ok(())
}

/// Two rings of this node whose virtual QPs pair ports `a` and `b`: each one's SENDs
/// reach the other's RECVs.
fn paired(
    a: u16,
    b: u16,
) -> Result<(krcore_uring::Ring, Vqp, krcore_uring::Ring, Vqp), krcore_uring::Error> {
    let mut ring = Builder::new(8).build(Device::open()?)?;
    let mut peer = Builder::new(8).build(Device::open()?)?;
    let vqp = ring.pair(LOCAL_GID, a, b)?;
    let to = peer.pair(LOCAL_GID, b, a)?;
    Ok((ring, vqp, peer, to))
}

/// A region dropped on another thread while the ring's thread waits in the kernel (a
/// RECV no message has come for) deregisters at once: the ring's lock is not held
/// across the wait. Before, the dropping thread spun on the lock until the wait ended,
/// and here that wait ends only after the drops: the test saw 5 s of spinning.
pub fn a_region_drops_while_the_ring_waits() -> Result<(), String> {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    let e = |e: krcore_uring::Error| e.to_string();
    let (mut ring, vqp, mut peer, to) = paired(51, 52).map_err(e)?;
    let mut inbox = ring.register(64, MrAccess::LOCAL_WRITE).map_err(e)?;
    let mut note = peer.register(64, MrAccess::empty()).map_err(e)?;
    note.bytes_mut()[..8].copy_from_slice(b"arrived!");
    let mut lent = vec![0u8; 4096];
    let borrowed = ring
        .register_slice(&mut lent, MrAccess::LOCAL_WRITE)
        .map_err(e)?;
    let owned = ring.register(4096, MrAccess::LOCAL_WRITE).map_err(e)?;
    let (done, took) = mpsc::channel();
    let (got, sent) = std::thread::scope(|s| {
        let sender = s.spawn(move || {
            // The ring's thread is in the kernel by now, waiting for the message.
            std::thread::sleep(Duration::from_millis(300));
            let t = Instant::now();
            let (tx, rx) = mpsc::channel();
            s.spawn(move || {
                drop(borrowed);
                drop(owned);
                let _ = tx.send(());
            });
            let ended = rx.recv_timeout(Duration::from_secs(5)).is_ok();
            let _ = done.send((ended, t.elapsed()));
            // The message the ring waits for, sent whether the drops ended or not.
            let mut b = Batch::new();
            b.send(&to, &note, 0, 8, None).map_err(e)?;
            let sent = peer.run(b).map_err(e)?;
            check(sent[0].is_ok(), || format!("SEND: {sent:?}"))
        });
        let mut b = Batch::new();
        let got = match b.recv(&vqp, &inbox, 0, 64) {
            Ok(_) => ring.run(b).map_err(e),
            Err(x) => Err(e(x)),
        };
        (got, sender.join())
    });
    sent.map_err(|_| "the sending thread panicked")??;
    let got = got?;
    let (ended, after) = took.recv().map_err(|e| e.to_string())?;
    println!("  two regions dropped on another thread in {after:?} while the ring waited");
    check(ended && after < Duration::from_secs(2), || {
        format!("dropping the regions took {after:?} (ended: {ended}) while the ring waited")
    })?;
    check(got[0].as_ref().is_ok_and(|c| c.res == 8), || {
        format!("RECV: {got:?}")
    })?;
    check(&inbox.bytes()[..8] == b"arrived!", || {
        "RECV bytes differ".into()
    })
}

/// A batch run with a timeout gives up `ETIME` at its bound, keeps its region parked
/// while the RECV is still posted (the next message lands there, not in freed memory),
/// and the ring goes on.
pub fn a_run_times_out_and_parks_its_regions() -> Result<(), String> {
    use std::time::{Duration, Instant};
    let e = |e: krcore_uring::Error| e.to_string();
    let (mut ring, vqp, mut peer, to) = paired(61, 62).map_err(e)?;
    let inbox = ring.register(64, MrAccess::LOCAL_WRITE).map_err(e)?;
    let t = Instant::now();
    let (got, back) = ring.run_timeout(vec![inbox], Duration::from_millis(300), |b, r| {
        b.recv(&vqp, &r[0], 0, 64).map(|_| ())
    });
    let waited = t.elapsed();
    println!("  a RECV run with a 300 ms bound gave up after {waited:?}");
    check(
        got.as_ref()
            .is_err_and(|x| x.raw_os_error() == Some(libc::ETIME)),
        || format!("run_timeout: {got:?}"),
    )?;
    check(back.is_empty(), || {
        "a region came back while its RECV is posted".into()
    })?;
    check(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        || format!("gave up after {waited:?}"),
    )?;
    let mut note = peer.register(64, MrAccess::empty()).map_err(e)?;
    for (i, word) in [b"first!!!", b"second!!"].iter().enumerate() {
        note.bytes_mut()[..8].copy_from_slice(*word);
        let mut b = Batch::new();
        b.send(&to, &note, 0, 8, None).map_err(e)?;
        if i == 1 {
            // The second message has a RECV of its own, run to the end.
            let fresh = ring.register(64, MrAccess::LOCAL_WRITE).map_err(e)?;
            let (got, mut back) = std::thread::scope(|s| {
                let sender = s.spawn(|| peer.run(b));
                let got = ring.run_timeout(vec![fresh], Duration::from_secs(10), |b, r| {
                    b.recv(&vqp, &r[0], 0, 64).map(|_| ())
                });
                let _ = sender.join();
                got
            });
            check(
                got.as_ref()
                    .is_ok_and(|c| c[0].as_ref().is_ok_and(|c| c.res == 8)),
                || format!("second RECV: {got:?}"),
            )?;
            let bytes = &back[0].bytes()[..8];
            return check(bytes == b"second!!", || {
                format!("the second message landed as {bytes:?}: the first went to the parked RECV")
            });
        }
        // The first message goes to the parked RECV.
        let sent = peer.run(b).map_err(e)?;
        check(sent[0].is_ok(), || format!("SEND: {sent:?}"))?;
    }
    Ok(())
}
