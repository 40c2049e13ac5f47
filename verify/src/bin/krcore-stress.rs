//! Fuzzes krcore's whole surface from user space, as hostile users would: several
//! processes, each with several threads, issuing random ioctls with random arguments,
//! setting up rings, writing random and mutated entries and tails into them, entering
//! with random flags, mapping and unmapping random offsets, closing, forking and
//! killing, for a given time. Run in the VM (ideally on the debug kernel): the kernel
//! log must stay clean and every process must finish.
//!
//! ```text
//! krcore-stress [SECONDS [PROCESSES [THREADS [SEED]]]]     (default 20 3 3 1)
//! ```

use std::os::fd::AsRawFd;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use krcore_uring::abi::compat::OneOp;
use krcore_uring::abi::ioctl::{
    IOC_DIRECT, IOC_ENTER, IOC_ENTER_VALUE, IOC_ONE, IOC_QUERY_DEVICES, IOC_REGISTER_EVENTFD,
    IOC_SETUP,
};
use krcore_uring::abi::layout::{EnterArgs, EnterFlags, OFF_CQ_RING, OFF_SQ_RING};
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device, Ring};
use verify::rng::Rng;

/// ::ffff:192.0.2.1, rxe0's RoCE v2 GID in the test VM.
const LOCAL_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1];
/// Bytes of memory each thread registers pieces of.
const ARENA: usize = 1 << 16;

/// One thread's state: a few files and rings, an arena, handles it has seen.
struct Actor {
    rng: Rng,
    files: Vec<Device>,
    rings: Vec<Ring>,
    arena: &'static mut [u8],
    /// Results and aux values of past completions: plausible handles and descriptors.
    seen: Vec<u64>,
    ops: u64,
}

impl Actor {
    fn new(seed: u64) -> Actor {
        Actor {
            rng: Rng::new(seed),
            files: Vec::new(),
            rings: Vec::new(),
            // Leaked: the NIC may write into it until the process exits.
            arena: Box::leak(vec![0u8; ARENA].into_boxed_slice()),
            seen: vec![0, 1, 0x0100_0000, 0x0100_0001],
            ops: 0,
        }
    }

    fn handle(&mut self) -> u64 {
        if self.rng.chance(80) {
            let i = self.rng.below(self.seen.len() as u64) as usize;
            self.seen[i]
        } else {
            self.rng.next_u64()
        }
    }

    /// A random entry: a valid template with random handles, sometimes bit-flipped.
    fn sqe(&mut self) -> Sqe {
        let base = self.arena.as_ptr() as u64;
        let off = self.rng.below(ARENA as u64 / 2) & !7;
        let len = [8, 64, 4096, 1 << 20, 0][self.rng.below(5) as usize] as u32;
        let ud = self.rng.next_u64();
        let (v, mr, rmr) = (
            self.handle() as u32,
            self.handle() as u32,
            self.handle() as u32,
        );
        let access = MrAccess::from_bits_truncate(self.rng.below(16) as u32);
        let mut s = match self.rng.below(12) {
            0 => Sqe::nop(ud),
            1 => Sqe::reg_mr(ud, base + off, len.min((ARENA as u64 - off) as u32), access),
            2 => Sqe::dereg_mr(ud, mr),
            3 => match self.rng.below(8) as u16 {
                0 => Sqe::connect(ud, LOCAL_GID, 0),
                s => Sqe::pair(ud, LOCAL_GID, s, s),
            },
            4 => Sqe::disconnect(ud, v),
            5 => {
                let d = self.handle();
                Sqe::import_mr(ud, v, base + off, len, d)
            }
            6 => Sqe::one_sided(Opcode::Read, ud, v, mr, base + off, len, rmr, base),
            7 => Sqe::one_sided(Opcode::Write, ud, v, mr, base + off, len, rmr, base + 8),
            8 => Sqe::two_sided(Opcode::Send, ud, v, mr, base + off, len.min(4096)),
            9 => Sqe::two_sided(Opcode::Recv, ud, v, mr, base + off, len.min(4096)),
            10 => Sqe::faa(ud, v, mr, base + off, rmr, base, 1),
            _ => Sqe::cas(ud, v, mr, base + off, rmr, base, 0, 1),
        };
        if self.rng.chance(15) {
            // SAFETY: Sqe is 64 bytes of plain integers.
            let bytes: &mut [u8; 64] = unsafe { &mut *(&mut s as *mut Sqe).cast() };
            let i = self.rng.below(64) as usize;
            bytes[i] ^= 1 << self.rng.below(8);
        }
        s
    }

    fn step(&mut self) {
        self.ops += 1;
        match self.rng.below(100) {
            0..=4 => {
                if self.files.len() < 4 {
                    if let Ok(d) = Device::open() {
                        self.files.push(d);
                    }
                }
            }
            5..=7 => {
                if !self.files.is_empty() {
                    let i = self.rng.below(self.files.len() as u64) as usize;
                    self.files.swap_remove(i);
                }
            }
            8..=12 => {
                if self.rings.len() < 3 {
                    let mut b = Builder::new(1 << self.rng.below(7));
                    if self.rng.chance(20) {
                        b = b.sqpoll(self.rng.below(50) as u32);
                    }
                    if let Ok(r) = Device::open().and_then(|d| b.build(d)) {
                        self.rings.push(r);
                    }
                }
            }
            13..=14 => {
                if !self.rings.is_empty() {
                    let i = self.rng.below(self.rings.len() as u64) as usize;
                    self.rings.swap_remove(i);
                }
            }
            15..=54 => self.entries(),
            55..=74 => self.raw_ioctl(),
            75..=84 => self.raw_mmap(),
            85..=94 => self.raw_enter(),
            _ => self.hostile_tail(),
        }
    }

    /// Random entries through a ring, then an enter, then reaping.
    fn entries(&mut self) {
        if self.rings.is_empty() {
            return;
        }
        let i = self.rng.below(self.rings.len() as u64) as usize;
        let n = 1 + self.rng.below(8);
        for _ in 0..n {
            let s = self.sqe();
            // SAFETY: entries name only the leaked arena, valid for the process's life.
            if unsafe { self.rings[i].submission().push(&s) }.is_err() {
                break;
            }
        }
        let _ = self.rings[i].submit();
        let got: Vec<(i32, u64)> = self.rings[i]
            .completions()
            .map(|c| (c.res, c.aux))
            .collect();
        for (res, aux) in got {
            if res > 0 {
                self.seen.push(res as u64);
            }
            if aux != 0 {
                self.seen.push(aux);
            }
        }
        if self.seen.len() > 256 {
            self.seen.drain(4..132);
        }
    }

    fn fd(&mut self) -> Option<i32> {
        let mut fds: Vec<i32> = self.files.iter().map(|d| d.as_raw_fd()).collect();
        fds.extend(self.rings.iter().map(|r| r.device().as_raw_fd()));
        (!fds.is_empty()).then(|| fds[self.rng.below(fds.len() as u64) as usize])
    }

    /// A random command with a random argument: a buffer of random bytes, null, a
    /// kernel address, or an unmapped one.
    fn raw_ioctl(&mut self) {
        let Some(fd) = self.fd() else { return };
        let known = [
            IOC_QUERY_DEVICES,
            IOC_SETUP,
            IOC_ENTER,
            IOC_ENTER_VALUE,
            IOC_REGISTER_EVENTFD,
            IOC_ONE,
            IOC_DIRECT,
        ];
        let mut cmd = known[self.rng.below(known.len() as u64) as usize];
        if self.rng.chance(30) {
            cmd ^= 1 << self.rng.below(32);
        }
        let mut buf = [0u8; 256];
        buf.iter_mut().for_each(|b| *b = self.rng.below(256) as u8);
        if cmd == IOC_ENTER || cmd == IOC_ONE {
            // Mostly no waiting (a wait is interrupted by the alarm anyway).
            buf[8..16].fill(0);
        }
        if cmd == IOC_ONE && self.rng.chance(70) {
            let mut op = OneOp {
                sqe: self.sqe(),
                flags: self.rng.below(4) as u32,
                ..OneOp::default()
            };
            op.resv = [0; 6];
            // SAFETY: OneOp is 128 bytes of plain integers.
            buf[..128].copy_from_slice(unsafe { &*(&op as *const OneOp).cast::<[u8; 128]>() });
        }
        let arg: usize = match self.rng.below(10) {
            0 => 0,
            1 => 0xffff_8000_0000_0000,
            2 => 0x1000,
            _ => buf.as_mut_ptr() as usize,
        };
        // SAFETY: the kernel validates every argument; the buffer outlives the call.
        unsafe { libc::ioctl(fd, cmd as _, arg) };
    }

    fn raw_mmap(&mut self) {
        let Some(fd) = self.fd() else { return };
        let off = [
            OFF_SQ_RING,
            OFF_CQ_RING,
            0x1000,
            self.rng.next_u64() & !0xfff,
        ][self.rng.below(4) as usize];
        let len = (1 + self.rng.below(64) as usize) * 4096;
        let scribble = self.rng.chance(30).then(|| {
            let at = self.rng.below(256) as usize * 4;
            (at, self.rng.next_u64() as u32)
        });
        map_and_write(fd, off, len, scribble);
    }

    fn raw_enter(&mut self) {
        let Some(fd) = self.fd() else { return };
        let flags = EnterFlags::from_bits_truncate(self.rng.below(8) as u32);
        let args = EnterArgs {
            to_submit: self.rng.below(64) as u32,
            min_complete: if self.rng.chance(20) { 1 } else { 0 },
            flags: flags.bits() | if self.rng.chance(5) { 1 << 30 } else { 0 },
            timeout_us: if self.rng.chance(10) {
                self.rng.below(2_000) as u32
            } else {
                0
            },
            ..EnterArgs::default()
        };
        match self.rng.below(4) {
            // SAFETY: `args` outlives the call; a wait is interrupted by the alarm.
            0 | 1 => unsafe { libc::ioctl(fd, IOC_ENTER as _, &args as *const EnterArgs) },
            // The same by value, or any 64-bit value at all (the kernel takes every one).
            // SAFETY: IOC_ENTER_VALUE's argument is a value; a wait is interrupted.
            2 => unsafe { libc::ioctl(fd, IOC_ENTER_VALUE as _, args.pack().unwrap_or(0)) },
            // SAFETY: as above.
            _ => unsafe { libc::ioctl(fd, IOC_ENTER_VALUE as _, self.rng.next_u64()) },
        };
    }

    /// A second mapping of a ring's SQ with a random tail.
    fn hostile_tail(&mut self) {
        if self.rings.is_empty() {
            return;
        }
        let i = self.rng.below(self.rings.len() as u64) as usize;
        let r = &self.rings[i];
        let (len, tail) = (
            r.params().sq_off.map_len as usize,
            r.params().sq_off.tail as usize,
        );
        let fd = r.device().as_raw_fd();
        let value = self.rng.next_u64() as u32;
        map_and_write(fd, OFF_SQ_RING, len, Some((tail, value)));
        let _ = self.rings[i].submit();
    }
}

/// Maps `len` bytes of `fd` at `off` (shared), stores `value` at byte `at` of the
/// mapping when asked, as a hostile application would, and unmaps it. Mapping
/// failures are the kernel's answer, not an error here.
fn map_and_write(fd: i32, off: u64, len: usize, write: Option<(usize, u32)>) {
    // SAFETY: a fresh mapping, written only inside its length, unmapped before return.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            off as libc::off_t,
        );
        if p == libc::MAP_FAILED {
            return;
        }
        if let Some((at, value)) = write.filter(|(at, _)| at + 4 <= len) {
            std::ptr::write_volatile(p.cast::<u8>().add(at).cast::<u32>(), value);
        }
        libc::munmap(p, len);
    }
}

extern "C" fn on_alarm(_: libc::c_int) {}

/// Makes SIGALRM interrupt blocking calls (a handler that does nothing, no SA_RESTART).
fn catch_alarm() {
    // SAFETY: installs a handler that does nothing.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut());
    }
}

/// Interrupts the calling thread's blocking calls every 20 ms: a waiting enter returns
/// `EINTR` instead of waiting for completions that random entries will never produce.
/// (A process-wide timer would signal whichever thread it likes.)
fn alarm_this_thread_every_20ms() {
    // SAFETY: a timer signalling this thread only; it lives until the thread exits
    // (leaked on purpose: the threads end with the process).
    unsafe {
        let mut sev: libc::sigevent = std::mem::zeroed();
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = libc::SIGALRM;
        sev.sigev_notify_thread_id = libc::gettid();
        let mut timer: libc::timer_t = std::mem::zeroed();
        if libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer) == 0 {
            let every = libc::timespec {
                tv_sec: 0,
                tv_nsec: 20_000_000,
            };
            let t = libc::itimerspec {
                it_interval: every,
                it_value: every,
            };
            libc::timer_settime(timer, 0, &t, std::ptr::null_mut());
        }
    }
}

/// One worker process: `threads` actors for `secs`, forking short-lived children now
/// and then (killed or left to exit).
fn worker(secs: u64, threads: u64, seed: u64) -> u64 {
    catch_alarm();
    let end = Instant::now() + Duration::from_secs(secs);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                alarm_this_thread_every_20ms();
                let mut a = Actor::new(seed * 1000 + t + 1);
                let mut slowest = Duration::ZERO;
                while Instant::now() < end {
                    let s = Instant::now();
                    a.step();
                    if a.rng.chance(1) && t == 0 {
                        fork_and_maybe_kill(&mut a);
                    }
                    slowest = slowest.max(s.elapsed());
                }
                let closing = Instant::now();
                let ops = a.ops;
                drop(a.rings);
                drop(a.files);
                println!(
                    "[stress]   thread {t}: {ops} operations, slowest {slowest:?}, closing took {:?}",
                    closing.elapsed()
                );
                ops
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
}

/// A child that carries the parent's files and maps into a few random steps, then
/// exits, or is killed with SIGKILL mid-way.
fn fork_and_maybe_kill(a: &mut Actor) {
    // SAFETY: the child only runs the actor (no locks another thread could hold are
    // needed: no printing) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // Timers are not inherited, nor are the parent's ring mappings (VM_DONTCOPY):
        // the child keeps the files but forgets the rings' user-space views.
        alarm_this_thread_every_20ms();
        std::mem::forget(std::mem::take(&mut a.rings));
        for _ in 0..50 {
            a.step();
        }
        // SAFETY: leaves without running destructors shared with the parent.
        unsafe { libc::_exit(0) };
    }
    if pid > 0 {
        if a.rng.chance(50) {
            std::thread::sleep(Duration::from_millis(a.rng.below(5)));
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
}

/// The surface stress program: `krcore-stress [SECS [PROCS [THREADS [SEED]]]]`.
#[derive(clap::Parser)]
#[command(name = "krcore-stress", args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    worker: Option<Worker>,
    /// How long, in seconds.
    #[arg(default_value_t = 20)]
    secs: u64,
    /// Worker processes.
    #[arg(default_value_t = 3)]
    procs: u64,
    /// Threads per worker.
    #[arg(default_value_t = 3)]
    threads: u64,
    /// Seeds the random sequence.
    #[arg(default_value_t = 1)]
    seed: u64,
}

#[derive(clap::Subcommand)]
enum Worker {
    /// One worker process (started by the program itself).
    Worker { secs: u64, threads: u64, seed: u64 },
}

fn main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    if let Some(Worker::Worker {
        secs,
        threads,
        seed,
    }) = cli.worker
    {
        let start = Instant::now();
        let ops = worker(secs, threads, seed);
        println!(
            "[stress] worker {seed} done: {ops} operations in {:?}",
            start.elapsed()
        );
        return ExitCode::SUCCESS;
    }
    let (secs, procs, threads, seed) = (cli.secs, cli.procs, cli.threads, cli.seed);
    println!("[stress] {procs} processes x {threads} threads for {secs} s, seed {seed}");
    let me = std::env::current_exe().expect("own path");
    let start = Instant::now();
    let children: Vec<_> = (0..procs)
        .map(|p| {
            Command::new(&me)
                .args([
                    "worker",
                    &secs.to_string(),
                    &threads.to_string(),
                    &(seed * 100 + p).to_string(),
                ])
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let mut ok = true;
    for mut c in children {
        ok &= c.wait().map(|s| s.success()).unwrap_or(false);
    }
    // Everything the workers held is released: the module sees no file any more.
    let took = start.elapsed();
    println!("[stress] all workers finished in {took:?}");
    if !ok || took > Duration::from_secs(secs + 60) {
        println!("[stress] FAILED: a worker failed or hung");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
