//! `verify`: krcore's test-bed command.
//!
//! ```text
//! verify vm --kernel BZIMAGE [--module KO] [--module-param K=V]... [--timeout SECS] [--memory MIB] [--cpus N]
//!           [--env K=V]... [--dmesg] -- COMMAND [ARGS...]
//! verify vm --kernel BZIMAGE ... --nodes N --role NAME:COMMAND ...   (N roles)
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

use verify::vm::{self, Outcome};

const USAGE: &str = "usage: verify vm --kernel BZIMAGE [--module KO] [--module-param K=V]... [--timeout SECS] [--memory MIB] [--cpus N] [--env K=V]... [--dmesg] (-- COMMAND [ARGS...] | --nodes N --role NAME:COMMAND...)";

/// A parsed `vm` command: one guest, or one per role.
struct VmArgs {
    cfg: vm::Config,
    roles: Vec<vm::Role>,
}

fn parse_vm(args: &[String]) -> Result<VmArgs, String> {
    let mut cfg = vm::Config {
        kernel: PathBuf::new(),
        module: None,
        module_params: Vec::new(),
        command: Vec::new(),
        cwd: std::env::current_dir().map_err(|e| e.to_string())?,
        env: Vec::new(),
        timeout: Duration::from_secs(600),
        memory_mib: 2048,
        cpus: 2,
        show_dmesg: false,
    };
    let mut roles = Vec::new();
    let mut nodes = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--kernel" => cfg.kernel = value("--kernel")?.into(),
            "--module" => cfg.module = Some(value("--module")?.into()),
            "--module-param" => {
                let kv = value("--module-param")?;
                if !kv.contains('=') || kv.contains(char::is_whitespace) {
                    return Err(format!(
                        "--module-param takes K=V without spaces, not {kv:?}"
                    ));
                }
                cfg.module_params.push(kv);
            }
            "--timeout" => {
                cfg.timeout = Duration::from_secs(
                    value("--timeout")?
                        .parse()
                        .map_err(|_| "--timeout takes seconds")?,
                )
            }
            "--memory" => {
                cfg.memory_mib = value("--memory")?
                    .parse()
                    .map_err(|_| "--memory takes MiB")?
            }
            "--cpus" => {
                cfg.cpus = value("--cpus")?
                    .parse()
                    .map_err(|_| "--cpus takes a number")?
            }
            "--env" => {
                let kv = value("--env")?;
                let (k, v) = kv.split_once('=').ok_or("--env takes K=V")?;
                cfg.env.push((k.into(), v.into()));
            }
            "--dmesg" => cfg.show_dmesg = true,
            "--nodes" => {
                nodes = Some(
                    value("--nodes")?
                        .parse::<usize>()
                        .map_err(|_| "--nodes takes a number")?,
                )
            }
            "--role" => {
                let r = value("--role")?;
                let (name, cmd) = r.split_once(':').ok_or("--role takes NAME:COMMAND")?;
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                    return Err(format!("role name {name:?}: letters, digits and '-' only"));
                }
                roles.push(vm::Role {
                    name: name.into(),
                    command: vec!["/bin/sh".into(), "-c".into(), cmd.into()],
                });
            }
            "--" => {
                cfg.command = it.by_ref().cloned().collect();
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    match nodes {
        Some(n) if n < 2 || n != roles.len() => {
            return Err(format!(
                "--nodes {n} needs at least 2 nodes and one --role each ({} given)",
                roles.len()
            ))
        }
        None if !roles.is_empty() => return Err("--role needs --nodes".into()),
        _ => {}
    }
    if cfg.kernel.as_os_str().is_empty() || (cfg.command.is_empty() == roles.is_empty()) {
        return Err(USAGE.into());
    }
    Ok(VmArgs { cfg, roles })
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match args.split_first() {
        Some((cmd, rest)) if cmd == "vm" => parse_vm(rest),
        _ => Err(USAGE.into()),
    };
    let VmArgs { cfg, roles } = match parsed {
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
