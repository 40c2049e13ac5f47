//! A tokio service over remote memory: a TCP front end whose every request is answered
//! by a one-sided RDMA READ through an [`AsyncRing`], with a deadline per request.
//!
//! The "memory node" is this process (the device's own GID reaches the loopback pool):
//! it registers a table of 1,024 words (word k holds k * k) and imports it as remote
//! memory, as a front end would import another node's table by name. Then it serves
//! `GET k` lines on 127.0.0.1 (a port of the system's choosing, printed), one tokio task
//! per client, every task with its own 8-byte landing buffer that it hands to each READ
//! and gets back with the answer (owned buffers are what make a dropped request safe).
//!
//! ```text
//! cargo run --features tokio --example async_service            serve until killed
//! cargo run --features tokio --example async_service -- selftest serve 4 clients x 25 GETs, check, exit
//! ```
use std::sync::Arc;
use std::time::Duration;

use krcore_uring::abi::sqe::MrAccess;
use krcore_uring::{AsyncRing, Builder, Device, Error, MemoryRegion, RemoteRegion, Vqp};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Words in the table.
const WORDS: u64 = 1024;
/// How long a request may take before the client is told so.
const DEADLINE: Duration = Duration::from_secs(2);

/// What every request needs: the ring, the connection and the remote table.
struct Table {
    ring: AsyncRing,
    vqp: Vqp,
    remote: RemoteRegion,
}

impl Table {
    /// Reads word `k` into `buf` (moved in, handed back), within the deadline.
    async fn get(&self, k: u64, buf: MemoryRegion) -> (Result<u64>, Option<MemoryRegion>) {
        let read = self.ring.run(vec![buf], |b, r| {
            b.read(&self.vqp, &r[0], 0, &self.remote, k * 8, 8)
                .map(|_| ())
        });
        match tokio::time::timeout(DEADLINE, read).await {
            // Timed out: the READ's buffer stays with the ring until the NIC is done
            // with it; this task makes itself a new one.
            Err(_) => (Err("deadline passed".into()), None),
            Ok((done, mut back)) => {
                let mut buf = back.pop();
                let word = match (done, buf.as_mut()) {
                    (Ok(c), Some(b)) => match c.into_iter().next() {
                        Some(Ok(_)) => Ok(u64::from_le_bytes(
                            b.bytes()[..8].try_into().expect("8 bytes"),
                        )),
                        Some(Err(e)) => Err(e.into()),
                        None => Err("no completion".into()),
                    },
                    (Err(e), _) => Err(e.into()),
                    (_, None) => Err("buffer lost".into()),
                };
                (word, buf)
            }
        }
    }
}

/// Serves one client: a line `GET k` in, a line with the word (or the error) out.
async fn serve(table: Arc<Table>, stream: TcpStream) -> Result<()> {
    let (rd, mut wr) = stream.into_split();
    let mut lines = BufReader::new(rd).lines();
    let mut buf = Some(table.ring.register(8, MrAccess::LOCAL_WRITE).await?);
    while let Some(line) = lines.next_line().await? {
        let reply = match line.strip_prefix("GET ").map(str::parse::<u64>) {
            Some(Ok(k)) if k < WORDS => {
                let b = match buf.take() {
                    Some(b) => b,
                    None => table.ring.register(8, MrAccess::LOCAL_WRITE).await?,
                };
                let (word, back) = table.get(k, b).await;
                buf = back;
                match word {
                    Ok(w) => format!("{w}\n"),
                    Err(e) => format!("ERR {e}\n"),
                }
            }
            _ => format!("ERR expected GET 0..{WORDS}\n"),
        };
        wr.write_all(reply.as_bytes()).await?;
    }
    Ok(())
}

/// A client of the self-test: `n` GETs, each answer checked.
async fn client(port: u16, id: u64, n: u64) -> Result<()> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await?;
    let (rd, mut wr) = stream.into_split();
    let mut lines = BufReader::new(rd).lines();
    for i in 0..n {
        let k = (id * 97 + i * 13) % WORDS;
        wr.write_all(format!("GET {k}\n").as_bytes()).await?;
        let got = lines.next_line().await?.ok_or("connection closed")?;
        if got != (k * k).to_string() {
            return Err(format!("GET {k}: {got}, want {}", k * k).into());
        }
    }
    Ok(())
}

/// The table: registered, filled, imported through a virtual QP to this node. Returns
/// the region too, which must outlive every request.
async fn table(
    ring: AsyncRing,
    gid: [u8; 16],
) -> std::result::Result<(Table, MemoryRegion), Error> {
    let vqp = ring.connect(gid, 0).await?;
    let mut mem = ring
        .register(
            WORDS as usize * 8,
            MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ,
        )
        .await?;
    for (k, w) in mem.bytes_mut().chunks_mut(8).enumerate() {
        w.copy_from_slice(&((k * k) as u64).to_le_bytes());
    }
    let remote = ring
        .import(&vqp, &mem.export().expect("remote rights"))
        .await?;
    Ok((Table { ring, vqp, remote }, mem))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let selftest = std::env::args().nth(1).as_deref() == Some("selftest");
    let dev = Device::open()?;
    let gid = dev
        .query_devices()?
        .node_gid()
        .ok_or("no device with a RoCE v2 IPv4 GID")?;
    let ring = AsyncRing::new(Builder::new(64).build(dev)?)?;
    let (table, _mem) = table(ring, gid).await?;
    let table = Arc::new(table);
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let port = listener.local_addr()?.port();
    println!("serving GET k on 127.0.0.1:{port} (word k of a remote table of {WORDS})");
    let server = tokio::spawn({
        let table = table.clone();
        async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    break;
                };
                let table = table.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve(table, stream).await {
                        eprintln!("client: {e}");
                    }
                });
            }
        }
    });
    if !selftest {
        server.await?;
        return Ok(());
    }
    let (clients, gets) = (4, 25);
    let t = std::time::Instant::now();
    let runs: Vec<_> = (0..clients)
        .map(|id| tokio::spawn(client(port, id, gets)))
        .collect();
    for r in runs {
        r.await??;
    }
    println!(
        "async service: {} GETs from {clients} clients answered and checked in {:?}, {} enters",
        clients * gets,
        t.elapsed(),
        table.ring.enters()
    );
    server.abort();
    Ok(())
}
