//! Seeing inside: the module's counters (debugfs) and each ring's (fdinfo) move with
//! what a ring does; the `krcore` tool shows devices, counters, rings, peers, latency
//! and bandwidth; the dynamic debug points log a CONNECT and a failure when switched on.

use std::os::fd::AsRawFd;

use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::sqe::Sqe;
use krcore_uring::abi::stats::Counters;
use krcore_uring::{Builder, Device};

use crate::datapath::LOCAL_GID;
use crate::harness::{check, sh};

const KRCORE: &str = "target/release/krcore";
const DYNDBG: &str = "/sys/kernel/debug/dynamic_debug/control";

/// The device's counters as debugfs shows them (the first device's section).
fn device_counters() -> Result<Counters, String> {
    let text = std::fs::read_to_string("/sys/kernel/debug/krcore/counters")
        .map_err(|e| format!("debugfs counters: {e}"))?;
    let body: String = text
        .lines()
        .skip_while(|l| !l.starts_with("device "))
        .skip(1)
        .take_while(|l| !l.starts_with("device "))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut c = Counters::ZERO;
    check(c.read("", &body) > 0, || format!("no counters in: {text}"))?;
    Ok(c)
}

pub fn counters_tool_and_debug_points() -> Result<(), String> {
    let before = device_counters()?;
    std::fs::write(DYNDBG, "module krcore +p").map_err(|e| format!("dynamic debug: {e}"))?;
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut ring = Builder::new(8).build(dev).map_err(|e| e.to_string())?;
    let vqp = ring.pair(LOCAL_GID, 31, 31).map_err(|e| e.to_string())?;
    let mut bad = Sqe::nop(0xbad);
    bad.opcode = 200;
    // SAFETY: names no memory.
    unsafe { ring.submission().push(&bad) }.map_err(|e| e.to_string())?;
    ring.submit_and_wait(1).map_err(|e| e.to_string())?;
    let got: Vec<_> = ring.completions().collect();
    check(
        got.len() == 1 && got[0].failure() == Some(Reason::BadOpcode),
        || format!("{got:?}"),
    )?;
    std::fs::write(DYNDBG, "module krcore -p").map_err(|e| format!("dynamic debug: {e}"))?;

    // This ring's own counters, in its fdinfo.
    let fd = ring.as_raw_fd();
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .map_err(|e| format!("fdinfo: {e}"))?;
    let mut mine = Counters::ZERO;
    mine.read("krcore-", &info);
    check(
        mine.connects == 1 && mine.failed[Reason::BadOpcode as usize] == 1 && mine.taken == 2,
        || format!("fdinfo: {info}"),
    )?;
    check(info.contains("krcore-vqps 1\n"), || {
        format!("fdinfo: {info}")
    })?;
    // The device's, in debugfs: this ring's work is in them.
    let after = device_counters()?;
    check(
        after.connects > before.connects
            && after.failed[Reason::BadOpcode as usize] > before.failed[Reason::BadOpcode as usize],
        || format!("debugfs counters did not move: {before:?} -> {after:?}"),
    )?;
    println!(
        "  fdinfo: connects {}, bad_opcode {}; debugfs: connects {} -> {}",
        mine.connects,
        mine.failed[Reason::BadOpcode as usize],
        before.connects,
        after.connects
    );

    // The debug points, in the kernel log.
    let log = sh(&["dmesg"])?;
    let connect = log
        .lines()
        .rev()
        .find(|l| l.contains("CONNECT ::ffff:192.0.2.1 service 31"));
    let failed = log
        .lines()
        .rev()
        .find(|l| l.contains("request bad failed: -22 (bad_opcode)"));
    check(connect.is_some() && failed.is_some(), || {
        format!(
            "debug points missing from the kernel log (tail: {:?})",
            log.lines().rev().take(8).collect::<Vec<_>>()
        )
    })?;
    println!("  dynamic debug: {}", connect.unwrap_or_default().trim());
    println!("  dynamic debug: {}", failed.unwrap_or_default().trim());

    // The tool.
    let devices = sh(&[KRCORE, "devices"])?;
    check(
        devices.contains("rxe0") && devices.contains("this node, as CONNECT names it: 192.0.2.1"),
        || format!("krcore devices: {devices}"),
    )?;
    let counters = sh(&[KRCORE, "counters"])?;
    check(
        counters.contains("connects") && counters.contains("bad_opcode"),
        || format!("krcore counters: {counters}"),
    )?;
    let rings = sh(&[KRCORE, "rings"])?;
    let me = std::process::id().to_string();
    check(
        rings
            .lines()
            .any(|l| l.split_whitespace().next() == Some(me.as_str())),
        || format!("krcore rings does not list this process ({me}): {rings}"),
    )?;
    let listener = ring.listen(91).map_err(|e| e.to_string())?;
    let peers = sh(&[KRCORE, "peers"])?;
    // This ring's virtual QP is bound to one of the pool's QPs; its listen and the port
    // its CONNECT holds are shown, with their user.
    check(
        peers.contains("rxe0")
            && peers
                .lines()
                .any(|l| l.contains("pool qp ") && l.contains(" ready bound 1 "))
            && peers.contains("listen service 91 uid 0 ring ")
            && peers.contains(" offers 0")
            && peers.contains("port 31 uid 0 named refs 1"),
        || format!("krcore peers: {peers}"),
    )?;
    ring.unlisten(listener).map_err(|e| e.to_string())?;
    let lat = sh(&[KRCORE, "lat", "--iters", "200"])?;
    check(
        lat.contains("READ 8 B: 200 operations one at a time: median"),
        || format!("krcore lat: {lat}"),
    )?;
    let bw = sh(&[
        KRCORE, "bw", "--op", "write", "--size", "4096", "--depth", "8", "--iters", "64",
    ])?;
    check(
        bw.contains("WRITE 4096 B: 64 operations, 8 in flight:"),
        || format!("krcore bw: {bw}"),
    )?;
    // perftest's -a, -D and a machine-readable form: a JSON object per size.
    let sweep = sh(&[
        KRCORE, "lat", "-a", "--size", "64", "--iters", "20", "--json",
    ])?;
    let rows: Vec<serde_json::Value> = sweep
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("krcore lat --json: {e}: {sweep}"))?;
    let sizes: Vec<u64> = rows.iter().filter_map(|r| r["size"].as_u64()).collect();
    check(
        sizes == [8, 16, 32, 64]
            && rows
                .iter()
                .all(|r| r["ops"] == 20 && r["median_us"].as_f64().is_some_and(|m| m > 0.0)),
        || format!("krcore lat -a --json: {sweep}"),
    )?;
    let timed = sh(&[KRCORE, "bw", "-D", "0.3", "--size", "64", "--json"])?;
    let t: serde_json::Value =
        serde_json::from_str(timed.trim()).map_err(|e| format!("krcore bw -D: {e}: {timed}"))?;
    check(
        t["seconds"].as_f64().is_some_and(|s| s >= 0.3) && t["ops"].as_u64().is_some_and(|n| n > 0),
        || format!("krcore bw -D 0.3: {timed}"),
    )?;
    let served = the_far_side()?;
    for out in [
        &devices, &counters, &rings, &peers, &lat, &bw, &sweep, &timed, &served,
    ] {
        for l in out.lines().take(12) {
            println!("  {l}");
        }
    }
    ring.disconnect(vqp).map_err(|e| e.to_string())
}

/// `krcore serve` as the far side, reached through this node's own address as another
/// node would reach it: SENDs it echoes (latency, then bandwidth); it ends after its two
/// peers. Returns what everyone said. (Its `--name` needs a MetaServer, which this
/// single guest has not.)
fn the_far_side() -> Result<String, String> {
    use std::process::{Command, Stdio};
    let node = "192.0.2.1";
    let mut server = Command::new(KRCORE)
        .args([
            "serve",
            "--size",
            "4096",
            "--service",
            "7100",
            "--peers",
            "2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("krcore serve: {e}"))?;
    let mut said = String::new();
    let clients = (|| {
        // Listening once a CONNECT succeeds: retried until then.
        let send_lat = [
            KRCORE,
            "lat",
            "--op",
            "send",
            "--node",
            node,
            "--service",
            "7100",
            "--size",
            "64",
            "--iters",
            "50",
        ];
        let mut lat = Err(String::new());
        for _ in 0..50 {
            lat = sh(&send_lat);
            if lat.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let lat = lat?;
        check(lat.contains("SEND 64 B (echoed): 50 operations"), || {
            format!("krcore lat --op send: {lat}")
        })?;
        let bw = sh(&[
            KRCORE,
            "bw",
            "--op",
            "send",
            "--node",
            node,
            "--service",
            "7100",
            "--size",
            "1024",
            "--depth",
            "4",
            "--iters",
            "64",
            "--json",
        ])?;
        let j: serde_json::Value = serde_json::from_str(bw.trim())
            .map_err(|e| format!("krcore bw --op send: {e}: {bw}"))?;
        check(j["ops"] == 64 && j["op"] == "send", || {
            format!("krcore bw --op send: {bw}")
        })?;
        Ok::<_, String>(format!("{lat}{bw}"))
    })();
    if clients.is_err() {
        // It would wait for its peers forever.
        let _ = server.kill();
    }
    let out = server
        .wait_with_output()
        .map_err(|e| format!("krcore serve: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    said.push_str(&clients?);
    said.push_str(&text);
    // Each peer's messages: the warm-up's and the timed ones.
    let echoed: Vec<u64> = text
        .lines()
        .filter_map(|l| {
            l.split_once(" messages echoed")?
                .0
                .rsplit(' ')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    check(out.status.success() && echoed == [51, 68], || {
        format!(
            "krcore serve ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok(said)
}
