//! Bounded resources, charged to their owner: per-user ring and polling-thread quotas,
//! the polling idle cap, pinned memory within RLIMIT_MEMLOCK, ring memory charged to
//! the caller's memory cgroup, and the device node's mode.

use std::os::unix::fs::PermissionsExt;

use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device, Ring};

use crate::datapath::{run, Buf};
use crate::harness::check;
use crate::isolation::Child;
use verify::guest::Param;

/// Becomes an unprivileged user (no capabilities left), with RLIMIT_MEMLOCK `memlock`.
pub(crate) fn become_user(uid: u32, memlock: u64) -> Result<(), String> {
    let lim = libc::rlimit {
        rlim_cur: memlock,
        rlim_max: memlock,
    };
    // SAFETY: plain system calls on this (child) process.
    let rc = unsafe {
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) | libc::setgid(uid) | libc::setuid(uid)
    };
    check(rc == 0, || {
        format!("becoming uid {uid}: {}", std::io::Error::last_os_error())
    })
}

/// Sets up rings as the calling user until one fails; returns the rings and the errno
/// of the failure.
fn rings_until_refused(sqpoll: bool, at_most: usize) -> (Vec<Ring>, Option<i32>) {
    let mut rings = Vec::new();
    while rings.len() < at_most {
        let b = Builder::new(8);
        let b = if sqpoll { b.sqpoll(1_000_000_000) } else { b };
        match Device::open().and_then(|d| b.build(d)) {
            Ok(r) => rings.push(r),
            Err(e) => return (rings, e.raw_os_error()),
        }
    }
    (rings, None)
}

/// As user `uid`, in a child process, sets up plain rings until one is refused (at most
/// `at_most`): how many, and the errno of the refusal (`"3 None"`: none).
fn rings_as(uid: u32, at_most: usize) -> Result<String, String> {
    Child::spawn(move || {
        become_user(uid, 64 << 10)?;
        let (rings, e) = rings_until_refused(false, at_most);
        Ok(format!("{} {e:?}", rings.len()))
    })?
    .join()
}

/// An unprivileged user runs into its quotas (rings, polling threads, pinned memory)
/// and gets clean errors, while another user still sets up rings; the quota is returned
/// when the first user's process exits.
pub fn unprivileged_user_exhausts_its_quota_cleanly() -> Result<(), String> {
    let mode = std::fs::metadata("/dev/krcore")
        .map_err(|e| e.to_string())?
        .permissions()
        .mode();
    println!("  /dev/krcore mode {:o}", mode & 0o777);
    check(mode & 0o777 == 0o666, || {
        format!("device mode {:o}", mode & 0o777)
    })?;
    let _rings = Param::set("max_rings_per_user", "6")?;
    let _pollers = Param::set("max_sqpoll_per_user", "2")?;
    let _idle = Param::set("max_sq_idle_ms", "500")?;
    let (ready_r, ready_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let hog = Child::spawn(move || {
        become_user(1000, 64 << 10)?;
        let (pollers, e1) = rings_until_refused(true, 10);
        let idle = pollers.first().map(|r| r.params().sq_idle_ms);
        let (plain, e2) = rings_until_refused(false, 10);
        let n_plain = plain.len();
        // Pinned memory within RLIMIT_MEMLOCK: 16 KiB fits in 64 KiB, 1 MiB does not.
        let mut ring = plain.into_iter().next().ok_or("no plain ring")?;
        let (small, big) = (Buf::new(2048), Buf::new(128 << 10));
        let c_small = run(
            &mut ring,
            Sqe::reg_mr(1, small.addr(), 16 << 10, MrAccess::LOCAL_WRITE),
        )?;
        let c_big = run(
            &mut ring,
            Sqe::reg_mr(2, big.addr(), 1 << 20, MrAccess::LOCAL_WRITE),
        )?;
        // Hold everything while the parent checks another user gets through.
        signal(ready_w)?;
        wait(go_r)?;
        Ok(format!(
            "{} {e1:?} {idle:?} {n_plain} {e2:?} {} {}",
            pollers.len(),
            c_small.res,
            c_big.res
        ))
    })?;
    wait(ready_r)?;
    // Meanwhile another user, and root, set up rings.
    let other = rings_as(1001, 3)?;
    let root = Device::open()
        .and_then(|d| Builder::new(8).build(d))
        .map(|_| ());
    signal(go_w)?;
    let report = hog.join()?;
    println!(
        "  uid 1000 (polling rings, refusal, granted sq_idle_ms, plain rings, refusal, \
         REG_MR 16 KiB, REG_MR 1 MiB past a 64 KiB RLIMIT_MEMLOCK): {report}"
    );
    println!("  meanwhile uid 1001: {other} rings; root: {root:?}");
    let f: Vec<&str> = report.split(' ').collect();
    check(
        f[0] == "2" && f[1] == format!("{:?}", Some(libc::EDQUOT)),
        || format!("polling rings: {} then {}", f[0], f[1]),
    )?;
    check(f[2] == "Some(500)", || {
        format!("sq_idle_ms granted {}", f[2])
    })?;
    check(
        f[3] == "4" && f[4] == format!("{:?}", Some(libc::EDQUOT)),
        || format!("plain rings: {} then {}", f[3], f[4]),
    )?;
    check(f[5].parse::<i32>().is_ok_and(|h| h > 0), || {
        format!("REG_MR 16 KiB: {}", f[5])
    })?;
    check(f[6] == (-libc::ENOMEM).to_string(), || {
        format!("REG_MR past RLIMIT_MEMLOCK: {}", f[6])
    })?;
    check(other == "3 None", || format!("another user got {other}"))?;
    check(root.is_ok(), || format!("root got {root:?}"))?;
    // The quota came back with the process.
    let again = rings_as(1000, 10)?;
    println!("  uid 1000 again after exit: {again}");
    check(again == format!("6 {:?}", Some(libc::EDQUOT)), || {
        format!("after exit: {again}")
    })
}

/// Uids mapped into a user namespace: a process as `maker` (root, or a user it
/// becomes) makes the namespace, root maps [`MAPPED`] uids into it from `base` on (as
/// newuidmap does from a subordinate range), and the process makes one ring as each of
/// them in turn, holding them while `during` runs. Returns (rings made, refused, all
/// refusals EDQUOT) as text, and what `during` returned.
fn rings_in_namespace<T>(
    maker: u32,
    base: u32,
    during: impl FnOnce() -> Result<T, String>,
) -> Result<(String, T), String> {
    let (made_r, made_w) = pipe()?;
    let (mapped_r, mapped_w) = pipe()?;
    let (held_r, held_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let ns = Child::spawn(move || {
        if maker != 0 {
            become_user(maker, 64 << 10)?;
        }
        // SAFETY: a plain system call on this (child) process.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWUSER) };
        check(rc == 0, || {
            format!(
                "unshare(CLONE_NEWUSER): {}",
                std::io::Error::last_os_error()
            )
        })?;
        signal(made_w)?;
        wait(mapped_r)?;
        // One ring as each mapped uid in turn. The saved uid stays 0, the namespace's
        // root, so the process can come back to it for the next uid.
        let mut rings = Vec::new();
        let mut refused = Vec::new();
        for k in 0..MAPPED {
            // SAFETY: plain system calls on this process.
            let rc = unsafe { libc::setresuid(k, k, 0) };
            check(rc == 0, || {
                format!("setresuid({k}): {}", std::io::Error::last_os_error())
            })?;
            match Device::open().and_then(|d| Builder::new(8).build(d)) {
                Ok(r) => rings.push(r),
                Err(e) => refused.push(e.raw_os_error()),
            }
            // SAFETY: as above; 0 is the saved uid.
            let rc = unsafe { libc::setresuid(0, 0, 0) };
            check(rc == 0, || {
                format!("back to 0: {}", std::io::Error::last_os_error())
            })?;
        }
        signal(held_w)?;
        wait(go_r)?;
        let all_edquot = refused.iter().all(|&e| e == Some(libc::EDQUOT));
        Ok(format!("{} {} {all_edquot}", rings.len(), refused.len()))
    })?;
    wait(made_r)?;
    std::fs::write(
        format!("/proc/{}/uid_map", ns.pid()),
        format!("0 {base} {MAPPED}\n"),
    )
    .map_err(|e| format!("writing uid_map: {e}"))?;
    signal(mapped_w)?;
    wait(held_r)?;
    let meanwhile = during();
    signal(go_w)?;
    let inside = ns.join()?;
    Ok((inside, meanwhile?))
}

/// Uids [`rings_in_namespace`] maps.
const MAPPED: u32 = 11;

/// A uid range mapped into a user namespace that an unprivileged user made counts as
/// that user: uid 1000 makes a namespace, root maps 11 uids into it (as newuidmap does
/// from a subordinate range), and rings made as each of them share uid 1000's quota.
/// Uid 1000 outside is refused too, and uid 1001 is not.
pub fn a_user_namespace_counts_as_its_owner() -> Result<(), String> {
    let _rings = Param::set("max_rings_per_user", "6")?;
    let (inside, (outside, other)) = rings_in_namespace(1000, 200_000, || {
        Ok((rings_as(1000, 3)?, rings_as(1001, 3)?))
    })?;
    println!("  in uid 1000's namespace, one ring as each of {MAPPED} mapped uids (made, refused, all EDQUOT): {inside}");
    println!("  meanwhile uid 1000 outside: {outside}; uid 1001: {other}");
    check(inside == "6 5 true", || {
        format!("the namespace's uids got {inside} rings, not 6 of uid 1000's quota")
    })?;
    check(outside == format!("0 {:?}", Some(libc::EDQUOT)), || {
        format!("uid 1000 outside got {outside}")
    })?;
    check(other == "3 None", || format!("uid 1001 got {other}"))
}

/// A container's uids count together: root makes a namespace (as a container runtime
/// does) and maps 11 uids into it from 300000; rings made as each of them share one
/// quota of the namespace's own (6 made, 5 refused `EDQUOT`), while uid 300001 outside,
/// the very uid the namespace's uid 1 maps to, has its own (3 of 3), and so does root.
/// (Before, each mapped uid was a user of its own, and all 11 were made.)
pub fn a_containers_uids_count_together() -> Result<(), String> {
    let _rings = Param::set("max_rings_per_user", "6")?;
    let (inside, (same_uid, root)) = rings_in_namespace(0, 300_000, || {
        Ok((
            rings_as(300_001, 3)?,
            Device::open()
                .and_then(|d| Builder::new(8).build(d))
                .is_ok(),
        ))
    })?;
    println!("  in root's namespace, one ring as each of {MAPPED} mapped uids (made, refused, all EDQUOT): {inside}");
    println!("  meanwhile uid 300001 outside: {same_uid}; root got one: {root}");
    check(inside == "6 5 true", || {
        format!("the container's uids got {inside} rings, not one quota of 6 together")
    })?;
    check(same_uid == "3 None", || {
        format!("uid 300001 outside got {same_uid}")
    })?;
    check(root, || "root outside was refused a ring".into())
}

/// The kernel memory of a ring is charged to the memory cgroup of the process that set
/// it up.
pub fn ring_memory_is_charged_to_the_cgroup() -> Result<(), String> {
    const RINGS: usize = 16;
    let cg = "/run/krcore-cg";
    std::fs::create_dir_all(cg).map_err(|e| e.to_string())?;
    let mounted = std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .contains(cg);
    if !mounted {
        crate::harness::sh(&["mount", "-t", "cgroup2", "none", cg])?;
    }
    std::fs::write(format!("{cg}/cgroup.subtree_control"), "+memory").map_err(|e| e.to_string())?;
    let group = format!("{cg}/rings");
    std::fs::create_dir_all(&group).map_err(|e| e.to_string())?;
    let current = {
        let group = group.clone();
        move || -> Result<u64, String> {
            let s = std::fs::read_to_string(format!("{group}/memory.current"))
                .map_err(|e| e.to_string())?;
            s.trim()
                .parse()
                .map_err(|_| format!("memory.current {s:?}"))
        }
    };
    let g = group.clone();
    let report = Child::spawn(move || {
        std::fs::write(format!("{g}/cgroup.procs"), std::process::id().to_string())
            .map_err(|e| e.to_string())?;
        let before = current()?;
        // Large rings, so their areas dwarf what else a process's files are charged.
        let rings = (0..RINGS)
            .map(|_| Device::open().and_then(|d| Builder::new(1024).build(d)))
            .collect::<Result<Vec<Ring>, _>>()
            .map_err(|e| e.to_string())?;
        let after = current()?;
        let bytes: usize = rings
            .iter()
            .map(|r| (r.params().sq_off.map_len + r.params().cq_off.map_len) as usize)
            .sum();
        drop(rings);
        Ok(format!("{} {bytes}", after.saturating_sub(before)))
    })?
    .join()?;
    let _ = std::fs::remove_dir(&group);
    let (charged, areas) = report
        .split_once(' ')
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
        .ok_or_else(|| format!("child reported {report:?}"))?;
    println!("  {RINGS} rings: memory.current +{charged} B (their ring areas alone: {areas} B)");
    check(charged >= areas, || {
        format!("only {charged} B charged to the cgroup for {areas} B of ring areas")
    })
}

pub(crate) fn pipe() -> Result<(i32, i32), String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok((fds[0], fds[1]))
}

pub(crate) fn signal(fd: i32) -> Result<(), String> {
    // SAFETY: one byte from a live buffer.
    let n = unsafe { libc::write(fd, b"!".as_ptr().cast(), 1) };
    check(n == 1, || "pipe write".into())
}

pub(crate) fn wait(fd: i32) -> Result<(), String> {
    let mut b = [0u8; 1];
    // SAFETY: one byte into a live buffer.
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
    check(n == 1, || "pipe read".into())
}
