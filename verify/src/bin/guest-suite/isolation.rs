//! Isolation between users of one device: remote memory only through descriptors the
//! kernel issued, memory pinned only by the ring owner's own threads, rings not
//! inherited across fork, a parked polling thread on a hostile SQ tail, messages only to
//! their addressee, a pair breaker throttled.

use std::time::{Duration, Instant};

use krcore_uring::abi::compat::{OneFlags, OneOp};
use krcore_uring::abi::cqe::{Cqe, Reason};
use krcore_uring::abi::ioctl::IOC_ENTER;
use krcore_uring::abi::ioctl::IOC_ONE;
use krcore_uring::abi::layout::{EnterArgs, EnterFlags, SqFlags, OFF_SQ_RING};
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device, Ring};

use crate::datapath::{collect, ok, open, run, Buf, LOCAL_GID};
use crate::harness::check;
use crate::recovery::break_pair;
use crate::rings::map;

const SECRET: u64 = 0x5ec2_e75e_c2e7_5ec2;

/// A forked child process running a closure, whose `Ok` text comes back through a pipe.
pub(crate) struct Child {
    pid: libc::pid_t,
    out: std::fs::File,
}

impl Child {
    /// Forks; the child runs `f`, writes its `Ok` text to the pipe and exits 0, or
    /// prints its error and exits 1.
    pub(crate) fn spawn(f: impl FnOnce() -> Result<String, String>) -> Result<Child, String> {
        use std::io::Write;
        let child = Child::fork(|mut w| {
            let code = match f() {
                Ok(text) => w.write_all(text.as_bytes()).is_err() as i32,
                Err(e) => {
                    eprintln!("  child: {e}");
                    1
                }
            };
            drop(w);
            code
        })?;
        Ok(child)
    }

    /// Forks; the child runs `f` with the write end of a pipe whose read end the parent
    /// keeps, and exits with the code `f` returns (if `f` returns at all: it may exec).
    pub(crate) fn fork(f: impl FnOnce(std::fs::File) -> i32) -> Result<Child, String> {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(format!("pipe: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: the suite is single-threaded here; the child only runs `f` and exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!("fork: {}", std::io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: the read end is the parent's; the write end is ours from here on.
            let code = unsafe {
                libc::close(fds[0]);
                f(std::fs::File::from_raw_fd(fds[1]))
            };
            // SAFETY: leaves the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        // SAFETY: the write end belongs to the child now.
        unsafe { libc::close(fds[1]) };
        Ok(Child {
            pid,
            // SAFETY: our end of the pipe, owned from here on.
            out: unsafe { std::fs::File::from_raw_fd(fds[0]) },
        })
    }

    /// The pipe's read end.
    pub(crate) fn output(&mut self) -> &mut std::fs::File {
        &mut self.out
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits for the child; its text, or why it failed.
    pub(crate) fn join(mut self) -> Result<String, String> {
        use std::io::Read;
        let mut text = String::new();
        let _ = self.out.read_to_string(&mut text);
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok(text)
        } else {
            Err(format!("child failed (status {status:#x})"))
        }
    }
}

/// Runs `child` in a forked process and returns the number it reports.
fn in_child(child: impl FnOnce() -> Result<u8, String>) -> Result<u8, String> {
    let text = Child::spawn(move || child().map(|n| n.to_string()))?.join()?;
    text.parse().map_err(|_| format!("child reported {text:?}"))
}

/// A second process knows the victim's address, what REG_MR returned, and every rkey
/// an rxe MR could carry in that slot (its 256 key bytes). It tries to import the
/// victim's memory with each, in the descriptor field and in the rkey field the old ABI
/// read, and to READ and WRITE through whatever it got. It must get nothing.
pub fn stolen_address_and_rkey_reach_nothing() -> Result<(), String> {
    let mut r = open(Builder::new(16))?;
    let mut victim = Buf::new(512);
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let (_, aux) = ok(&mut r, Sqe::reg_mr(1, victim.addr(), 4096, access))?;
    let addr = victim.addr();
    // Every u32 REG_MR's result exposes (the old ABI returned rkey << 32 | lkey), and the
    // key-byte variants of each.
    let mut keys: Vec<u32> = Vec::new();
    for base in [(aux >> 32) as u32, aux as u32] {
        keys.extend((0..=255u32).map(|k| (base & !0xff) | k));
    }
    let accepted = in_child(move || {
        let mut a = open(Builder::new(64))?;
        let (v, _) = ok(&mut a, Sqe::connect(1, LOCAL_GID, 0))?;
        let v = v as u32;
        let mut mine = Buf::new(8);
        let (mr, _) = ok(
            &mut a,
            Sqe::reg_mr(2, mine.addr(), 64, MrAccess::LOCAL_WRITE),
        )?;
        let mut accepted = 0u8;
        let mut tries: Vec<Sqe> = keys
            .iter()
            .map(|&k| {
                // The old ABI's form: the rkey in `rmr`.
                let mut s = Sqe::import_mr(3, v, addr, 4096, 0);
                s.rmr = k;
                s
            })
            .collect();
        tries.extend(
            keys.iter()
                .map(|&k| Sqe::import_mr(4, v, addr, 4096, k as u64)),
        );
        tries.push(Sqe::import_mr(5, v, addr, 4096, aux ^ 1));
        for s in tries {
            let c = run(&mut a, s)?;
            if c.res < 0 {
                continue;
            }
            accepted = accepted.saturating_add(1);
            let rmr = c.res as u32;
            // Through whatever was accepted: steal, then scribble.
            let read = Sqe::one_sided(Opcode::Read, 6, v, mr as u32, mine.addr(), 8, rmr, addr);
            if run(&mut a, read)?.res == 8 && mine.bytes()[..8] == SECRET.to_le_bytes() {
                return Err("read the victim's secret".into());
            }
            mine.bytes_mut()[..8].copy_from_slice(&0xbad0_bad0u64.to_le_bytes());
            let write = Sqe::one_sided(Opcode::Write, 7, v, mr as u32, mine.addr(), 8, rmr, addr);
            let _ = run(&mut a, write)?;
        }
        Ok(accepted)
    });
    // Written after the fork: the child's copy of this page never held the secret.
    victim.bytes_mut()[..8].copy_from_slice(&SECRET.to_le_bytes());
    let accepted = accepted?;
    let intact = victim.bytes()[..8] == SECRET.to_le_bytes();
    println!(
        "  {} import attempts with the victim's address and candidate rkeys: {accepted} accepted; victim bytes intact: {intact}",
        2 * 512 + 1
    );
    check(accepted == 0, || {
        format!("{accepted} forged imports were accepted")
    })?;
    check(intact, || "the victim's memory was written".into())
}

/// Polls ring `r` (no syscall) for one completion, within 20 s.
fn reap_one(r: &mut Ring) -> Result<Cqe, String> {
    let start = Instant::now();
    loop {
        if let Some(c) = r.completions().next() {
            return Ok(c);
        }
        check(start.elapsed() < Duration::from_secs(20), || {
            "no completion within 20 s".into()
        })?;
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// REG_MR taken by the SQ polling thread (awake, then asleep and woken) fails with
/// `NotOwner` instead of pinning from a thread with no user address space; so does one
/// pushed by a forked child through the parent's file; the owner's enter succeeds.
pub fn only_the_owner_pins_memory() -> Result<(), String> {
    let mut r = open(Builder::new(16).sqpoll(200))?;
    let buf = Buf::new(512);
    let reg = |ud| Sqe::reg_mr(ud, buf.addr(), 4096, MrAccess::LOCAL_WRITE);
    // Awake: the poller takes the entry.
    // SAFETY: the buffer outlives the ring's use of it (it is never registered).
    unsafe { r.submission().push(&reg(1)) }.map_err(|e| e.to_string())?;
    r.submit().map_err(|e| e.to_string())?;
    let awake = reap_one(&mut r)?;
    // Asleep: wait for NEED_WAKEUP, then wake it.
    let t = Instant::now();
    while !r.sq_flags().contains(SqFlags::NEED_WAKEUP) {
        check(t.elapsed() < Duration::from_secs(10), || {
            "the poller never slept".into()
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe { r.submission().push(&reg(2)) }.map_err(|e| e.to_string())?;
    r.submit().map_err(|e| e.to_string())?;
    let asleep = reap_one(&mut r)?;
    println!(
        "  SQPOLL REG_MR: awake {:?}, asleep {:?}",
        awake.failure(),
        asleep.failure()
    );
    check(awake.failure() == Some(Reason::NotOwner), || {
        format!("REG_MR through the polling thread: {awake:?}")
    })?;
    // The wakeup is an enter from the owner, which may take the entry itself (and pin
    // in the owner's context) before the woken thread does.
    check(
        asleep.failure() == Some(Reason::NotOwner) || asleep.res > 0,
        || format!("REG_MR after waking the polling thread: {asleep:?}"),
    )?;
    if asleep.res > 0 {
        ok(&mut r, Sqe::dereg_mr(5, asleep.res as u32))?;
    }
    // A forked child, through a file of the parent's (a ring driven by the one-op
    // ioctl, which needs no mapping).
    let dev = Device::open().map_err(|e| e.to_string())?;
    let per_op = Builder::new(16)
        .build_per_op(dev)
        .map_err(|e| e.to_string())?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(per_op.device());
    let sqe = reg(3);
    let reason = in_child(move || {
        let mut op = OneOp {
            sqe,
            flags: (OneFlags::PUSH | OneFlags::POP | OneFlags::WAIT).bits(),
            ..OneOp::default()
        };
        // SAFETY: `op` outlives the call.
        let rc = unsafe { libc::ioctl(fd, IOC_ONE as _, &mut op as *mut OneOp) };
        if rc < 0 || op.popped != 1 {
            return Err(format!("one-op ioctl: rc {rc}, popped {}", op.popped));
        }
        Ok(op.cqe.reason as u8)
    })?;
    println!("  REG_MR from a forked child: reason {reason}");
    check(reason == Reason::NotOwner as u8, || {
        format!("REG_MR from another process: reason {reason}")
    })?;
    let mut owner = open(Builder::new(16))?;
    ok(&mut owner, reg(4)).map(|_| ())
}

/// A forked child does not inherit the parent's ring mappings (VM_DONTCOPY): two
/// producers on one SQ would break the ring protocol.
pub fn fork_does_not_copy_rings() -> Result<(), String> {
    let r = open(Builder::new(16))?;
    let len = r.params().sq_off.map_len as usize;
    let sq = map(r.device(), len, OFF_SQ_RING).map_err(|e| format!("mmap SQ: errno {e}"))? as usize;
    let mapped = in_child(move || {
        // SAFETY: msync only inspects the range; ENOMEM means nothing is mapped there.
        let rc = unsafe { libc::msync(sq as *mut libc::c_void, 4096, libc::MS_ASYNC) };
        Ok((rc == 0) as u8)
    })?;
    // SAFETY: as above, in the parent, where the ring is mapped.
    let here = unsafe { libc::msync(sq as *mut libc::c_void, 4096, libc::MS_ASYNC) } == 0;
    // SAFETY: mapped above, unmapped once.
    unsafe { libc::munmap(sq as *mut libc::c_void, len) };
    println!(
        "  SQ mapped in the parent: {here}; in a forked child: {}",
        mapped == 1
    );
    check(here && mapped == 0, || {
        "the child inherited the ring mapping".into()
    })
}

/// A hostile SQ tail on a polling ring parks the polling thread with NEED_WAKEUP set,
/// so the application, once it repairs its tail, wakes it with enter; it does not sleep
/// where nobody would wake it.
pub fn hostile_tail_parks_the_poller() -> Result<(), String> {
    let mut r = open(Builder::new(8).sqpoll(200))?;
    let len = r.params().sq_off.map_len as usize;
    let sq = map(r.device(), len, OFF_SQ_RING).map_err(|e| format!("mmap SQ: errno {e}"))?;
    // SAFETY: inside the mapping: the SQ's tail word, written as a hostile app would.
    let tail = unsafe { sq.add(r.params().sq_off.tail as usize).cast::<u32>() };
    // SAFETY: as above.
    let honest = unsafe { std::ptr::read_volatile(tail) };
    // SAFETY: as above.
    unsafe { std::ptr::write_volatile(tail, honest.wrapping_add(1_000_000)) };
    let t = Instant::now();
    let want = SqFlags::TAIL_OVERRUN | SqFlags::NEED_WAKEUP;
    while !r.sq_flags().contains(want) {
        check(t.elapsed() < Duration::from_secs(10), || {
            format!("flags {:?} 10 s after a hostile tail", r.sq_flags())
        })?;
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("  hostile tail: {:?} after {:?}", r.sq_flags(), t.elapsed());
    // Repair, push a NOP, wake the poller.
    // SAFETY: as above.
    unsafe { std::ptr::write_volatile(tail, honest) };
    // SAFETY: a NOP names no memory.
    unsafe { r.submission().push(&Sqe::nop(9)) }.map_err(|e| e.to_string())?;
    r.submit().map_err(|e| e.to_string())?;
    let args = EnterArgs {
        flags: EnterFlags::SQ_WAKEUP.bits(),
        ..EnterArgs::default()
    };
    // SAFETY: `args` outlives the call; the kernel only reads it.
    unsafe {
        r.device()
            .ioctl_raw(IOC_ENTER, &args as *const EnterArgs as usize)
    }
    .map_err(|e| e.to_string())?;
    let c = reap_one(&mut r)?;
    // SAFETY: mapped above, unmapped once.
    unsafe { libc::munmap(sq.cast(), len) };
    check(c.user_data == 9 && c.res == 0, || {
        format!("after repair: {c:?}")
    })
}

/// Median and 99th percentile of `xs` (sorted in place).
fn median_p99(xs: &mut [Duration]) -> (Duration, Duration) {
    xs.sort();
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}

/// No user-memory work happens under a shared lock: while one process maps and unmaps
/// its rings in a loop and another pins and registers fresh memory on a second file
/// (every registration faulting in thousands of pages), a third process's NOPs are
/// never held up for the length of a registration.
pub fn pinning_and_mmap_do_not_stall_others() -> Result<(), String> {
    const RUN: Duration = Duration::from_secs(4);
    // Large enough that pinning takes far longer than a NOP, small enough that even the
    // debug kernel on a loaded host completes several registrations in RUN.
    const PIN: usize = 8 << 20;
    let mapper = Child::spawn(|| {
        let r = open(Builder::new(16))?;
        let len = r.params().sq_off.map_len as usize;
        let (t, mut n) = (Instant::now(), 0);
        while t.elapsed() < RUN {
            let p = map(r.device(), len, OFF_SQ_RING).map_err(|e| format!("mmap: {e}"))?;
            // SAFETY: mapped just above.
            unsafe { libc::munmap(p.cast(), len) };
            n += 1;
        }
        Ok(n.to_string())
    })?;
    let pinner = Child::spawn(|| {
        let mut r = open(Builder::new(16))?;
        let (t, mut took) = (Instant::now(), Vec::new());
        while t.elapsed() < RUN {
            // Fresh, never touched: the registration faults every page in.
            // SAFETY: a private anonymous mapping, unmapped below.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    PIN,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err("mmap".into());
            }
            let start = Instant::now();
            let (mr, _) = ok(
                &mut r,
                Sqe::reg_mr(1, p as u64, PIN as u32, MrAccess::LOCAL_WRITE),
            )?;
            took.push(start.elapsed());
            ok(&mut r, Sqe::dereg_mr(2, mr as u32))?;
            // SAFETY: mapped above; deregistered, so unpinned.
            unsafe { libc::munmap(p, PIN) };
        }
        let (median, _) = median_p99(&mut took);
        Ok(format!("{} {}", took.len(), median.as_micros()))
    })?;
    let mut r = open(Builder::new(16))?;
    let (t, mut lat) = (Instant::now(), Vec::new());
    while t.elapsed() < RUN {
        let start = Instant::now();
        run(&mut r, Sqe::nop(1))?;
        lat.push(start.elapsed());
    }
    let maps = mapper.join()?;
    let pins = pinner.join()?;
    let (regs, reg_us) = pins
        .split_once(' ')
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
        .ok_or_else(|| format!("pinner reported {pins:?}"))?;
    let (median, p99) = median_p99(&mut lat);
    let reg = Duration::from_micros(reg_us);
    // A NOP that waited for a registration takes about as long as one; a scheduling
    // hiccup of the emulated CPUs may hold up one or two, never most registrations.
    let held = lat.iter().filter(|&&l| l > reg / 2).count();
    println!(
        "  {} NOPs: median {median:?}, p99 {p99:?}, max {:?}, {held} over half a \
         registration; meanwhile {maps} mmap/munmap cycles and {regs} registrations of \
         {} MiB (median {reg:?})",
        lat.len(),
        lat[lat.len() - 1],
        PIN >> 20
    );
    check(regs >= 3, || format!("only {regs} registrations completed"))?;
    check(held * 4 < regs as usize, || {
        format!("{held} NOPs waited over half a registration ({reg:?}) during {regs} registrations")
    })
}

/// One process keeps breaking a shared pair (READs of memory it deregisters under them,
/// see `recovery::break_pair`) while another READs through the same pair: the breaker
/// is throttled, and the victim keeps at least 90% of its READs. The victim retries a
/// failed READ after 1 ms, as an application would, so the rate counts time lost
/// rather than how fast a recovering pair refuses.
pub fn a_pair_breaker_is_throttled() -> Result<(), String> {
    const RUN: Duration = Duration::from_secs(8);
    // Service 5 of 2 pairs: pair 1, which both processes share.
    const SERVICE: u32 = 5;
    let breaker = Child::spawn(|| {
        let mut r = open(Builder::new(16))?;
        let buf = Buf::new(512);
        let (local, _) = ok(
            &mut r,
            Sqe::reg_mr(2, buf.addr(), 64, MrAccess::LOCAL_WRITE),
        )?;
        let (t, mut broke, mut throttled) = (Instant::now(), 0, 0);
        while t.elapsed() < RUN {
            match break_pair(&mut r, SERVICE, local as u32, &buf)?.failure() {
                Some(Reason::RemoteError) => broke += 1,
                Some(Reason::Throttled) => throttled += 1,
                _ => {}
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        check(broke > 0, || "the breaker never broke the pair".into())?;
        Ok(format!("{broke} {throttled}"))
    })?;
    let mut r = open(Builder::new(16))?;
    let (v, _) = ok(
        &mut r,
        Sqe::pair(1, LOCAL_GID, SERVICE as u16, SERVICE as u16),
    )?;
    let v = v as u32;
    let buf = Buf::new(512);
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let (mr, descriptor) = ok(&mut r, Sqe::reg_mr(2, buf.addr(), 4096, access))?;
    let (rmr, _) = ok(&mut r, Sqe::import_mr(3, v, buf.addr(), 4096, descriptor))?;
    let read = Sqe::one_sided(
        Opcode::Read,
        4,
        v,
        mr as u32,
        buf.addr() + 2048,
        8,
        rmr as u32,
        buf.addr(),
    );
    let (t, mut good, mut total) = (Instant::now(), 0u64, 0u64);
    while t.elapsed() < RUN {
        total += 1;
        if run(&mut r, read)?.res == 8 {
            good += 1;
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let report = breaker.join()?;
    let rate = good as f64 / total as f64;
    println!(
        "  victim: {good} of {total} READs succeeded ({:.1}%); breaker (pairs broken, sends throttled): {report}",
        100.0 * rate
    );
    check(rate >= 0.9, || {
        format!("the victim kept only {:.1}% of its READs", 100.0 * rate)
    })
}

/// A ring closed with a receive still posted (its process exited) keeps nothing: the
/// receive is cancelled at once, the shared pair is untouched, and a pair of virtual
/// QPs connected afterwards to the same service exchanges its message (the closing
/// ring's half of a link is never joined).
pub fn a_dead_rings_receive_is_reclaimed() -> Result<(), String> {
    // Service 7 of 2 pairs: pair 1.
    const SERVICE: u32 = 7;
    Child::spawn(|| {
        let mut r = open(Builder::new(16))?;
        let (v, _) = ok(
            &mut r,
            Sqe::pair(1, LOCAL_GID, SERVICE as u16, SERVICE as u16),
        )?;
        let buf = Box::leak(Box::new(Buf::new(8)));
        let (mr, _) = ok(
            &mut r,
            Sqe::reg_mr(2, buf.addr(), 64, MrAccess::LOCAL_WRITE),
        )?;
        let recv = Sqe::two_sided(Opcode::Recv, 3, v as u32, mr as u32, buf.addr(), 64);
        // SAFETY: the buffer is leaked: it outlives the receive.
        unsafe { r.submission().push(&recv) }.map_err(|e| e.to_string())?;
        r.submit().map_err(|e| e.to_string())?;
        Ok(String::new())
    })?
    .join()?;
    let mut r = open(Builder::new(16))?;
    let (from, _) = ok(
        &mut r,
        Sqe::pair(1, LOCAL_GID, SERVICE as u16, SERVICE as u16),
    )?;
    let (to, _) = ok(
        &mut r,
        Sqe::pair(2, LOCAL_GID, SERVICE as u16, SERVICE as u16),
    )?;
    let mut buf = Buf::new(64);
    let (mr, _) = ok(
        &mut r,
        Sqe::reg_mr(3, buf.addr(), 512, MrAccess::LOCAL_WRITE),
    )?;
    buf.bytes_mut()[..8].copy_from_slice(b"for you!");
    let t = Instant::now();
    for e in [
        Sqe::two_sided(Opcode::Recv, 10, to as u32, mr as u32, buf.addr() + 256, 64),
        Sqe::two_sided(Opcode::Send, 11, from as u32, mr as u32, buf.addr(), 8),
    ] {
        // SAFETY: the buffer is registered and outlives the wait.
        unsafe { r.submission().push(&e) }.map_err(|e| e.to_string())?;
    }
    let c = collect(&mut r, 2)?;
    println!(
        "  message after a dead ring's receive: RECV {:?}, SEND {:?} in {:?}",
        c[0].failure()
            .map_or(c[0].res.to_string(), |f| format!("{f:?}")),
        c[1].failure(),
        t.elapsed()
    );
    check(
        c[0].res == 8 && c[1].res == 8 && &buf.bytes()[256..264] == b"for you!",
        || format!("RECV {:?}, SEND {:?}", c[0], c[1]),
    )
}

/// One process's message exchange for `messages_reach_their_addressee`: connects to
/// `service`, waits for `start`, posts `k` receives, and half a second later sends its
/// peer `k` numbered messages, and checks that every message it received is its peer's, in order.
fn exchange(service: u32, pair: u8, role: u8, k: usize, start: Instant) -> Result<String, String> {
    const SLOT: usize = 64;
    const LEN: u32 = 16;
    let mut r = open(Builder::new(128))?;
    let (v, qpn) = ok(
        &mut r,
        Sqe::pair(1, LOCAL_GID, service as u16, service as u16),
    )?;
    let v = v as u32;
    let mut buf = Buf::new(2 * k * SLOT / 8);
    let size = (2 * k * SLOT) as u32;
    let (mr, _) = ok(
        &mut r,
        Sqe::reg_mr(2, buf.addr(), size, MrAccess::LOCAL_WRITE),
    )?;
    let mr = mr as u32;
    let out = k * SLOT;
    for i in 0..k {
        let m = &mut buf.bytes_mut()[out + i * SLOT..][..LEN as usize];
        m.fill(0xa5);
        m[..3].copy_from_slice(&[pair, role, i as u8]);
    }
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    let a = buf.addr();
    for i in 0..k {
        let at = a + (i * SLOT) as u64;
        let e = Sqe::two_sided(Opcode::Recv, 100 + i as u64, v, mr, at, SLOT as u32);
        // SAFETY: the buffer is registered and outlives the wait below.
        unsafe { r.submission().push(&e) }.map_err(|e| e.to_string())?;
    }
    // Every process's receives are in before anyone sends (so a shared receive queue
    // would hold all four processes' receives, interleaved).
    r.submit().map_err(|e| e.to_string())?;
    std::thread::sleep(
        (start + Duration::from_millis(500)).saturating_duration_since(Instant::now()),
    );
    for i in 0..k {
        let at = a + (out + i * SLOT) as u64;
        let e = Sqe::two_sided(Opcode::Send, 1000 + i as u64, v, mr, at, LEN);
        // SAFETY: as above.
        unsafe { r.submission().push(&e) }.map_err(|e| e.to_string())?;
    }
    let c = collect(&mut r, 2 * k)?;
    for (i, c) in c.iter().enumerate() {
        check(c.res == LEN as i32, || format!("entry {i}: {c:?}"))?;
    }
    for i in 0..k {
        let got = &buf.bytes()[i * SLOT..][..LEN as usize];
        check(
            got[..3] == [pair, 1 - role, i as u8] && got[3..].iter().all(|&b| b == 0xa5),
            || {
                format!(
                    "pair {pair} process {role}: receive {i} got {:?} (pair, sender, number)",
                    &got[..3]
                )
            },
        )?;
    }
    Ok(qpn.to_string())
}

/// Two pairs of processes on one pooled pair (services 9 and 11 both map to pair 1)
/// exchange messages at once, both ways: every payload lands with its addressee, in
/// order. Without demultiplexing, the four processes' receives share the pair's two
/// hardware receive queues and take each other's messages.
pub fn messages_reach_their_addressee() -> Result<(), String> {
    const K: usize = 24;
    let start = Instant::now() + Duration::from_millis(1500);
    let kids = [(9, 1, 0), (11, 2, 0), (9, 1, 1), (11, 2, 1)]
        .map(|(service, pair, role)| Child::spawn(move || exchange(service, pair, role, K, start)));
    let mut qpns = Vec::new();
    for k in kids {
        qpns.push(k?.join()?);
    }
    println!(
        "  2 pairs x 2 processes x {K} messages at once over QPs {qpns:?}: each to its addressee, in order"
    );
    Ok(())
}

/// A revocation stops importers at once, in the kernel: ring A exports two MRs, ring B
/// imports both and READs through them (the kernel then uses each import as resolved,
/// without the exports' lock); A deregisters one: B's next READ through it fails
/// `BadDescriptor`, and READs through the other, resolved again once, go on.
pub fn a_revoked_export_stops_its_importer() -> Result<(), String> {
    let (mut a, mut b) = (open(Builder::new(16))?, open(Builder::new(16))?);
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let (mut x, mut y) = (Buf::new(512), Buf::new(512));
    x.bytes_mut()[..8].copy_from_slice(&0x1111u64.to_le_bytes());
    y.bytes_mut()[..8].copy_from_slice(&0x2222u64.to_le_bytes());
    let (xmr, xd) = ok(&mut a, Sqe::reg_mr(1, x.addr(), 4096, access))?;
    let (ymr, yd) = ok(&mut a, Sqe::reg_mr(2, y.addr(), 4096, access))?;
    let (v, _) = ok(&mut b, Sqe::connect(3, LOCAL_GID, 0))?;
    let v = v as u32;
    let mut mine = Buf::new(8);
    let (mr, _) = ok(
        &mut b,
        Sqe::reg_mr(4, mine.addr(), 64, MrAccess::LOCAL_WRITE),
    )?;
    let (rx, _) = ok(&mut b, Sqe::import_mr(5, v, x.addr(), 4096, xd))?;
    let (ry, _) = ok(&mut b, Sqe::import_mr(6, v, y.addr(), 4096, yd))?;
    let mut read = |b: &mut Ring, ud: u64, rmr: i32, at: u64| {
        mine.bytes_mut()[..8].fill(0);
        let c = run(
            b,
            Sqe::one_sided(
                Opcode::Read,
                ud,
                v,
                mr as u32,
                mine.addr(),
                8,
                rmr as u32,
                at,
            ),
        )?;
        Ok::<_, String>((c, u64::from_le_bytes(mine.bytes()[..8].try_into().unwrap())))
    };
    for ud in 10..13 {
        let (c, got) = read(&mut b, ud, ry, y.addr())?;
        check(c.res == 8 && got == 0x2222, || {
            format!("READ through y: {c:?}, {got:#x}")
        })?;
    }
    ok(&mut a, Sqe::dereg_mr(7, xmr as u32))?;
    let (c, _) = read(&mut b, 20, rx, x.addr())?;
    check(c.failure() == Some(Reason::BadDescriptor), || {
        format!("READ through the revoked import: {c:?}")
    })?;
    for ud in 21..24 {
        let (c, got) = read(&mut b, ud, ry, y.addr())?;
        check(c.res == 8 && got == 0x2222, || {
            format!("READ through y after x's revocation: {c:?}, {got:#x}")
        })?;
    }
    ok(&mut a, Sqe::dereg_mr(8, ymr as u32))?;
    let (c, _) = read(&mut b, 30, ry, y.addr())?;
    println!(
        "  after revoking x: x's READ {:?}, y's READs go on; after y's: {:?}",
        Reason::BadDescriptor,
        c.failure()
    );
    check(c.failure() == Some(Reason::BadDescriptor), || {
        format!("READ through y after its revocation: {c:?}")
    })
}
