//! `net-bound SILENT LIVE`: a user's bounded enter stays bounded while other users'
//! network work waits on nodes that never answer. SILENT answers ARP, never the CM, and
//! the module is loaded with it as the MetaServer; LIVE is a member whose module is up.
//!
//! Other users (uids 1001 and 1002, in child processes, each with as many dials in
//! progress as a user may have) leave network work that cannot finish for seconds, in
//! each way a user can leave it:
//! - running: a PUBLISH (the MetaServer at SILENT) and a CONNECT to SILENT, each on its
//!   own thread, waiting;
//! - left by a ring that died before its dials: CONNECTs to addresses on the segment
//!   where nobody answers, submitted without waiting, the ring closed at once;
//! - left by an enter that was interrupted: a CONNECT to another such address, its
//!   waiting enter ended by a signal (`EINTR`), the ring kept.
//!
//! Then this user's (root's) NOPs, each in an enter bounded at 100 ms, and a CONNECT to
//! LIVE bounded the same (a first contact: the other users' dials to addresses that
//! never answer must leave it working), must each return within the bound (plus `SLACK_MS` for emulation):
//! the NOP done; the CONNECT done, or timed out (`ETIME`) and then completing on its own
//! (the device's workers may all be busy with others' dials), with a virtual QP. Exits 1
//! otherwise.
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use krcore_abi::cqe::Cqe;
use krcore_abi::ioctl::IOC_ENTER;
use krcore_abi::layout::{EnterArgs, EnterFlags};
use krcore_abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device, Ring};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The bound each enter is given.
const BOUND: Duration = Duration::from_millis(100);
/// What emulation (TCG) may add to it: scheduling, not network work (a dial waits 10 s).
const SLACK_MS: u128 = 900;
/// Addresses on the test segment that no guest holds (test beds use 192.0.2.11-13).
const NOBODY: [[u8; 4]; 4] = [
    [192, 0, 2, 50],
    [192, 0, 2, 51],
    [192, 0, 2, 52],
    [192, 0, 2, 53],
];
/// A service number for every CONNECT here.
/// No endpoint: the dials are what is bounded here.
const SERVICE: u32 = 0;

fn ring() -> Result<Ring> {
    Ok(Builder::new(16).build(Device::open()?)?)
}

fn gid(a: [u8; 4]) -> [u8; 16] {
    Ipv4Addr::from(a).to_ipv6_mapped().octets()
}

/// Pushes `sqe`, enters bounded at [`BOUND`], and says how long the enter took and
/// its completion, if it came (`None`: timed out, the entry still in flight).
fn bounded(r: &mut Ring, sqe: Sqe, what: &str) -> Result<(u128, Option<Cqe>)> {
    // SAFETY: a NOP or a CONNECT names no memory.
    unsafe { r.submission().push(&sqe) }.map_err(|_| "the SQ is full")?;
    let t = Instant::now();
    let got = r.submit_and_wait_timeout(1, BOUND);
    let ms = t.elapsed().as_millis();
    let how = match &got {
        Ok(_) => "done".to_string(),
        Err(e) => format!("{e}"),
    };
    println!("net-bound: {what}: the enter returned in {ms} ms ({how})");
    Ok((ms, r.completions().next()))
}

/// A signal handler that does nothing: its only use is to interrupt an enter.
extern "C" fn ignore(_: libc::c_int) {}

/// A ring whose waiting enter for a CONNECT to `to` is ended by a signal: its dial is
/// left queued. The ring is returned, kept open, with whether the enter did end so (an
/// enter busy with network work on its own thread does not).
fn interrupted(to: [u8; 4]) -> Result<(Ring, bool)> {
    // SAFETY: installs a handler that does nothing, without SA_RESTART, so the enter
    // below returns EINTR rather than being restarted.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ignore as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()) != 0 {
            return Err("sigaction".into());
        }
    }
    let mut r = ring()?;
    // SAFETY: a CONNECT names no memory.
    unsafe { r.submission().push(&Sqe::connect(1, gid(to), SERVICE)) }
        .map_err(|_| "the SQ is full")?;
    r.submit()?;
    // SAFETY: plain thread id of this thread.
    let me = unsafe { libc::pthread_self() };
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: the thread is alive: it waits in the enter below until this signal.
        unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
    });
    // The library enters again after EINTR; this enter is made by hand, once.
    let args = EnterArgs {
        to_submit: 1,
        min_complete: 1,
        flags: EnterFlags::GETEVENTS.bits(),
        ..Default::default()
    };
    let t = Instant::now();
    // SAFETY: IOC_ENTER reads an EnterArgs, which `args` is.
    let rc = unsafe { libc::ioctl(r.as_raw_fd(), IOC_ENTER as _, &args as *const EnterArgs) };
    let err = std::io::Error::last_os_error();
    killer
        .join()
        .map_err(|_| "the signalling thread panicked")?;
    let ok = rc < 0 && err.raw_os_error() == Some(libc::EINTR);
    if ok {
        println!("net-bound: an enter waiting for a dial to {to:?} was interrupted (EINTR)");
    } else {
        println!(
            "net-bound: an enter waiting for a dial to {to:?} was not interrupted: it returned {rc} after {:?}",
            t.elapsed()
        );
    }
    Ok((r, ok))
}

/// Runs `noise` in a child process as user `uid` (group `uid`), which says over a pipe
/// when its work is left behind (`true`: as it should be), then keeps its rings until
/// killed. Returns the child's pid and its word.
fn as_user(uid: u32, noise: impl FnOnce() -> Result<bool>) -> Result<(libc::pid_t, bool)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err("pipe".into());
    }
    // SAFETY: called before this process starts any thread, so the child is a copy of
    // one thread with nothing held.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork".into());
    }
    if pid == 0 {
        // SAFETY: plain calls in the child; it never returns to the parent's code.
        unsafe {
            libc::close(fds[0]);
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0
            {
                libc::_exit(2);
            }
            // Gone with the parent, however it ends (after setuid, which clears it).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            let word = match noise() {
                Ok(true) => b'1',
                Ok(false) => b'0',
                Err(e) => {
                    eprintln!("net-bound: user {uid}'s work: {e}");
                    b'e'
                }
            };
            libc::write(fds[1], [word].as_ptr().cast(), 1);
            libc::sleep(300);
            libc::_exit(0);
        }
    }
    let mut word = [0u8];
    // SAFETY: our end of the pipe; the child's end closed here, so a child that dies
    // without a word ends the read (0 bytes) rather than leave it waiting.
    let n = unsafe {
        libc::close(fds[1]);
        let n = libc::read(fds[0], word.as_mut_ptr().cast(), 1);
        libc::close(fds[0]);
        n
    };
    if n != 1 || word[0] == b'e' {
        return Err(format!("user {uid}'s work did not finish").into());
    }
    Ok((pid, word[0] == b'1'))
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut addr = || -> Result<[u8; 4]> {
        let a: Ipv4Addr = args.next().ok_or("usage: net-bound SILENT LIVE")?.parse()?;
        Ok(a.octets())
    };
    let (silent, live) = (addr()?, addr()?);
    // Other users' network work, each user with as many dials in progress as it may
    // have (2: abi's cluster::peers::DIALS_PER_USER), none of it this user's. User 1001:
    // running, a PUBLISH waiting for the MetaServer and a first contact; left by a ring
    // that died before dialing. The work stays until the child is killed.
    let (noisy, _) = as_user(1001, || {
        let publisher = std::thread::spawn(|| -> Result<()> {
            let mut r = ring()?;
            let mr = r.register(4096, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ)?;
            let t = Instant::now();
            let got = r.publish(&mr, "net-bound");
            println!(
                "net-bound: the other user's PUBLISH ended after {:?}: {got:?}",
                t.elapsed()
            );
            Ok(())
        });
        let _dialer = std::thread::spawn(move || -> Result<()> {
            let mut r = ring()?;
            let t = Instant::now();
            let got = r.connect(gid(silent), SERVICE);
            println!(
                "net-bound: the other user's CONNECT ended after {:?}: {:?}",
                t.elapsed(),
                got.err()
            );
            Ok(())
        });
        let mut r = ring()?;
        for (i, a) in NOBODY[..2].iter().enumerate() {
            // SAFETY: a CONNECT names no memory.
            unsafe {
                r.submission()
                    .push(&Sqe::connect(i as u64, gid(*a), SERVICE))
            }
            .map_err(|_| "the SQ is full")?;
        }
        r.submit()?;
        drop(r);
        println!("net-bound: a ring closed with CONNECTs to 2 silent addresses submitted");
        std::thread::sleep(Duration::from_millis(100));
        drop(publisher);
        Ok(true)
    })?;
    // User 1002: a ring closed with a dial submitted, and one whose waiting enter a
    // signal ended (its dial left queued), kept.
    let (kept, interruptible) = as_user(1002, || {
        let mut r = ring()?;
        // SAFETY: a CONNECT names no memory.
        unsafe {
            r.submission()
                .push(&Sqe::connect(0, gid(NOBODY[2]), SERVICE))
        }
        .map_err(|_| "the SQ is full")?;
        r.submit()?;
        drop(r);
        let (r, ok) = interrupted(NOBODY[3])?;
        std::mem::forget(r);
        Ok(ok)
    })?;
    std::thread::sleep(Duration::from_millis(200));
    let mut r = ring()?;
    let mut worst = 0;
    for i in 0..5 {
        worst = worst.max(bounded(&mut r, Sqe::nop(i), "a NOP")?.0);
    }
    let (ms, mut got) = bounded(
        &mut r,
        Sqe::connect(10, gid(live), SERVICE),
        "a CONNECT to the live node",
    )?;
    worst = worst.max(ms);
    let limit = BOUND.as_millis() + SLACK_MS;
    if worst > limit {
        return Err(format!(
            "an enter bounded at {} ms took {worst} ms",
            BOUND.as_millis()
        )
        .into());
    }
    println!("net-bound: every bounded enter returned within {limit} ms (the longest {worst} ms)");
    if got.is_none() {
        // In its own time: once a worker is free of the others' dials (each gives up
        // after its 10 s timeout).
        let t = Instant::now();
        r.submit_and_wait_timeout(1, Duration::from_secs(60))?;
        println!(
            "net-bound: the CONNECT to the live node completed {:?} later",
            t.elapsed()
        );
        got = r.completions().next();
    }
    let c = got.ok_or("no completion for the CONNECT")?;
    if c.user_data != 10 || c.res < 0 {
        return Err(format!("the CONNECT to the live node failed: {c:?}").into());
    }
    println!(
        "net-bound: the CONNECT to the live node bound virtual QP {}",
        c.res
    );
    for pid in [noisy, kept] {
        // SAFETY: our own children, killed and reaped once.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    if !interruptible {
        return Err("an enter waiting for another node did not end at a signal".into());
    }
    Ok(())
}
