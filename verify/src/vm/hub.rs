//! The Ethernet segment of a multi-guest run: a hub that forwards every frame a guest
//! sends to every other guest, over Unix datagram sockets on the host (QEMU's `dgram`
//! netdev), so no guest traffic ever touches a host network address. A QEMU `socket`
//! netdev joins only two guests and multicast is not allowed here; a hub joins any
//! number.
//!
//! Guest `i`'s QEMU binds `guest-i.sock` and sends to `hub-i.sock`, which the hub binds.
//! Frames to a guest that is not up (not booted yet, or killed) are dropped, as a
//! switch port with nothing plugged in would. Each guest's port has its own queue of
//! [`PORT_QUEUE`] frames and its own thread: a guest that does not read (QEMU takes no
//! frame before the guest's driver is up, and a booting guest under emulation takes
//! seconds) fills its own queue and loses what comes past it, as a switch port's full
//! buffer does, and never holds up the frames the others exchange.
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
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Largest frame forwarded: an Ethernet frame at the guests' MTU (1500) with headers and
/// the virtio-net header QEMU prepends, with room to spare.
const MAX_FRAME: usize = 65536;

/// Frames a guest's port holds for it while it does not read; past them, frames to it
/// are lost. A guest's own socket holds 10 more (the host's `max_dgram_qlen`).
pub const PORT_QUEUE: usize = 1024;

/// How often a hub thread that waits looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(200);

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
        let mut socks = Vec::new();
        for i in 0..n {
            let path = hub_socket(dir, i);
            let _ = std::fs::remove_file(&path);
            let sock = UnixDatagram::bind(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            // Wake now and then to see the stop flag, reading and writing.
            sock.set_read_timeout(Some(STOP_POLL))
                .and_then(|_| sock.set_write_timeout(Some(STOP_POLL)))
                .map_err(|e| e.to_string())?;
            socks.push(sock);
        }
        // Each guest's port: its queue, drained by its own thread (through the socket
        // the guest sends to).
        let mut ports = Vec::new();
        for (j, sock) in socks.iter().enumerate() {
            let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(PORT_QUEUE);
            let out = sock.try_clone().map_err(|e| e.to_string())?;
            let (to, stop) = (guest_socket(dir, j), stop.clone());
            threads.push(std::thread::spawn(move || drain(&out, &to, &rx, &stop)));
            ports.push(tx);
        }
        for (i, sock) in socks.into_iter().enumerate() {
            let peers: Vec<SyncSender<Vec<u8>>> = ports
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, tx)| tx.clone())
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
                        // A full port loses the frame, as a switch's full buffer does.
                        let _ = p.try_send(frame[..len].to_vec());
                    }
                }
            }));
        }
        Ok(Hub { stop, threads })
    }
}

/// A guest's port: sends what its queue holds to the guest at `to`, in order, each
/// frame until the guest takes it or is not there (not booted yet, or killed: the
/// frame is dropped, as a switch does for a port with nothing plugged in).
fn drain(out: &UnixDatagram, to: &Path, rx: &Receiver<Vec<u8>>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let frame = match rx.recv_timeout(STOP_POLL) {
            Ok(f) => f,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        while !stop.load(Ordering::Relaxed) {
            match out.send_to(&frame, to) {
                // Its socket is full (a write timeout): the guest is up but not reading.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                _ => break,
            }
        }
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

    /// A guest that reads nothing (up, but its driver not yet: QEMU takes no frame)
    /// holds up no one: guest 1 gets every frame guest 0 sends, and guest 2's port
    /// keeps what it can hold.
    #[test]
    fn a_guest_that_does_not_read_holds_up_no_other() {
        let (dir, hub, guests) = segment("stall", 3, None, Duration::from_secs(2));
        let sent = 200;
        let got = std::thread::scope(|sc| {
            // A hub held up stops taking guest 0's frames: its sends time out.
            guests[0]
                .set_write_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            sc.spawn(|| {
                for k in 0..sent {
                    let frame = (k as u32).to_be_bytes();
                    if guests[0].send_to(&frame, hub_socket(&dir, 0)).is_err() {
                        break;
                    }
                }
            });
            let mut buf = [0u8; 16];
            let mut got = Vec::new();
            while got.len() < sent {
                let Ok(n) = guests[1].recv(&mut buf) else {
                    break;
                };
                got.push(u32::from_be_bytes(buf[..n].try_into().unwrap()));
            }
            got
        });
        if got.len() != sent {
            // Its threads wait on guest 2 for good: not joined.
            std::mem::forget(hub);
            panic!("guest 1 got {} of {sent}: held up by guest 2", got.len());
        }
        assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order");
        // Guest 2 now reads: what its socket and its port held, in order, from the first.
        let mut buf = [0u8; 16];
        let mut late = Vec::new();
        guests[2]
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        while let Ok(n) = guests[2].recv(&mut buf) {
            late.push(u32::from_be_bytes(buf[..n].try_into().unwrap()));
        }
        assert_eq!(
            late,
            (0..sent as u32).collect::<Vec<_>>(),
            "guest 2's frames"
        );
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
