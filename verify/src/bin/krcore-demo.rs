//! `make demo`: what krcore sees inside the test VM, and the verbs substrate it will
//! multiplex. Prints the device list through `/dev/krcore` and runs an RC loopback READ
//! with plain user-space verbs, timing each step.

use std::time::Instant;

fn main() -> std::process::ExitCode {
    let t = Instant::now();
    let dev = match krcore_uring::Device::open() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("krcore-demo: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let list = match dev.query_devices() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("krcore-demo: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!(
        "krcore ABI version {}: {} row(s) in {:.0} us",
        list.abi_version,
        list.rows.len(),
        t.elapsed().as_secs_f64() * 1e6
    );
    println!(
        "  {:<8} {:>4} {:>6} {:>5}  gid",
        "device", "port", "state", "index"
    );
    for r in &list.rows {
        let idx = if r.has_gid() {
            r.gid_index.to_string()
        } else {
            "-".into()
        };
        println!(
            "  {:<8} {:>4} {:>6} {:>5}  {}",
            r.name(),
            r.port,
            r.port_state,
            idx,
            r.gid_string()
        );
    }
    let t = Instant::now();
    match verify::verbs::loopback_read("rxe0") {
        Ok(b) => {
            println!(
                "verbs loopback on rxe0 (open, PD, CQ, 2 RC QPs, connect, MR, 8 B READ): {:?} in {:.1} ms",
                String::from_utf8_lossy(&b),
                t.elapsed().as_secs_f64() * 1e3
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("krcore-demo: verbs loopback: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
