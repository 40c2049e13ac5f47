//! uring-lib's `AsyncRing` on a tokio runtime against the real module: futures woken by
//! the ring's eventfd (no enter beyond the submit), several in flight at once, and a
//! future dropped with its RECV outstanding, whose region stays pinned until the
//! message comes and is released then.

use std::time::Duration;

use krcore_uring::abi::sqe::MrAccess;
use krcore_uring::{AsyncRing, Builder, Device, MemoryRegion};

use crate::datapath::LOCAL_GID;
use crate::harness::check;
use crate::memory::pinned_kb;

const ALL: MrAccess = MrAccess::LOCAL_WRITE
    .union(MrAccess::REMOTE_READ)
    .union(MrAccess::REMOTE_WRITE);

fn e(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub fn futures_wake_by_eventfd_and_cancel_safely() -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(e)?;
    rt.block_on(async {
        let dev = Device::open().map_err(e)?;
        let ring = AsyncRing::new(Builder::new(32).build(dev).map_err(e)?).map_err(e)?;
        let vqp = ring.pair(LOCAL_GID, 21, 21).await.map_err(e)?;
        let mut mr = ring.register(8192, ALL).await.map_err(e)?;
        for (i, b) in mr.bytes_mut()[..4096].iter_mut().enumerate() {
            *b = (i * 3) as u8;
        }
        let remote = ring
            .import(&vqp, &mr.export().ok_or("no descriptor")?)
            .await
            .map_err(e)?;

        // One READ per future, one after another: each must cost exactly its submit,
        // the completion arriving through the eventfd (a future that had to poll the
        // kernel once per wait slice would enter twice).
        const N: u64 = 40;
        let before = ring.enters();
        let mut regions = vec![mr];
        for k in 0..N {
            let (done, back) = ring
                .run(regions, |b, r| {
                    b.read(&vqp, &r[0], 4096 + k * 64, &remote, k * 64, 64)
                        .map(|_| ())
                })
                .await;
            regions = back;
            let done = done.map_err(e)?;
            check(done[0].as_ref().is_ok_and(|c| c.res == 64), || {
                format!("READ {k}: {done:?}")
            })?;
        }
        let enters = ring.enters() - before;
        println!("  {N} READs, one future each: {enters} enters");
        check(enters <= N + N / 10, || {
            format!("{enters} enters for {N} READs: completions did not come through the eventfd")
        })?;
        let mut mr = regions.pop().ok_or("region lost")?;
        let bytes = mr.bytes();
        check(
            bytes[4096..4096 + N as usize * 64] == bytes[..N as usize * 64],
            || "READ bytes differ".into(),
        )?;

        // Three futures in flight at once, each with its own region.
        let mut three = Vec::new();
        for _ in 0..3 {
            three.push(ring.register(64, ALL).await.map_err(e)?);
        }
        let read = |m: MemoryRegion, off: u64| {
            let (vqp, remote) = (&vqp, &remote);
            ring.run(vec![m], move |b, r| {
                b.read(vqp, &r[0], 0, remote, off, 64).map(|_| ())
            })
        };
        let (c, b, a) = (three.pop(), three.pop(), three.pop());
        let ((ra, ma), (rb, mb), (rc, mc)) = tokio::join!(
            read(a.ok_or("")?, 0),
            read(b.ok_or("")?, 64),
            read(c.ok_or("")?, 128)
        );
        for (i, (r, mut m)) in [(ra, ma), (rb, mb), (rc, mc)].into_iter().enumerate() {
            let r = r.map_err(e)?;
            let want: Vec<u8> = (i * 64..i * 64 + 64).map(|j| (j * 3) as u8).collect();
            check(r[0].is_ok() && m[0].bytes() == &want[..], || {
                format!("concurrent READ {i}: {r:?}")
            })?;
            drop(m.pop());
        }
        println!("  3 READ futures joined: each got its own bytes");

        // A RECV given up on by a timeout: its region stays pinned (parked in the ring)
        // while the NIC may still write it, and is released once the message came.
        let rx = ring.pair(LOCAL_GID, 22, 22).await.map_err(e)?;
        let tx = ring.pair(LOCAL_GID, 22, 22).await.map_err(e)?;
        let inbox = ring.register(256 << 10, ALL).await.map_err(e)?;
        let pinned = pinned_kb()?;
        let gave_up = tokio::time::timeout(
            Duration::from_millis(50),
            ring.run(vec![inbox], |b, r| b.recv(&rx, &r[0], 0, 64).map(|_| ())),
        )
        .await;
        check(gave_up.is_err(), || "a RECV with no SEND completed".into())?;
        let parked = pinned_kb()?;
        check(parked >= pinned, || {
            format!("the abandoned RECV's region was unpinned early: {pinned} -> {parked} kB")
        })?;
        mr.bytes_mut()[..5].copy_from_slice(b"hello");
        let (sent, back) = ring
            .run(vec![mr], |b, r| b.send(&tx, &r[0], 0, 5, None).map(|_| ()))
            .await;
        let sent = sent.map_err(e)?;
        check(sent[0].is_ok(), || format!("SEND: {sent:?}"))?;
        // The SEND's completion and the parked RECV's come in either order: reap until
        // the parked region is let go (each run reaps).
        let mut released = pinned_kb()?;
        for _ in 0..50 {
            if released + 200 < parked {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = ring.run(Vec::new(), |_, _| Ok(())).await;
            released = pinned_kb()?;
        }
        println!("  RECV abandoned after 50 ms: VmPin {pinned} kB, parked {parked}, after the SEND {released}");
        check(released + 200 < parked, || {
            format!("the parked region was never released: VmPin {parked} -> {released} kB")
        })?;
        drop(back);
        ring.disconnect(tx).await.map_err(e)?;
        ring.disconnect(rx).await.map_err(e)?;
        ring.disconnect(vqp).await.map_err(e)
    })
}
