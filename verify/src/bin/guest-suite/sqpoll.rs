//! Polling mode: no syscall in the steady state, one wakeup after the poller slept.

use std::time::{Duration, Instant};

use krcore_uring::abi::layout::SqFlags;
use krcore_uring::abi::sqe::Sqe;
use krcore_uring::{Builder, Device, Ring};

use crate::harness::check;

/// Spins (no syscall) until `n` completions arrived; their user_data in order.
fn reap_spinning(r: &mut Ring, n: usize) -> Result<Vec<u64>, String> {
    let start = Instant::now();
    let mut got = Vec::new();
    while got.len() < n {
        got.extend(r.completions().map(|c| c.user_data));
        if start.elapsed() > Duration::from_secs(20) {
            return Err(format!("only {} of {n} completions after 20 s", got.len()));
        }
        std::hint::spin_loop();
    }
    Ok(got)
}

pub fn no_syscalls_in_steady_state() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut r = Builder::new(64)
        .sqpoll(2000)
        .build(dev)
        .map_err(|e| e.to_string())?;
    let mut next = 0u64;
    let t = Instant::now();
    for _ in 0..100 {
        for _ in 0..10 {
            // SAFETY: NOPs name no memory.
            unsafe { r.submission().push(&Sqe::nop(next)) }.map_err(|e| e.to_string())?;
            next += 1;
        }
        r.submit().map_err(|e| e.to_string())?;
        let got = reap_spinning(&mut r, 10)?;
        check(got == (next - 10..next).collect::<Vec<_>>(), || {
            format!("out of order: {got:?}")
        })?;
    }
    let steady = r.enters();
    println!(
        "  1000 NOPs in batches of 10 through the polling thread: {steady} enter syscalls in {:?}",
        t.elapsed()
    );
    check(steady == 0, || {
        format!("{steady} syscalls in the steady state")
    })?;
    // Idle past the timeout: the poller sleeps, and the next submit wakes it, once.
    let t = Instant::now();
    while !r.sq_flags().contains(SqFlags::NEED_WAKEUP) {
        check(t.elapsed() < Duration::from_secs(10), || {
            "the poller never went to sleep".into()
        })?;
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "  poller asleep after {:?} idle (sq_idle_ms 2000)",
        t.elapsed()
    );
    // SAFETY: a NOP names no memory.
    unsafe { r.submission().push(&Sqe::nop(next)) }.map_err(|e| e.to_string())?;
    r.submit().map_err(|e| e.to_string())?;
    let got = reap_spinning(&mut r, 1)?;
    println!(
        "  after a wakeup: {} enter syscall(s), completion {:?}",
        r.enters() - steady,
        got
    );
    check(r.enters() - steady == 1 && got == [next], || {
        format!("wakeup: {} enters, {got:?}", r.enters() - steady)
    })
}

pub fn eventfd_wakes_the_application() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut r = Builder::new(16)
        .sqpoll(2000)
        .build(dev)
        .map_err(|e| e.to_string())?;
    // SAFETY: plain syscall; the fd is closed below.
    let efd = unsafe { libc::eventfd(0, 0) };
    check(efd >= 0, || "eventfd failed".into())?;
    r.register_eventfd(Some(efd)).map_err(|e| e.to_string())?;
    let before = r.enters();
    // SAFETY: a NOP names no memory.
    unsafe { r.submission().push(&Sqe::nop(5)) }.map_err(|e| e.to_string())?;
    r.submit().map_err(|e| e.to_string())?;
    // Block on the eventfd: the kernel signals it once the poller produced the CQE.
    let mut count = 0u64;
    // SAFETY: reads 8 bytes into `count`.
    let n = unsafe { libc::read(efd, (&mut count as *mut u64).cast(), 8) };
    let got: Vec<u64> = r.completions().map(|c| c.user_data).collect();
    // SAFETY: opened above.
    unsafe { libc::close(efd) };
    println!(
        "  eventfd read {n} bytes, count {count}; CQEs {got:?}; enter syscalls {}",
        r.enters() - before
    );
    check(n == 8 && count >= 1 && got == [5], || {
        format!("eventfd {n}/{count}, CQEs {got:?}")
    })?;
    let bad = r
        .register_eventfd(Some(0))
        .err()
        .and_then(|e| e.raw_os_error());
    check(bad == Some(libc::EINVAL), || {
        format!("stdin registered as an eventfd: {bad:?}")
    })
}
