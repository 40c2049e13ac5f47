//! `verify`: krcore's test-bed command.
//!
//! ```text
//! verify vm --kernel BZIMAGE [--module KO] [--module-param K=V]... [--timeout SECS] [--memory MIB] [--cpus N]
//!           [--env K=V]... [--dmesg] -- COMMAND [ARGS...]
//! ```
//! Boots the test VM, runs COMMAND inside it and exits with its status; 101 when the
//! kernel log shows a WARNING/BUG/Oops/panic/leak, 102 when the guest never reported,
//! 103 when the guest's setup (mounts, network, insmod, rxe) failed, 124 on timeout.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use verify::vm::{self, Outcome};

const USAGE: &str = "usage: verify vm --kernel BZIMAGE [--module KO] [--module-param K=V]... [--timeout SECS] [--memory MIB] [--cpus N] [--env K=V]... [--dmesg] -- COMMAND [ARGS...]";

fn parse_vm(args: &[String]) -> Result<vm::Config, String> {
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
            "--" => {
                cfg.command = it.by_ref().cloned().collect();
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if cfg.kernel.as_os_str().is_empty() || cfg.command.is_empty() {
        return Err(USAGE.into());
    }
    Ok(cfg)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match args.split_first() {
        Some((cmd, rest)) if cmd == "vm" => parse_vm(rest),
        _ => Err(USAGE.into()),
    };
    let cfg = match cfg {
        Ok(c) => c,
        Err(e) => {
            eprintln!("verify: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = match vm::run(&cfg) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("verify: {e}");
            return ExitCode::from(2);
        }
    };
    match &outcome {
        Outcome::Exited(0) => eprintln!("[vm] command succeeded; kernel log clean"),
        Outcome::Exited(c) => eprintln!("[vm] command failed with exit status {c}"),
        Outcome::KernelProblem(exit, lines) => {
            eprintln!("[vm] FAILED: the kernel log shows problems (command exit {exit:?}):");
            for l in lines {
                eprintln!("[vm]   {l}");
            }
        }
        Outcome::SetupFailed(what) => eprintln!("[vm] FAILED: guest setup failed at: {what} (see the console above)"),
        Outcome::NoExit => eprintln!("[vm] FAILED: the guest never reported an exit status (the kernel died or hung; see above)"),
        Outcome::TimedOut(t) => eprintln!("[vm] FAILED: timed out after {}s", t.as_secs()),
    }
    ExitCode::from(outcome.code().clamp(0, 255) as u8)
}
