//! The Ethernet segment of a multi-guest run: a hub that forwards every frame a guest
//! sends to every other guest, over Unix datagram sockets on the host (QEMU's `dgram`
//! netdev), so no guest traffic ever touches a host network address. A QEMU `socket`
//! netdev joins only two guests and multicast is not allowed here; a hub joins any
//! number.
//!
//! Guest `i`'s QEMU binds `guest-i.sock` and sends to `hub-i.sock`, which the hub binds.
//! Frames to a guest that is not up (not booted yet, or killed) are dropped, as a
//! switch port with nothing plugged in would.
//!
//! A lossy segment ([`Hub::start`]'s `lose_one_in`) loses RoCE frames sent to a QP other
//! than the CM's (QP 1) at random, one in N on average: the loss an Ethernet without
//! flow control shows RDMA, which the transport's retransmission must repair. At random,
//! not every Nth: a fixed period can fall in step with a retransmitted burst and lose
//! its first frame every time, which no real network does. The seed is fixed (each
//! guest's port its own), so a run's losses depend only on its traffic.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Largest frame forwarded: an Ethernet frame at the guests' MTU (1500) with headers and
/// the virtio-net header QEMU prepends, with room to spare.
const MAX_FRAME: usize = 65536;

/// A running hub; stops when dropped.
pub struct Hub {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// Where guest `i` of a hub in `dir` binds (QEMU's `local.path`).
pub fn guest_socket(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("guest-{i}.sock"))
}

/// Where the hub listens for guest `i` (QEMU's `remote.path`).
pub fn hub_socket(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("hub-{i}.sock"))
}

impl Hub {
    /// Binds the hub's side for `n` guests in `dir` and starts forwarding; with
    /// `lose_one_in` N, one in N RoCE data frames a guest sends is lost, at random.
    pub fn start(dir: &Path, n: usize, lose_one_in: Option<u32>) -> Result<Hub, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for i in 0..n {
            let path = hub_socket(dir, i);
            let _ = std::fs::remove_file(&path);
            let sock = UnixDatagram::bind(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            // Wake now and then to see the stop flag.
            sock.set_read_timeout(Some(Duration::from_millis(200)))
                .map_err(|e| e.to_string())?;
            let peers: Vec<PathBuf> = (0..n)
                .filter(|&j| j != i)
                .map(|j| guest_socket(dir, j))
                .collect();
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                let mut frame = vec![0u8; MAX_FRAME];
                let mut rng = Lossy::new(i as u64);
                while !stop.load(Ordering::Relaxed) {
                    let Ok(len) = sock.recv(&mut frame) else {
                        continue;
                    };
                    if let Some(n) = lose_one_in.filter(|_| is_roce_data(&frame[..len])) {
                        if rng.lose(n) {
                            continue;
                        }
                    }
                    for p in &peers {
                        // A guest not up yet (or killed) has no socket: drop, as a switch
                        // does for a port with nothing plugged in.
                        let _ = sock.send_to(&frame[..len], p);
                    }
                }
            }));
        }
        Ok(Hub { stop, threads })
    }
}

/// A port's losses: xorshift64*, seeded by the port.
struct Lossy(u64);

impl Lossy {
    fn new(port: u64) -> Lossy {
        Lossy(0x9e37_79b9_7f4a_7c15 ^ (port + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9))
    }

    /// Whether the next frame is lost, one in `n` on average.
    fn lose(&mut self, n: u32) -> bool {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % n as u64 == 0
    }
}

/// RoCE v2's UDP port.
const ROCE_PORT: u16 = 4791;

/// Whether `f` is an Ethernet frame carrying RoCE v2 over IPv4 to a QP other than 1
/// (the CM's, whose MADs are not the transport's to repair).
fn is_roce_data(f: &[u8]) -> bool {
    if f.len() < 14 + 20 || f[12..14] != [0x08, 0x00] || f[14 + 9] != 17 {
        return false;
    }
    let udp = 14 + (f[14] & 0x0f) as usize * 4;
    // The UDP header (8 bytes), then the BTH: destination QP in bytes 5..8.
    let Some(bth) = f.get(udp + 8..udp + 8 + 12) else {
        return false;
    };
    let dport = u16::from_be_bytes([f[udp + 2], f[udp + 3]]);
    dport == ROCE_PORT && bth[5..8] != [0, 0, 1]
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hub for `n` guests in a directory of its own, and the guests' sockets, each
    /// read with `timeout`.
    fn segment(
        name: &str,
        n: usize,
        lose_one_in: Option<u32>,
        timeout: Duration,
    ) -> (PathBuf, Hub, Vec<UnixDatagram>) {
        let dir = std::env::temp_dir().join(format!("krcore-hub-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let hub = Hub::start(&dir, n, lose_one_in).unwrap();
        let guests = (0..n)
            .map(|i| {
                let p = guest_socket(&dir, i);
                let _ = std::fs::remove_file(&p);
                let s = UnixDatagram::bind(p).unwrap();
                s.set_read_timeout(Some(timeout)).unwrap();
                s
            })
            .collect();
        (dir, hub, guests)
    }

    /// A frame from guest 0 reaches guests 1 and 2 and nothing comes back to 0.
    #[test]
    fn forwards_to_every_other_guest() {
        let (dir, hub, guests) = segment("test", 3, None, Duration::from_secs(2));
        guests[0].send_to(b"frame", hub_socket(&dir, 0)).unwrap();
        let mut buf = [0u8; 16];
        for g in &guests[1..] {
            let n = g.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"frame");
        }
        guests[0]
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(guests[0].recv(&mut buf).is_err(), "echoed to its sender");
        drop(hub);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A RoCE v2 frame to `qpn` over IPv4/UDP, as rxe sends one.
    fn roce(qpn: u32) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 12 + 16];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 9] = 17;
        f[34 + 2..34 + 4].copy_from_slice(&ROCE_PORT.to_be_bytes());
        f[42 + 5..42 + 8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        f
    }

    #[test]
    fn only_roce_data_frames_count_as_lossy() {
        assert!(is_roce_data(&roce(17)));
        assert!(!is_roce_data(&roce(1)), "the CM's QP");
        let mut udp = roce(17);
        udp[34 + 2..34 + 4].copy_from_slice(&53u16.to_be_bytes());
        assert!(!is_roce_data(&udp), "another UDP port");
        let mut arp = roce(17);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(!is_roce_data(&arp));
        assert!(!is_roce_data(&roce(17)[..40]), "truncated");
    }

    /// One in N RoCE data frames is lost, at random (never two runs' differently), and
    /// no CM frame.
    #[test]
    fn a_lossy_hub_loses_one_in_n_roce_data_frames() {
        let (dir, hub, guests) = segment("loss", 2, Some(10), Duration::from_millis(500));
        // Sent from a thread while this one reads: a datagram socket's queue is short
        // (10 here), and a full one blocks its sender, the hub included.
        let count = |qpn: u32| {
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    for _ in 0..1000 {
                        guests[0].send_to(&roce(qpn), hub_socket(&dir, 0)).unwrap();
                    }
                });
                let mut buf = [0u8; 128];
                let mut got = 0;
                while guests[1].recv(&mut buf).is_ok() {
                    got += 1;
                }
                got
            })
        };
        let data = count(17);
        assert!(
            (850..=950).contains(&data),
            "{data} of 1000 data frames passed"
        );
        assert_eq!(count(1), 1000, "CM frames are never lost");
        drop(hub);
        let _ = std::fs::remove_dir_all(&dir);
        // The same seed, the same losses.
        let (mut a, mut b) = (Lossy::new(0), Lossy::new(0));
        assert!((0..100).all(|_| a.lose(10) == b.lose(10)));
    }
}
