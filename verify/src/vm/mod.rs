//! The QEMU test bed: boot the test kernel with a busybox initramfs, the host root
//! read-only over 9p and rxe on a veth; load the module; run one command; judge. Or
//! several guests on one Ethernet segment ([`run_cluster`]), each with its own rxe,
//! address and module, running a command per role.

pub mod console;
pub mod hub;
pub mod initramfs;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use initramfs::Cpio;

/// The guest's PID 1.
const INIT: &str = include_str!("../../guest/init.sh");
/// Where Debian's busybox-static puts its binary.
const BUSYBOX: &str = "/bin/busybox";

/// One VM run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The kernel image (bzImage).
    pub kernel: PathBuf,
    /// Modules the guest's /init loads first, from a directory of .ko files and an
    /// `order` file naming them, dependencies first: what a distribution kernel keeps out
    /// of its image (virtio_net, 9p, rxe, ib_uverbs, rdma_ucm).
    pub initrd_modules: Option<PathBuf>,
    /// The module to load before rxe0 is created, if any; exported to the command as
    /// `KRCORE_KO`.
    pub module: Option<PathBuf>,
    /// Parameters for loading it (`K=V`); exported to the command as `KRCORE_PARAMS`.
    pub module_params: Vec<String>,
    /// The command, run inside the host root at `cwd`.
    pub command: Vec<String>,
    /// Working directory of the command (a host path; the host root is mounted).
    pub cwd: PathBuf,
    /// Extra environment for the command.
    pub env: Vec<(String, String)>,
    /// Hard limit on the whole run, boot included.
    pub timeout: Duration,
    /// Guest memory, in MiB.
    pub memory_mib: u32,
    /// Guest CPUs.
    pub cpus: u32,
    /// Print the whole kernel log even when the run is clean.
    pub show_dmesg: bool,
    /// With several guests: one in N RoCE data frames each sends is lost, at random
    /// (hub.rs).
    pub lose_one_in: Option<u32>,
    /// The guest's clock counts instructions: one nanosecond each (TCG only).
    pub icount: bool,
    /// Under TCG, emulate all of a guest's CPUs in one host thread.
    pub tcg_single: bool,
}

/// How a run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The command ran and the kernel log is clean: its exit status.
    Exited(i32),
    /// The kernel log shows a WARNING, BUG, Oops, panic or leak (with the command's exit
    /// status, if it got one).
    KernelProblem(Option<i32>, Vec<String>),
    /// The guest could not be set up (mount, network, insmod, rxe): what failed.
    SetupFailed(String),
    /// The guest never reported an exit status (the kernel died or hung).
    NoExit,
    /// The hard timeout struck.
    TimedOut(Duration),
}

impl Outcome {
    /// The process exit code for this outcome: the command's own status when clean.
    pub fn code(&self) -> i32 {
        match self {
            Outcome::Exited(c) => *c,
            Outcome::KernelProblem(..) => 101,
            Outcome::SetupFailed(_) => 103,
            Outcome::NoExit => 102,
            Outcome::TimedOut(_) => 124,
        }
    }
}

/// Whether QEMU can use KVM here: /dev/kvm must open and the CPU must advertise
/// virtualization (a /dev/kvm without vmx/svm hangs QEMU at boot).
pub fn kvm_usable() -> bool {
    let cpu_ok = std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("flags") && (l.contains(" vmx") || l.contains(" svm")))
        })
        .unwrap_or(false);
    cpu_ok
        && std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok()
}

/// Single-quotes `s` for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The guest's step between two scenes of one boot (`krcore_scene N`).
const SCENE: &str = include_str!("../../guest/scene.sh");

/// The script the guest runs inside the host root: `command` with the run's environment
/// and `extra` environment.
fn command_script(cfg: &Config, command: &[String], extra: &[(String, String)]) -> String {
    let mut s = script_env(cfg, extra);
    let argv: Vec<String> = command.iter().map(|a| sh_quote(a)).collect();
    s += &format!("exec {}\n", argv.join(" "));
    s
}

/// A role's script: its scenes one after another under `sh -c`, each after
/// `krcore_scene` put the guest back as it booted and met the other guests; the first
/// scene to fail ends it with its status.
fn scenes_script(cfg: &Config, scenes: &[String], extra: &[(String, String)]) -> String {
    if let [one] = scenes {
        return command_script(cfg, &["/bin/sh".into(), "-c".into(), one.clone()], extra);
    }
    let mut s = script_env(cfg, extra);
    s += SCENE;
    for (i, scene) in scenes.iter().enumerate() {
        let n = i + 1;
        if n > 1 {
            s += &format!("krcore_scene {n} || exit 125\n");
        }
        s += &format!("echo {}\n", sh_quote(&format!("[scene {n}] {scene}")));
        s += &format!(
            "/bin/sh -c {} || {{ rc=$?; echo \"[scene {n}] failed with status $rc\" >&2; exit $rc; }}\n",
            sh_quote(scene)
        );
    }
    s
}

/// The script's first lines: the shell, the working directory and the environment.
fn script_env(cfg: &Config, extra: &[(String, String)]) -> String {
    let mut s = String::from("#!/bin/sh\n");
    s += &format!("cd {} || exit 125\n", sh_quote(&cfg.cwd.to_string_lossy()));
    if let Some(m) = &cfg.module {
        s += &format!("export KRCORE_KO={}\n", sh_quote(&m.to_string_lossy()));
        s += &format!(
            "export KRCORE_PARAMS={}\n",
            sh_quote(&cfg.module_params.join(" "))
        );
    }
    for (k, v) in cfg.env.iter().chain(extra) {
        s += &format!("export {}={}\n", k, sh_quote(v));
    }
    s
}

/// Writes the initramfs for `cfg` to `path`, its `/cmd.sh` running `script`.
fn write_initramfs(cfg: &Config, script: &str, path: &Path) -> Result<(), String> {
    let busybox = std::fs::read(BUSYBOX)
        .map_err(|e| format!("{BUSYBOX}: {e} (run 'make deps': busybox-static)"))?;
    let mut c = Cpio::default();
    for d in ["/bin", "/dev", "/proc", "/sys", "/mnt", "/tmp", "/run"] {
        c.dir(d);
    }
    // The kernel opens /dev/console for PID 1 before anything is mounted.
    c.chardev("/dev/console", 5, 1);
    c.file("/bin/busybox", 0o755, &busybox)
        .symlink("/bin/sh", "busybox");
    c.file("/init", 0o755, INIT.as_bytes());
    if let Some(dir) = &cfg.initrd_modules {
        let order = dir.join("order");
        let names = std::fs::read_to_string(&order).map_err(|e| {
            format!(
                "{}: {e} (run 'scripts/stock-kernel.sh prepare')",
                order.display()
            )
        })?;
        c.dir("/lib").dir("/lib/krcore-modules");
        for name in names.lines().filter(|l| !l.is_empty()) {
            if name.contains('/') {
                return Err(format!("{}: {name:?} is not a file name", order.display()));
            }
            let ko = std::fs::read(dir.join(name))
                .map_err(|e| format!("{}: {e}", dir.join(name).display()))?;
            c.file(&format!("/lib/krcore-modules/{name}"), 0o644, &ko);
        }
        c.file("/lib/krcore-modules/order", 0o644, names.as_bytes());
    }
    c.file("/cmd.sh", 0o755, script.as_bytes());
    if let Some(m) = &cfg.module {
        let m = std::fs::canonicalize(m)
            .map_err(|e| format!("module {}: {e} (run 'make kmod')", m.display()))?;
        c.file("/module-path", 0o644, m.to_string_lossy().as_bytes());
        c.file(
            "/module-params",
            0o644,
            cfg.module_params.join(" ").as_bytes(),
        );
    }
    let mut f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    c.finish(&mut f)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Boots of a guest that came up without its TSC clocksource before giving up.
const BOOTS: u32 = 3;

/// Boots the VM, streams its console to stdout, and judges the run; boots again (up to
/// `BOOTS` times) when the guest came up on a coarse clock, which would make every
/// timing in it a multiple of a 4 ms tick.
pub fn run(cfg: &Config) -> Result<Outcome, String> {
    for boot in 1..=BOOTS {
        match boot_once(cfg)? {
            Ok(outcome) => return Ok(outcome),
            Err(clock) => eprintln!("[vm] the guest booted on the {clock} clocksource, not the TSC; booting again ({boot}/{BOOTS})"),
        }
    }
    Ok(Outcome::SetupFailed(format!(
        "the guest booted without a TSC clocksource {BOOTS} times"
    )))
}

/// A guest's place on a multi-guest segment.
struct Net {
    /// Its index (0-based) and the hub's directory.
    index: usize,
    dir: PathBuf,
}

/// Guest `i`'s address on the segment (TEST-NET-1, inside the guests only).
pub fn node_addr(i: usize) -> String {
    format!("192.0.2.{}", 11 + i)
}

/// The host's TSC rate in kHz, measured once against the monotonic clock over 200 ms
/// (the fastest of three tries, so a preemption inside one does not count).
fn host_tsc_khz() -> u64 {
    static KHZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *KHZ.get_or_init(|| {
        (0..3)
            .map(|_| {
                // SAFETY: RDTSC has no preconditions on x86_64.
                let (t, c) = (Instant::now(), unsafe { core::arch::x86_64::_rdtsc() });
                std::thread::sleep(Duration::from_millis(200));
                // SAFETY: as above.
                let cycles = unsafe { core::arch::x86_64::_rdtsc() } - c;
                (cycles as u128 * 1_000_000 / t.elapsed().as_nanos().max(1)) as u64
            })
            .min()
            .expect("three tries")
    })
}

/// The QEMU command for one guest booting `initrd`.
fn qemu_command(cfg: &Config, initrd: &Path, net: Option<&Net>) -> Command {
    // The guest's clock. Under TCG a guest's RDTSC reads the host's TSC. Left to itself
    // the guest calibrates it against the PIT, which fails on a loaded host ("Unable to
    // calibrate against PIT"); with no HPET or PM timer to check against, it then marks
    // the TSC unstable and runs on jiffies (4 ms ticks) for the whole boot. So it is told
    // the rate the runner measured on the host (tsc_early_khz: no calibration; with no
    // reference timer the refinement keeps it), and trusted (tsc=reliable: no watchdog).
    // Counting instructions, the TSC is QEMU's instruction count (-icount shift=0: one
    // tick each), so the guest is told it runs at 1 GHz: a nanosecond is an instruction.
    let tsc_khz = if cfg.icount {
        1_000_000
    } else {
        host_tsc_khz()
    };
    let mut append = format!("console=ttyS0 panic=-1 quiet tsc=reliable tsc_early_khz={tsc_khz}");
    let mut qemu = Command::new("qemu-system-x86_64");
    qemu.args([
        "-nodefaults",
        "-no-reboot",
        "-display",
        "none",
        "-serial",
        "stdio",
    ])
    .args([
        "-m",
        &cfg.memory_mib.to_string(),
        "-smp",
        &cfg.cpus.to_string(),
    ])
    .arg("-kernel")
    .arg(&cfg.kernel)
    .arg("-initrd")
    .arg(initrd)
    .args([
        "-virtfs",
        "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
    ]);
    if let Some(n) = net {
        let (local, remote) = (
            hub::guest_socket(&n.dir, n.index),
            hub::hub_socket(&n.dir, n.index),
        );
        qemu.args([
            "-netdev",
            &format!(
                "dgram,id=seg,local.type=unix,local.path={},remote.type=unix,remote.path={}",
                local.display(),
                remote.display()
            ),
            "-device",
            &format!(
                "virtio-net-pci,netdev=seg,mac=52:54:00:12:34:{:02x}",
                0x11 + n.index
            ),
        ]);
        // Unknown key=value boot parameters reach /init as environment variables. A
        // cluster guest runs functional tests, not timings: any clock will do.
        append += &format!(" krcore_addr={} krcore_anyclock=1", node_addr(n.index));
    }
    // For a guest that hangs: KRCORE_VM_MONITOR=1 gives each cluster guest a QEMU monitor
    // at /tmp/krcore-monitor-<index>.sock, and its `nmi` command makes the guest panic
    // with the running task's stack on the console (the test kernels have no lockup
    // detector).
    if let (Some(n), Some(_)) = (net, std::env::var_os("KRCORE_VM_MONITOR")) {
        append += " unknown_nmi_panic=1";
        qemu.args([
            "-monitor",
            &format!("unix:/tmp/krcore-monitor-{}.sock,server,nowait", n.index),
        ]);
    }
    qemu.args(["-append", &append]);
    if cfg.icount {
        // Deterministic counting needs one TCG thread; an idle guest's clock jumps to
        // its next timer rather than sleeping.
        qemu.args([
            "-accel",
            "tcg,thread=single",
            "-cpu",
            "max",
            "-icount",
            "shift=0,sleep=off",
        ]);
    } else if kvm_usable() {
        qemu.args(["-enable-kvm", "-cpu", "host"]);
    } else if cfg.tcg_single {
        qemu.args(["-accel", "tcg,thread=single", "-cpu", "max"]);
    } else {
        qemu.args(["-accel", "tcg,thread=multi", "-cpu", "max"]);
    }
    qemu
}

/// A guest booting: its console streamed to stdout (each line after `prefix`) and kept.
struct Running {
    child: Child,
    rx: mpsc::Receiver<String>,
    reader: Option<std::thread::JoinHandle<()>>,
    transcript: String,
    /// When QEMU was started.
    started: Instant,
}

impl Running {
    /// Starts `qemu`.
    fn spawn(mut qemu: Command, prefix: String) -> Result<Running, String> {
        let mut child = qemu
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("qemu-system-x86_64: {e} (run 'make deps': qemu-system-x86)"))?;
        // Stream the console line by line while keeping a transcript; the dmesg dump is
        // held back and shown only when asked or when something went wrong.
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut in_dmesg = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let t = line.trim_end_matches('\r');
                in_dmesg |= t == console::DMESG_START;
                if !in_dmesg {
                    println!("{prefix}{t}");
                    let _ = std::io::stdout().flush();
                }
                in_dmesg &= t != console::DMESG_END;
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Running {
            child,
            rx,
            reader: Some(reader),
            transcript: String::new(),
            started: Instant::now(),
        })
    }

    /// Takes in what the console printed, passing each new line to `saw`; whether
    /// QEMU has exited.
    fn poll(&mut self, mut saw: impl FnMut(&str)) -> Result<bool, String> {
        while let Ok(line) = self.rx.try_recv() {
            saw(&line);
            self.transcript.push_str(&line);
            self.transcript.push('\n');
        }
        Ok(self.child.try_wait().map_err(|e| e.to_string())?.is_some())
    }

    /// Kills QEMU.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The whole console, once QEMU has exited.
    fn finish(mut self) -> String {
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.transcript.extend(self.rx.try_iter().map(|l| l + "\n"));
        self.transcript
    }
}

/// One boot: the run's outcome, or the coarse clocksource it came up with.
fn boot_once(cfg: &Config) -> Result<Result<Outcome, String>, String> {
    check_kernel(cfg)?;
    let dir = run_dir("vm")?;
    let initrd = dir.join("initramfs.cpio");
    write_initramfs(cfg, &command_script(cfg, &cfg.command, &[]), &initrd)?;
    eprintln!(
        "[vm] booting {} ({}), timeout {}s",
        cfg.kernel.display(),
        if kvm_usable() { "KVM" } else { "TCG" },
        cfg.timeout.as_secs()
    );
    let mut guest = Running::spawn(qemu_command(cfg, &initrd, None), String::new())?;
    let start = Instant::now();
    let timed_out = loop {
        if guest.poll(|_| {})? {
            break false;
        }
        if start.elapsed() > cfg.timeout {
            guest.kill();
            break true;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let transcript = guest.finish();
    let _ = std::fs::remove_dir_all(&dir);
    let verdict = console::judge(&transcript);
    if let Some(clock) = verdict.coarse_clock {
        return Ok(Err(clock));
    }
    let outcome = judged(cfg, verdict, timed_out, "[vm]");
    eprintln!("[vm] {:.1}s wall", start.elapsed().as_secs_f64());
    Ok(Ok(outcome))
}

/// Fails early when the kernel image is missing.
fn check_kernel(cfg: &Config) -> Result<(), String> {
    if cfg.kernel.is_file() {
        Ok(())
    } else {
        Err(format!(
            "kernel image {} not found (run 'make kernel')",
            cfg.kernel.display()
        ))
    }
}

/// A fresh scratch directory for one run.
fn run_dir(what: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("krcore-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// The kernel log's lines of the module's own.
fn module_lines(verdict: &console::Verdict) -> Vec<&String> {
    verdict
        .dmesg
        .iter()
        .filter(|l| l.contains("krcore:"))
        .collect()
}

/// Prints what the kernel log says (all of it when asked or when something went wrong,
/// else krcore's last lines), each line after `tag`, and turns the verdict into an
/// outcome.
fn judged(cfg: &Config, verdict: console::Verdict, timed_out: bool, tag: &str) -> Outcome {
    let problem = timed_out || verdict.exit != Some(0) || !verdict.kernel_problems.is_empty();
    if cfg.show_dmesg || problem {
        eprintln!("{tag} ---- guest kernel log ----");
        for l in &verdict.dmesg {
            eprintln!("{l}");
        }
        eprintln!("{tag} ---- end of kernel log ----");
        if !verdict.output.is_empty() {
            eprintln!("{tag} the command's last lines, again:");
            for l in &verdict.output {
                eprintln!("{tag}   {l}");
            }
        }
        // Last, for a summary that keeps only the end: the module's last lines and
        // what the command said went wrong.
        let ours = module_lines(&verdict);
        for l in &ours[ours.len().saturating_sub(4)..] {
            eprintln!("{tag} module: {l}");
        }
        for l in &verdict.why {
            eprintln!("{tag} why: {l}");
        }
    } else {
        // The module's own lines, the last few of them (load/unload tests print many).
        let ours = module_lines(&verdict);
        if ours.len() > 6 {
            eprintln!("{tag} dmesg: ... {} earlier krcore lines", ours.len() - 6);
        }
        for l in &ours[ours.len().saturating_sub(6)..] {
            eprintln!("{tag} dmesg: {l}");
        }
    }
    if !verdict.boot_problems.is_empty() {
        eprintln!("{tag} note: the kernel reported problems during boot, before krcore was loaded (not counted):");
        for l in verdict.boot_problems.iter().take(4) {
            eprintln!("{tag}   {l}");
        }
    }
    if timed_out {
        Outcome::TimedOut(cfg.timeout)
    } else if let Some(what) = verdict.setup_failed {
        Outcome::SetupFailed(what)
    } else if !verdict.kernel_problems.is_empty() {
        Outcome::KernelProblem(verdict.exit, verdict.kernel_problems)
    } else {
        verdict.exit.map_or(Outcome::NoExit, Outcome::Exited)
    }
}

/// One guest of a multi-guest run: its name and the commands it runs, one per scene.
#[derive(Clone, Debug)]
pub struct Role {
    /// Its name (console prefix, `KRCORE_NODE`).
    pub name: String,
    /// Its command in each scene (run by `sh -c`): several scenarios in one boot, every
    /// guest starting scene N once all finished scene N - 1 (guest/scene.sh).
    pub scenes: Vec<String>,
}

/// A guest's console line asking the runner to kill a guest (`kill ROLE`: SIGKILL to its
/// QEMU, as a machine losing power) or to boot a killed one again (`boot ROLE`: its role's
/// command runs again with `KRCORE_BOOT` one higher), for the failure tests.
pub const CLUSTER_CONTROL: &str = "KRCORE-CLUSTER: ";

/// One guest of a cluster run, across its boots.
struct Member {
    running: Option<Running>,
    /// Boots so far (the running one included).
    boots: u32,
    /// How its last boot ended: `None` while running; `Some(true)` when killed (on
    /// request or at the timeout).
    ended: Option<bool>,
    /// Killed on request and not booted again: its outcome is not judged.
    killed_on_request: bool,
    /// Consoles of its boots that were killed on request (no kernel log dump: their
    /// console lines are what is scanned).
    earlier: String,
}

/// Boots one guest per role on one Ethernet segment ([`hub`]); guest `i` gets address
/// [`node_addr`]`(i)` on eth0 with rxe0 on it, and its command sees `KRCORE_NODE` (its
/// role), `KRCORE_ADDR` (its address), `KRCORE_PEERS` (`role=address` of every guest,
/// space-separated) and `KRCORE_BOOT` (1, then higher after each boot again). Every
/// console is streamed with its role as prefix. A guest may kill another and boot it
/// again by printing [`CLUSTER_CONTROL`] lines. Each guest's last boot is judged as a
/// single run is, and the outcome of each role returned (a guest killed on request and
/// left down counts as exited 0: its killer's command says whether that went right).
/// The timeout covers the whole run; when one guest fails, the others still run to their
/// own end (a peer's failure shows in their commands).
pub fn run_cluster(cfg: &Config, roles: &[Role]) -> Result<Vec<(String, Outcome)>, String> {
    check_kernel(cfg)?;
    let dir = run_dir("cluster")?;
    let peers = roles
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{}={}", r.name, node_addr(i)))
        .collect::<Vec<_>>()
        .join(" ");
    let hub = hub::Hub::start(&dir, roles.len(), cfg.lose_one_in)?;
    eprintln!(
        "[vm] booting {} guests of {} ({}), timeout {}s",
        roles.len(),
        cfg.kernel.display(),
        if kvm_usable() { "KVM" } else { "TCG" },
        cfg.timeout.as_secs()
    );
    let start = Instant::now();
    let boot = |i: usize, n: u32| -> Result<Running, String> {
        let r = &roles[i];
        let env = [
            ("KRCORE_NODE".to_string(), r.name.clone()),
            ("KRCORE_ADDR".to_string(), node_addr(i)),
            ("KRCORE_PEERS".to_string(), peers.clone()),
            ("KRCORE_BOOT".to_string(), n.to_string()),
        ];
        let initrd = dir.join(format!("initramfs-{i}.cpio"));
        write_initramfs(cfg, &scenes_script(cfg, &r.scenes, &env), &initrd)?;
        // A killed QEMU leaves its socket behind; the new one binds the same path.
        let _ = std::fs::remove_file(hub::guest_socket(&dir, i));
        let net = Net {
            index: i,
            dir: dir.clone(),
        };
        Running::spawn(
            qemu_command(cfg, &initrd, Some(&net)),
            format!("[{}] ", r.name),
        )
    };
    let mut members = Vec::new();
    for i in 0..roles.len() {
        members.push(Member {
            running: Some(boot(i, 1)?),
            boots: 1,
            ended: None,
            killed_on_request: false,
            earlier: String::new(),
        });
    }
    // Until every guest has ended, or the timeout: then kill what is left.
    loop {
        let mut requests = Vec::new();
        for (m, r) in members
            .iter_mut()
            .zip(roles)
            .filter(|(m, _)| m.ended.is_none())
        {
            let g = m.running.as_mut().expect("running");
            let up = g.started.elapsed().as_secs_f64();
            if g.poll(|line| {
                let line = line.trim_end_matches('\r');
                if let Some(req) = line.split(CLUSTER_CONTROL).nth(1) {
                    requests.push(req.trim().to_string());
                }
                // What a guest costs to bring up, for the README's figure and for
                // whoever waits on a slow boot.
                if line == console::RUN_START {
                    eprintln!(
                        "[vm] {} up (booted, module loaded, rxe0 on eth0) after {up:.1}s",
                        r.name
                    );
                }
            })? {
                m.ended = Some(false);
                eprintln!(
                    "[vm] {} down after {:.1}s",
                    r.name,
                    g.started.elapsed().as_secs_f64()
                );
            }
        }
        for req in requests {
            let (verb, role) = req.split_once(' ').unwrap_or((req.as_str(), ""));
            let Some(i) = roles.iter().position(|r| r.name == role) else {
                eprintln!("[vm] ignored cluster request {req:?}: no role {role:?}");
                continue;
            };
            let m = &mut members[i];
            match verb {
                "kill" if m.ended.is_none() => {
                    let mut g = m.running.take().expect("running");
                    g.kill();
                    m.earlier += &g.finish();
                    m.ended = Some(true);
                    m.killed_on_request = true;
                    eprintln!("[vm] killed {role} on request");
                }
                // A guest booted again runs its command from the start: its scenes
                // would not meet the others' again.
                "boot" if m.killed_on_request && roles[i].scenes.len() > 1 => {
                    eprintln!("[vm] refused to boot {role} again: a run of several scenes boots each guest once")
                }
                "boot" if m.killed_on_request => {
                    m.boots += 1;
                    m.running = Some(boot(i, m.boots)?);
                    m.ended = None;
                    m.killed_on_request = false;
                    eprintln!("[vm] booting {role} again (boot {})", m.boots);
                }
                _ => eprintln!(
                    "[vm] ignored cluster request {req:?} ({role} is {})",
                    if m.ended.is_none() { "running" } else { "down" }
                ),
            }
        }
        if members.iter().all(|m| m.ended.is_some()) {
            break;
        }
        if start.elapsed() > cfg.timeout {
            for m in members.iter_mut().filter(|m| m.ended.is_none()) {
                m.running.as_mut().expect("running").kill();
                m.ended = Some(true);
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(hub);
    let mut out = Vec::new();
    for (m, r) in members.into_iter().zip(roles) {
        let tag = format!("[{}]", r.name);
        let killed_boots = console::judge(&m.earlier).kernel_problems;
        let outcome = match m.running {
            _ if !killed_boots.is_empty() => Outcome::KernelProblem(None, killed_boots),
            Some(g) => {
                let verdict = console::judge(&g.finish());
                judged(cfg, verdict, m.ended == Some(true), &tag)
            }
            None => {
                eprintln!(
                    "{tag} killed on request and left down after {} boot(s)",
                    m.boots
                );
                Outcome::Exited(0)
            }
        };
        out.push((r.name.clone(), outcome));
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("[vm] {:.1}s wall", start.elapsed().as_secs_f64());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config {
            kernel: "/k".into(),
            initrd_modules: None,
            module: Some("/m.ko".into()),
            module_params: vec!["a=1".into()],
            command: vec![],
            cwd: "/w".into(),
            env: vec![],
            timeout: Duration::from_secs(1),
            memory_mib: 1,
            cpus: 1,
            show_dmesg: false,
            lose_one_in: None,
            icount: false,
            tcg_single: false,
        }
    }

    #[test]
    fn one_scene_is_the_command_itself() {
        let s = scenes_script(&cfg(), &["run it".into()], &[]);
        assert!(s.ends_with("exec '/bin/sh' '-c' 'run it'\n"), "{s}");
        assert!(!s.contains("krcore_scene"));
    }

    #[test]
    fn scenes_run_in_turn_each_after_the_step() {
        let s = scenes_script(&cfg(), &["one".into(), "two".into(), "three".into()], &[]);
        let at = |w: &str| s.find(w).unwrap_or_else(|| panic!("{w:?} not in {s}"));
        assert!(at("krcore_scene() {") < at("/bin/sh -c 'one' ||"));
        assert!(at("/bin/sh -c 'one' ||") < at("krcore_scene 2 ||"));
        assert!(at("krcore_scene 2 ||") < at("/bin/sh -c 'two' ||"));
        assert!(at("/bin/sh -c 'two' ||") < at("krcore_scene 3 ||"));
        assert!(at("krcore_scene 3 ||") < at("/bin/sh -c 'three' ||"));
        assert!(!s.contains("krcore_scene 1 "));
        assert!(
            !s.contains("exec "),
            "a scene's failure must end the script, not replace it"
        );
    }
}
