//! The device query sees rxe0, and follows it as it goes and comes back; with a second
//! device, each ring binds the one it names.

use std::time::{Duration, Instant};

use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device, GidRow};

use crate::datapath::{ok, open, run, Buf};
use crate::harness::{check, sh};

/// ::ffff:192.0.2.1, the RoCE v2 GID of veth0's address in the test VM.
const VETH0_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1];
/// ::ffff:192.0.2.2, the address the second-device test gives veth1.
const VETH1_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 2];
const IB_PORT_ACTIVE: u8 = 4;
const LINK_LAYER_ETHERNET: u8 = 2;

fn rows_of(dev: &Device, name: &str) -> Result<Vec<GidRow>, String> {
    let list = dev.query_devices().map_err(|e| e.to_string())?;
    Ok(list.rows.into_iter().filter(|r| r.name() == name).collect())
}

fn rxe0_rows(dev: &Device) -> Result<Vec<GidRow>, String> {
    rows_of(dev, "rxe0")
}

/// Waits until device `name` shows `gid` (GIDs are added shortly after the device).
fn wait_for_gid(dev: &Device, name: &str, gid: [u8; 16]) -> Result<GidRow, String> {
    let start = Instant::now();
    loop {
        let rows = rows_of(dev, name)?;
        if let Some(r) = rows.iter().find(|r| r.has_gid() && r.gid == gid) {
            return Ok(*r);
        }
        if start.elapsed() > Duration::from_secs(10) {
            return Err(format!(
                "{name} with GID {} not listed after 10 s; rows: {rows:?}",
                std::net::Ipv6Addr::from(gid)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_for_rxe0_gid(dev: &Device) -> Result<GidRow, String> {
    wait_for_gid(dev, "rxe0", VETH0_GID)
}

pub fn query_sees_rxe0() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let row = wait_for_rxe0_gid(&dev)?;
    println!(
        "  rxe0 port {} state {} gid[{}] {}",
        row.port,
        row.port_state,
        row.gid_index,
        row.gid_string()
    );
    check(row.port == 1, || format!("port {} != 1", row.port))?;
    check(row.port_state == IB_PORT_ACTIVE, || {
        format!("port state {} != ACTIVE", row.port_state)
    })?;
    check(row.link_layer == LINK_LAYER_ETHERNET, || {
        format!("link layer {} != Ethernet", row.link_layer)
    })?;
    check(row.gid_type == 2, || {
        format!("gid type {} != RoCE v2", row.gid_type)
    })
}

pub fn hotplug_under_open_file() -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let dev = Device::open().map_err(|e| e.to_string())?;
    wait_for_rxe0_gid(&dev)?;
    // A ring an event loop watches with epoll: its device's removal is a hang-up.
    let ring = Builder::new(8)
        .build(Device::open().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    // SAFETY: plain system calls on descriptors this function owns.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 1,
    };
    // SAFETY: `ev` is a live epoll_event.
    let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ring.as_raw_fd(), &mut ev) };
    check(ep >= 0 && rc == 0, || {
        format!("epoll: {}", std::io::Error::last_os_error())
    })?;
    sh(&["rdma", "link", "delete", "rxe0"])?;
    let mut out = [libc::epoll_event { events: 0, u64: 0 }];
    // SAFETY: `out` has room for one event.
    let n = unsafe { libc::epoll_wait(ep, out.as_mut_ptr(), 1, 5000) };
    let hup = (libc::EPOLLHUP | libc::EPOLLERR) as u32;
    let events = out[0].events;
    // SAFETY: our own descriptor.
    unsafe { libc::close(ep) };
    drop(ring);
    let gone = rxe0_rows(&dev);
    // Put the device back before judging, so later tests find it either way.
    sh(&[
        "rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "veth0",
    ])?;
    check(gone?.is_empty(), || {
        "rxe0 still listed after its removal".into()
    })?;
    check(n == 1 && events & hup == hup, || {
        format!("epoll on a ring whose device went: {n} events, {events:#x} (want HUP and ERR)")
    })?;
    wait_for_rxe0_gid(&dev).map(|_| ())
}

/// The pooled QPs exist as soon as rxe0 has its GID, before any application connects.
pub fn pool_ready_before_any_application() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    wait_for_rxe0_gid(&dev)?;
    let start = Instant::now();
    loop {
        let qps = sh(&["rdma", "res", "show", "qp"])?;
        let krcore: Vec<&str> = qps
            .lines()
            .filter(|l| l.contains("comm [krcore]"))
            .collect();
        // The advert keys' local QP is connected to itself (engine/fastreg.c).
        let local = krcore.iter().filter(|l| self_connected(l)).count();
        let pooled = krcore.len() - local;
        if pooled == 4 && local == 1 {
            println!(
                "  {pooled} pooled RC QPs and the advert keys' local QP after {:?} (no CONNECT issued)",
                start.elapsed()
            );
            return Ok(());
        }
        check(start.elapsed() < Duration::from_secs(10), || {
            format!("{pooled} pooled and {local} self-connected krcore QPs after 10 s:\n{qps}")
        })?;
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether an `rdma res show qp` line is of a QP connected to itself.
fn self_connected(line: &str) -> bool {
    let field = |k: &str| {
        let mut w = line.split_whitespace();
        w.find(|&x| x == k).and_then(|_| w.next())
    };
    field("lqpn").is_some() && field("lqpn") == field("rqpn")
}

/// READs 8 bytes of its own exported memory through a virtual QP connected to `gid`.
fn read_through(gid: [u8; 16], b: Builder) -> Result<(), String> {
    let mut r = open(b)?;
    let (v, _) = ok(&mut r, Sqe::connect(1, gid, 0))?;
    let v = v as u32;
    let mut buf = Buf::new(512);
    buf.bytes_mut()[..8].copy_from_slice(b"device 1");
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let (mr, descriptor) = ok(&mut r, Sqe::reg_mr(2, buf.addr(), 4096, access))?;
    let a = buf.addr();
    let (rmr, _) = ok(&mut r, Sqe::import_mr(3, v, a, 4096, descriptor))?;
    let read = Sqe::one_sided(Opcode::Read, 4, v, mr as u32, a + 2048, 8, rmr as u32, a);
    ok(&mut r, read)?;
    check(&buf.bytes()[2048..2056] == b"device 1", || {
        "READ through the named device moved the wrong bytes".into()
    })
}

/// With a second device (rxe1 on veth1), a ring binds the first device unless setup
/// names another; each reaches only its own device's GID; a missing device or another
/// port is refused.
pub fn rings_bind_the_device_they_name() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    wait_for_rxe0_gid(&dev)?;
    sh(&["ip", "addr", "add", "192.0.2.2/24", "dev", "veth1"])?;
    sh(&[
        "rdma", "link", "add", "rxe1", "type", "rxe", "netdev", "veth1",
    ])?;
    let result = (|| {
        let rxe1 = wait_for_gid(&dev, "rxe1", VETH1_GID)?;
        let first = dev.query_devices().map_err(|e| e.to_string())?.rows[0].dev_index;
        let r = open(Builder::new(8))?;
        let p = r.params();
        check((p.dev_index, p.port) == (first, 1), || {
            format!("default binding: device {} port {}", p.dev_index, p.port)
        })?;
        let named = Builder::new(8).device(rxe1.dev_index, 0);
        let mut r1 = open(named)?;
        check(
            (r1.params().dev_index, r1.params().port) == (rxe1.dev_index, 1),
            || format!("named binding: device {}", r1.params().dev_index),
        )?;
        // Its device's GID only.
        let c = run(&mut r1, Sqe::connect(1, VETH0_GID, 0))?;
        check(c.res < 0, || {
            format!("rxe1's ring connected to rxe0's GID: {c:?}")
        })?;
        drop(r1);
        read_through(VETH1_GID, Builder::new(8).device(rxe1.dev_index, 1))?;
        let refused = |b: Builder| match open(b) {
            Ok(_) => Err("set up".to_string()),
            Err(e) => Ok(e),
        };
        let e = refused(Builder::new(8).device(u32::MAX - 1, 0))?;
        check(e.contains("No such device"), || {
            format!("a missing device: {e}")
        })?;
        let e = refused(Builder::new(8).device(rxe1.dev_index, 2))?;
        check(e.contains("Invalid argument"), || format!("port 2: {e}"))?;
        println!(
            "  rings on device {first} (default) and rxe1 (index {}); rxe1's READ checked; a missing device and port 2 refused",
            rxe1.dev_index
        );
        Ok(())
    })();
    let cleanup = sh(&["rdma", "link", "delete", "rxe1"])
        .and_then(|_| sh(&["ip", "addr", "del", "192.0.2.2/24", "dev", "veth1"]));
    result.and(cleanup.map(|_| ()))
}
