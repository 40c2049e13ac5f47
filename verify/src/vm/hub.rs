//! The Ethernet segment of a multi-guest run: a hub that forwards every frame a guest
//! sends to every other guest, over Unix datagram sockets on the host (QEMU's `dgram`
//! netdev), so no guest traffic ever touches a host network address. A QEMU `socket`
//! netdev joins only two guests and multicast is not allowed here; a hub joins any
//! number.
//!
//! Guest `i`'s QEMU binds `guest-i.sock` and sends to `hub-i.sock`, which the hub binds.
//! Frames to a guest that is not up (not booted yet, or killed) are dropped, as a
//! switch port with nothing plugged in would.

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
    /// Binds the hub's side for `n` guests in `dir` and starts forwarding.
    pub fn start(dir: &Path, n: usize) -> Result<Hub, String> {
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
                while !stop.load(Ordering::Relaxed) {
                    let Ok(len) = sock.recv(&mut frame) else {
                        continue;
                    };
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

    /// A frame from guest 0 reaches guests 1 and 2 and nothing comes back to 0.
    #[test]
    fn forwards_to_every_other_guest() {
        let dir = std::env::temp_dir().join(format!("krcore-hub-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let hub = Hub::start(&dir, 3).unwrap();
        let guests: Vec<UnixDatagram> = (0..3)
            .map(|i| {
                let p = guest_socket(&dir, i);
                let _ = std::fs::remove_file(&p);
                let s = UnixDatagram::bind(p).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                s
            })
            .collect();
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
}
