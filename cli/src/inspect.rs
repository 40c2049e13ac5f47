//! What the module shows of itself: the device query, its debugfs files, and each
//! ring's fdinfo, read and laid out for people.

use std::path::Path;

use krcore_abi::cqe::Reason;
use krcore_abi::stats::Counters;
use krcore_uring::Device;

/// Where the module's debugfs files are.
const DEBUGFS: &str = "/sys/kernel/debug/krcore";

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

pub fn devices() -> Result<()> {
    let list = Device::open()?.query_devices()?;
    println!("ABI version {}", list.abi_version);
    println!(
        "{:<10} {:>4} {:>6} {:>9} {:>5}  GID",
        "device", "port", "state", "link", "index"
    );
    for r in &list.rows {
        let state = if r.port_state == 4 { "active" } else { "down" };
        let link = match r.link_layer {
            1 => "IB",
            2 => "Ethernet",
            _ => "?",
        };
        let index = if r.has_gid() {
            r.gid_index.to_string()
        } else {
            "-".into()
        };
        let v2 = if r.gid_type == 2 { " (RoCE v2)" } else { "" };
        println!(
            "{:<10} {:>4} {:>6} {:>9} {:>5}  {}{v2}",
            r.name(),
            r.port,
            state,
            link,
            index,
            r.gid_string()
        );
    }
    if let Some(ip) = list.rows.iter().find_map(|r| r.ipv4()) {
        println!("this node, as CONNECT names it: {ip}");
    }
    Ok(())
}

/// A debugfs file of the module, with what to do when it cannot be read.
fn debugfs(file: &str) -> Result<String> {
    let path = Path::new(DEBUGFS).join(file);
    std::fs::read_to_string(&path).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::PermissionDenied => " (debugfs is root's: run as root)",
            std::io::ErrorKind::NotFound => {
                " (is the module loaded, and debugfs mounted at /sys/kernel/debug?)"
            }
            _ => "",
        };
        format!("{}: {e}{hint}", path.display()).into()
    })
}

/// `text` split at its `device NAME` lines.
fn by_device(text: &str) -> Vec<(&str, String)> {
    let mut out: Vec<(&str, String)> = Vec::new();
    for line in text.lines() {
        match line.strip_prefix("device ") {
            Some(name) => out.push((name, String::new())),
            None => {
                if let Some((_, body)) = out.last_mut() {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    out
}

/// The counters laid out: the scalars, then failures by reason (non-zero unless `all`).
fn show_counters(c: &Counters, all: bool, indent: &str) {
    let rows = [
        ("rings set up", c.rings),
        ("entries taken", c.taken),
        ("completions", c.completed),
        ("CQ overflows", c.cq_overflows),
        ("stray completions", c.stray),
        ("connects", c.connects),
        ("recoveries", c.recoveries),
        ("peer proofs refused", c.auth_refused),
        ("peer proofs replayed", c.auth_replayed),
        ("peer dials at once", c.auth_fresh),
        ("peer proofs stale", c.auth_stale),
        ("peer notices dropped", c.bad_notices),
        ("failed, all reasons", c.failed_total()),
    ];
    for (what, v) in rows {
        println!("{indent}{what:<22} {v:>12}");
    }
    for r in &Reason::ALL[1..] {
        let v = c.failed[*r as usize];
        if v != 0 || all {
            println!("{indent}  {:<20} {v:>12}  {}", r.name(), r.describe());
        }
    }
}

pub fn counters(all: bool) -> Result<()> {
    for (dev, body) in by_device(&debugfs("counters")?) {
        let mut c = Counters::ZERO;
        c.read("", &body);
        println!("{dev}:");
        show_counters(&c, all, "  ");
    }
    Ok(())
}

pub fn peers() -> Result<()> {
    for (dev, body) in by_device(&debugfs("peers")?) {
        println!("{dev}:");
        if !body.lines().any(|l| l.starts_with("peer ")) {
            println!("  no peer nodes yet (only the loopback pool)");
        }
        for line in body.lines() {
            println!("  {line}");
        }
    }
    Ok(())
}

/// A ring as its fdinfo shows it.
struct RingInfo {
    pid: u32,
    comm: String,
    fd: String,
    fields: Vec<(String, String)>,
    counters: Counters,
}

impl RingInfo {
    fn field(&self, name: &str) -> &str {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map_or("-", |(_, v)| v.as_str())
    }
}

/// Every open `/dev/krcore` of every process this user may look into.
fn scan_rings() -> Vec<RingInfo> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let is_krcore = std::fs::read_link(fd.path())
                .is_ok_and(|t| t == Path::new(krcore_uring::DEVICE_PATH));
            if !is_krcore {
                continue;
            }
            let name = fd.file_name().to_string_lossy().into_owned();
            let Ok(info) = std::fs::read_to_string(p.path().join("fdinfo").join(&name)) else {
                continue;
            };
            let mut counters = Counters::ZERO;
            counters.read("krcore-", &info);
            let fields = info
                .lines()
                .filter_map(|l| l.strip_prefix("krcore-"))
                .filter_map(|l| l.split_once(' '))
                .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
                .collect();
            let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
            out.push(RingInfo {
                pid,
                comm: comm.trim().to_owned(),
                fd: name,
                fields,
                counters,
            });
        }
    }
    out.sort_by_key(|r| r.pid);
    out
}

pub fn rings() -> Result<()> {
    let rings = scan_rings();
    println!(
        "{:>7} {:<16} {:>4} {:>5} {:>6} {:>5} {:>4} {:>10} {:>10} {:>7} {:>8}",
        "pid",
        "command",
        "fd",
        "ring",
        "sqpoll",
        "vqps",
        "mrs",
        "taken",
        "completed",
        "failed",
        "overflow"
    );
    for r in &rings {
        println!(
            "{:>7} {:<16} {:>4} {:>5} {:>6} {:>5} {:>4} {:>10} {:>10} {:>7} {:>8}",
            r.pid,
            r.comm,
            r.fd,
            r.field("ring"),
            if r.field("sqpoll") == "1" {
                "yes"
            } else {
                "no"
            },
            r.field("vqps"),
            r.field("mrs"),
            r.counters.taken,
            r.counters.completed,
            r.counters.failed_total(),
            r.counters.cq_overflows
        );
    }
    if rings.is_empty() {
        println!("(no process of this user holds /dev/krcore open; root sees everyone's)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debugfs_text_splits_by_device() {
        let text = "device rxe0\nrings 2\nconnects 5\ndevice mlx5_0\nrings 1\n";
        let d = by_device(text);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0], ("rxe0", "rings 2\nconnects 5\n".to_string()));
        let mut c = Counters::ZERO;
        c.read("", &d[1].1);
        assert_eq!(c.rings, 1);
    }
}
