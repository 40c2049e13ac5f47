//! `verify`: krcore's test-bed command.
//!
//! ```text
//! verify vm --kernel BZIMAGE [--initrd-modules DIR] [--module KO] [--module-param K=V]... [--timeout SECS] [--memory MIB] [--cpus N]
//!           [--env K=V]... [--dmesg] -- COMMAND [ARGS...]
//! verify vm --kernel BZIMAGE ... --nodes N --role NAME:COMMAND ...   (N roles; a name
//!           given again runs its next scene in the same boot)
//! ```
//! Boots the test VM, runs COMMAND inside it and exits with its status; 101 when the
//! kernel log shows a WARNING/BUG/Oops/panic/leak, 102 when the guest never reported,
//! 103 when the guest's setup (mounts, network, insmod, rxe) failed, 124 on timeout.
//! With `--nodes`, boots one guest per role on one Ethernet segment (each its own rxe,
//! address and module; COMMAND runs under `sh -c`), prints each role's outcome and
//! exits with the first role's nonzero code, or 0.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use verify::vm::{self, Outcome};

/// krcore's test bed.
#[derive(Parser)]
#[command(
    name = "verify",
    about = "krcore's test bed: boots test VMs and runs commands in them"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Boots the test VM (or one per role) and runs the command inside.
    Vm(VmArgs),
}

/// A `vm` command: one guest running COMMAND, or one per `--role`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["command", "role"])))]
struct VmArgs {
    /// The kernel to boot.
    #[arg(long)]
    kernel: PathBuf,
    /// Kernel modules the guest loads before anything else (a distribution kernel's
    /// virtio, 9p and RDMA drivers): a directory of .ko files and an `order` file naming
    /// them, dependencies first.
    #[arg(long)]
    initrd_modules: Option<PathBuf>,
    /// The krcore module to load.
    #[arg(long)]
    module: Option<PathBuf>,
    /// A module parameter, K=V (repeatable).
    #[arg(long = "module-param", value_parser = module_param)]
    module_params: Vec<String>,
    /// Seconds before the run is failed as hung.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Guest memory, MiB.
    #[arg(long, default_value_t = 2048)]
    memory: u32,
    /// Guest CPUs.
    #[arg(long, default_value_t = 2)]
    cpus: u32,
    /// An environment variable for the command, K=V (repeatable).
    #[arg(long, value_parser = key_value)]
    env: Vec<(String, String)>,
    /// Print the guest's kernel log even when the run passes.
    #[arg(long)]
    dmesg: bool,
    /// Count instructions: the guest's clock advances one nanosecond per instruction
    /// (QEMU's -icount, single-threaded TCG), so its timings read as instruction counts
    /// that no host noise moves.
    #[arg(long, conflicts_with = "nodes")]
    icount: bool,
    /// Under TCG, run all of a guest's CPUs in one host thread. A kernel that patches its
    /// own text after boot (a distribution kernel's static keys) can catch a CPU on a
    /// half-patched instruction under multi-threaded TCG: Debian's 7.3 took an int3
    /// Oops in sched_clock_cpu in 1 of about 12 boots.
    #[arg(long)]
    tcg_single: bool,
    /// Guests on one Ethernet segment, one per --role.
    #[arg(long, requires = "role", value_parser = clap::value_parser!(u64).range(2..))]
    nodes: Option<u64>,
    /// With --nodes: lose one in N RoCE data frames each guest sends (not the CM's), at
    /// random, so the transport retransmits.
    #[arg(long, requires = "nodes", value_parser = clap::value_parser!(u32).range(2..))]
    lose_one_in: Option<u32>,
    /// NAME:COMMAND, the command (run by sh -c) of the guest NAME. Repeatable; a NAME
    /// given again is its guest's next scene: several scenarios in one boot, each guest
    /// put back as booted and every guest met before each scene (guest/scene.sh).
    #[arg(long, requires = "nodes", value_parser = role)]
    role: Vec<(String, String)>,
    /// The command to run in the one guest.
    #[arg(last = true)]
    command: Vec<String>,
}

fn module_param(kv: &str) -> Result<String, String> {
    if !kv.contains('=') || kv.contains(char::is_whitespace) {
        return Err(format!("K=V without spaces, not {kv:?}"));
    }
    Ok(kv.into())
}

fn key_value(kv: &str) -> Result<(String, String), String> {
    let (k, v) = kv.split_once('=').ok_or("K=V")?;
    Ok((k.into(), v.into()))
}

fn role(r: &str) -> Result<(String, String), String> {
    let (name, cmd) = r.split_once(':').ok_or("NAME:COMMAND")?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(format!("role name {name:?}: letters, digits and '-' only"));
    }
    Ok((name.into(), cmd.into()))
}

/// The `--role` arguments as guests, in the order their names first appear: a name given
/// again adds a scene to its guest, and every guest must have as many.
fn guests(roles: Vec<(String, String)>) -> Result<Vec<vm::Role>, String> {
    let mut guests: Vec<vm::Role> = Vec::new();
    for (name, cmd) in roles {
        match guests.iter_mut().find(|g| g.name == name) {
            Some(g) => g.scenes.push(cmd),
            None => guests.push(vm::Role {
                name,
                scenes: vec![cmd],
            }),
        }
    }
    if let Some(g) = guests
        .iter()
        .find(|g| g.scenes.len() != guests[0].scenes.len())
    {
        return Err(format!(
            "role {} has {} scenes and role {} {}: every guest needs a command in each scene",
            guests[0].name,
            guests[0].scenes.len(),
            g.name,
            g.scenes.len()
        ));
    }
    Ok(guests)
}

impl VmArgs {
    /// The runner's configuration and roles, checked against each other.
    fn config(self) -> Result<(vm::Config, Vec<vm::Role>), String> {
        let roles = guests(self.role)?;
        if let Some(n) = self.nodes {
            if n as usize != roles.len() {
                return Err(format!(
                    "--nodes {n} needs a --role for each ({} named)",
                    roles.len()
                ));
            }
        }
        let cfg = vm::Config {
            kernel: self.kernel,
            initrd_modules: self.initrd_modules,
            module: self.module,
            module_params: self.module_params,
            command: self.command,
            cwd: std::env::current_dir().map_err(|e| e.to_string())?,
            env: self.env,
            timeout: Duration::from_secs(self.timeout),
            memory_mib: self.memory,
            cpus: self.cpus,
            show_dmesg: self.dmesg,
            lose_one_in: self.lose_one_in,
            icount: self.icount,
            tcg_single: self.tcg_single,
        };
        Ok((cfg, roles))
    }
}

/// Says how a run ended, as `tag`.
fn say(tag: &str, outcome: &Outcome) {
    match outcome {
        Outcome::Exited(0) => eprintln!("{tag} command succeeded; kernel log clean"),
        Outcome::Exited(c) => eprintln!("{tag} command failed with exit status {c}"),
        Outcome::KernelProblem(exit, lines) => {
            eprintln!("{tag} FAILED: the kernel log shows problems (command exit {exit:?}):");
            for l in lines {
                eprintln!("{tag}   {l}");
            }
        }
        Outcome::SetupFailed(what) => eprintln!("{tag} FAILED: guest setup failed at: {what} (see the console above)"),
        Outcome::NoExit => eprintln!("{tag} FAILED: the guest never reported an exit status (the kernel died or hung; see above)"),
        Outcome::TimedOut(t) => eprintln!("{tag} FAILED: timed out after {}s", t.as_secs()),
    }
}

fn main() -> ExitCode {
    let Command::Vm(args) = Cli::parse().command;
    let (cfg, roles) = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("verify: {e}");
            return ExitCode::from(2);
        }
    };
    let outcomes = if roles.is_empty() {
        vm::run(&cfg).map(|o| vec![("vm".to_string(), o)])
    } else {
        vm::run_cluster(&cfg, &roles)
    };
    let outcomes = match outcomes {
        Ok(o) => o,
        Err(e) => {
            eprintln!("verify: {e}");
            return ExitCode::from(2);
        }
    };
    for (name, o) in &outcomes {
        say(&format!("[{name}]"), o);
    }
    let code = outcomes
        .iter()
        .map(|(_, o)| o.code())
        .find(|&c| c != 0)
        .unwrap_or(0);
    ExitCode::from(code.clamp(0, 255) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str, cmd: &str) -> (String, String) {
        (name.into(), cmd.into())
    }

    #[test]
    fn a_role_named_again_is_its_next_scene() {
        let g = guests(vec![r("a", "x"), r("b", "y"), r("a", "z"), r("b", "w")]).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].name.as_str(), g[0].scenes.clone()),
            ("a", vec!["x".into(), "z".into()])
        );
        assert_eq!(
            (g[1].name.as_str(), g[1].scenes.clone()),
            ("b", vec!["y".into(), "w".into()])
        );
    }

    #[test]
    fn every_guest_needs_each_scene() {
        let e = guests(vec![r("a", "x"), r("b", "y"), r("a", "z")]).unwrap_err();
        assert!(e.contains("role a has 2 scenes and role b 1"), "{e}");
    }
}
