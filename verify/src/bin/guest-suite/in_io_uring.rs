//! krcore entries carried by io_uring's own ring (abi's engine/uring.rs): each completes
//! into io_uring's CQ, never the ring's; a wrong setup or command is refused; what is in
//! flight when the ring's file is closed still completes; nothing carried waits forever,
//! whatever the module's parameters, and no process waits on one to exit or exec.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::in_io_uring::{command, outcome, CMD_OP};
use krcore_uring::Builder;

use crate::datapath::{ok, open, Buf, LOCAL_GID};
use crate::harness::check;
use crate::isolation::Child;
use crate::lifecycle::reload;

type Uring = IoUring<squeue::Entry128, cqueue::Entry32>;

/// Submits `entries`, waits for as many completions: (user_data, res, extra), by
/// user_data.
fn run(u: &mut Uring, entries: &[squeue::Entry128]) -> Result<Vec<(u64, i32, u64)>, String> {
    for e in entries {
        // SAFETY: every buffer the entries name is registered and outlives the wait.
        unsafe { u.submission().push(e) }.map_err(|e| e.to_string())?;
    }
    u.submit_and_wait(entries.len())
        .map_err(|e| e.to_string())?;
    let mut out: Vec<_> = u
        .completion()
        .map(|c| (c.user_data(), c.result(), c.big_cqe()[0]))
        .collect();
    out.sort_by_key(|c| c.0);
    check(out.len() == entries.len(), || {
        format!("{} entries, {out:?}", entries.len())
    })?;
    Ok(out)
}

pub fn carried_entries_complete_into_io_uring() -> Result<(), String> {
    let mut ring = open(Builder::new(16))?;
    let (v, _) = ok(&mut ring, Sqe::connect(1, LOCAL_GID, 0))?;
    let v = v as u32;
    let mut buf = Buf::new(1024);
    for (i, b) in buf.bytes_mut()[..512].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(29).wrapping_add(3);
    }
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let (mr, descriptor) = ok(&mut ring, Sqe::reg_mr(2, buf.addr(), 8192, access))?;
    let (rmr, _) = ok(
        &mut ring,
        Sqe::import_mr(3, v, buf.addr(), 8192, descriptor),
    )?;
    let (mr, rmr, a) = (mr as u32, rmr as u32, buf.addr());
    let read = |k: u64| Sqe::one_sided(Opcode::Read, 0, v, mr, a + 4096 + 8 * k, 8, rmr, a + 8 * k);

    let mut u: Uring = IoUring::builder().build(128).map_err(|e| e.to_string())?;
    let fd = types::Fd(ring.as_raw_fd());
    let carried = |sqe: Sqe, ud: u64| {
        opcode::UringCmd80::new(fd, CMD_OP)
            .cmd(command(&sqe))
            .build()
            .user_data(ud)
    };
    let got = run(&mut u, &[carried(Sqe::nop(0), 1)])?;
    check(got[0].1 == 0, || format!("NOP: {got:?}"))?;
    // 64 READs outstanding at once, each its own command.
    let reads: Vec<_> = (0..64).map(|k| carried(read(k), 100 + k)).collect();
    let got = run(&mut u, &reads)?;
    check(got.iter().all(|c| c.1 == 8), || format!("READs: {got:?}"))?;
    check(buf.bytes()[4096..4608] == buf.bytes()[..512], || {
        "the READs did not copy the bytes".into()
    })?;
    check(ring.completions().count() == 0, || {
        "a carried entry's CQE reached the ring's CQ".into()
    })?;
    // Refused by name: a virtual QP the ring does not have, a RECV.
    let stray = Sqe::one_sided(Opcode::Read, 0, 999, mr, a, 8, rmr, a);
    let recv = Sqe::two_sided(Opcode::Recv, 0, v, mr, a, 8);
    let got = run(&mut u, &[carried(stray, 2), carried(recv, 3)])?;
    let why: Vec<_> = got
        .iter()
        .map(|c| outcome("entry", c.1, c.2).err().and_then(|e| e.reason()))
        .collect();
    check(
        why == [Some(Reason::BadVqp), Some(Reason::NotThroughUring)],
        || format!("stray virtual QP and RECV: {got:?}"),
    )?;
    // Another command number, and an io_uring of 64-byte entries: refused whole.
    let other = opcode::UringCmd80::new(fd, CMD_OP + 1)
        .cmd(command(&Sqe::nop(0)))
        .build()
        .user_data(4);
    let got = run(&mut u, &[other])?;
    check(got[0].1 == -libc::EOPNOTSUPP, || {
        format!("another cmd_op: {got:?}")
    })?;
    let mut small = IoUring::new(8).map_err(|e| e.to_string())?;
    let e = opcode::UringCmd16::new(fd, CMD_OP).build().user_data(5);
    // SAFETY: the entry names no memory.
    unsafe { small.submission().push(&e) }.map_err(|e| e.to_string())?;
    small.submit_and_wait(1).map_err(|e| e.to_string())?;
    let res = small.completion().next().map(|c| c.result());
    check(res == Some(-libc::EINVAL), || {
        format!("64-byte SQEs: {res:?}")
    })?;
    // A SEND with no receive posted, and nobody in krcore waiting: the device's tick
    // expires it at the deadline (before, it never completed, and io_uring's teardown
    // waited for it forever).
    let port = 4321;
    let (a_end, _) = ok(&mut ring, Sqe::pair(6, LOCAL_GID, port, port))?;
    ok(&mut ring, Sqe::pair(7, LOCAL_GID, port, port))?;
    let send = Sqe::two_sided(Opcode::Send, 0, a_end as u32, mr, a, 8);
    // SAFETY: the buffer outlives the wait below.
    unsafe { u.submission().push(&carried(send, 8)) }.map_err(|e| e.to_string())?;
    let ts = types::Timespec::new().sec(30);
    let args = types::SubmitArgs::new().timespec(&ts);
    let _ = u.submitter().submit_with_args(1, &args);
    let got: Vec<_> = u
        .completion()
        .map(|c| (c.result(), c.big_cqe()[0]))
        .collect();
    let why = got
        .first()
        .and_then(|c| outcome("send", c.0, c.1).err())
        .and_then(|e| e.reason());
    check(why == Some(Reason::NoReceiver), || {
        format!("a SEND nobody receives: {got:?}")
    })?;
    // READs in flight when the ring's file closes: io_uring holds the file, and each
    // still completes.
    let reads: Vec<_> = (0..16).map(|k| carried(read(k), 200 + k)).collect();
    for e in &reads {
        // SAFETY: the buffer outlives the wait below.
        unsafe { u.submission().push(e) }.map_err(|e| e.to_string())?;
    }
    u.submit().map_err(|e| e.to_string())?;
    drop(ring);
    u.submit_and_wait(16).map_err(|e| e.to_string())?;
    let done: Vec<_> = u.completion().map(|c| c.result()).collect();
    check(done.len() == 16 && done.iter().all(|&r| r == 8), || {
        format!("READs across the ring's close: {done:?}")
    })
}

/// A SEND nobody receives, carried on a fresh io_uring of its own: the pair of ends on
/// `port`, the ring and the io_uring (which must outlive the wait for its CQE).
fn unreceived_send(port: u16) -> Result<(krcore_uring::Ring, Uring, Buf), String> {
    let mut ring = open(Builder::new(16))?;
    let (a_end, _) = ok(&mut ring, Sqe::pair(1, LOCAL_GID, port, port))?;
    ok(&mut ring, Sqe::pair(2, LOCAL_GID, port, port))?;
    let buf = Buf::new(64);
    let (mr, _) = ok(
        &mut ring,
        Sqe::reg_mr(3, buf.addr(), 64, MrAccess::LOCAL_WRITE),
    )?;
    let send = Sqe::two_sided(Opcode::Send, 0, a_end as u32, mr as u32, buf.addr(), 8);
    let mut u: Uring = IoUring::builder().build(8).map_err(|e| e.to_string())?;
    let e = opcode::UringCmd80::new(types::Fd(ring.as_raw_fd()), CMD_OP)
        .cmd(command(&send))
        .build()
        .user_data(9);
    // SAFETY: the buffer is returned with the io_uring and outlives the command.
    unsafe { u.submission().push(&e) }.map_err(|e| e.to_string())?;
    u.submit().map_err(|e| e.to_string())?;
    Ok((ring, u, buf))
}

/// With the MetaServer tick off (`meta_check_ms=0`), a carried SEND nobody receives
/// still fails `NoReceiver` by its deadline (the device's expiry is its own work); with
/// a deadline of ten minutes, a process with one in flight exits, and execs, at once:
/// io_uring takes the command back (`Cancelled`) instead of waiting for it.
pub fn nothing_carried_waits_forever_nor_holds_an_exit() -> Result<(), String> {
    reload(&["meta_check_ms=0", "request_timeout_ms=1000"])?;
    let result = expires_without_the_tick().and_then(|_| {
        a_stopped_tasks_io_uring_ends_without_spinning()?;
        reload(&["meta_check_ms=0", "request_timeout_ms=600000"])?;
        ends_promptly(false)?;
        ends_promptly(true)
    });
    let back = reload(&[]);
    result.and(back)
}

fn expires_without_the_tick() -> Result<(), String> {
    let (_ring, mut u, _buf) = unreceived_send(4411)?;
    let sent = Instant::now();
    let ts = types::Timespec::new().sec(10);
    let args = types::SubmitArgs::new().timespec(&ts);
    let _ = u.submitter().submit_with_args(1, &args);
    let got: Vec<_> = u
        .completion()
        .map(|c| (c.result(), c.big_cqe()[0]))
        .collect();
    let why = got
        .first()
        .and_then(|c| outcome("send", c.0, c.1).err())
        .and_then(|e| e.reason());
    println!(
        "  meta_check_ms=0: the unreceived SEND ended {why:?} after {:?}",
        sent.elapsed()
    );
    check(why == Some(Reason::NoReceiver), || {
        format!("a SEND nobody receives, 10 s past its 1 s deadline: {got:?}")
    })
}

/// CPU time the machine spent busy and in all, in clock ticks (/proc/stat's first line).
fn cpu_ticks() -> Result<(u64, u64), String> {
    let stat = std::fs::read_to_string("/proc/stat").map_err(|e| e.to_string())?;
    let f: Vec<u64> = stat
        .lines()
        .next()
        .ok_or("empty /proc/stat")?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    let all: u64 = f.iter().take(8).sum();
    Ok((all - idle, all))
}

/// A process P carries a SEND nobody receives (deadline 1 s), forks C, which inherits
/// the io_uring, lets go of its own and stops itself. The SEND's deadline passes: its
/// completion waits for P's task work, which a stopped task never runs. C exits, so the
/// io_uring's teardown starts and cancels: the command, its result on its way already,
/// must leave the cancel list, else the teardown's worker spins on it until P runs
/// again. Judged by the machine's busy time over 3 s; then P goes on and is gone.
fn a_stopped_tasks_io_uring_ends_without_spinning() -> Result<(), String> {
    use std::io::Read;
    let mut p = Child::fork(|w| {
        let Ok((ring, u, buf)) = unreceived_send(4420) else {
            return 1;
        };
        // SAFETY: plain fork; C only sleeps past the deadline and exits.
        let c = unsafe { libc::fork() };
        if c == 0 {
            std::thread::sleep(Duration::from_secs(3));
            drop(w);
            // SAFETY: leaves C without running P's destructors; its io_uring goes.
            unsafe { libc::_exit(0) };
        }
        drop((u, w));
        // SAFETY: stops this process; the test continues it.
        unsafe { libc::raise(libc::SIGSTOP) };
        drop((ring, buf));
        0
    })?;
    let pid = p.pid();
    // C's end of the pipe closes when C is gone (P's closed before it stopped).
    let mut rest = Vec::new();
    p.output()
        .read_to_end(&mut rest)
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(500));
    let (busy0, all0) = cpu_ticks()?;
    std::thread::sleep(Duration::from_secs(3));
    let (busy1, all1) = cpu_ticks()?;
    // SAFETY: our own child, stopped.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let status = p.join();
    let busy = (busy1 - busy0) as f64 / (all1 - all0).max(1) as f64;
    println!(
        "  a stopped task's io_uring torn down: the machine {:.0}% busy over 3 s",
        busy * 100.0
    );
    status?;
    // Spinning takes a whole CPU of the guest's (two under the runner).
    check(busy < 0.3, || {
        format!(
            "the io_uring's teardown spun: the machine was {:.0}% busy",
            busy * 100.0
        )
    })
}

/// Forks a process that carries a SEND nobody receives, then exits (or execs
/// /bin/true): the time it took to be gone, which must be far below the deadline.
fn ends_promptly(exec: bool) -> Result<(), String> {
    use std::io::{Read, Write};
    let mut child = Child::fork(|mut w| {
        let Ok(held) = unreceived_send(4412 + exec as u16) else {
            return 1;
        };
        // Held across the exit or exec: only the kernel's teardown ends them.
        std::mem::forget(held);
        if w.write_all(b"r").is_err() {
            return 1;
        }
        if exec {
            let path = c"/bin/true";
            let argv = [path.as_ptr(), std::ptr::null()];
            // SAFETY: a NUL-terminated path and argument vector.
            unsafe { libc::execv(path.as_ptr(), argv.as_ptr()) };
            return 1;
        }
        0
    })?;
    let pid = child.pid();
    let mut byte = [0u8; 1];
    let ready = child.output().read(&mut byte).map_err(|e| e.to_string())? == 1;
    let since = Instant::now();
    let how = if exec { "exec" } else { "exit" };
    let mut status = 0;
    loop {
        // SAFETY: polls our own child.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            break;
        }
        if since.elapsed() > Duration::from_secs(20) {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return Err(format!(
                "a process with a carried SEND in flight did not {how} in 20 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    check(
        ready && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        || format!("the child failed to set up (ready {ready}, status {status:#x})"),
    )?;
    let gone = since.elapsed();
    // io_uring's teardown, which runs on after the task, lets go of the ring's file too
    // (nothing else here holds the module).
    let refs = || std::fs::read_to_string("/sys/module/krcore/refcnt").unwrap_or_default();
    while refs().trim() != "0" {
        check(since.elapsed() < Duration::from_secs(20), || {
            format!(
                "20 s after the {how}, the module is still held ({} references)",
                refs().trim()
            )
        })?;
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "  a process with an unreceived carried SEND did {how} in {gone:?}, its io_uring \
         let go in {:?} (deadline 600 s)",
        since.elapsed()
    );
    Ok(())
}
