//! Connect, register memory, import it as the peer's, then WRITE, READ and FAA in one
//! batch, with the safe API. On one machine the device's own GID reaches the loopback
//! pool, so "the peer" is this process.
//!
//! ```text
//! cargo run --example read_write        (inside the test VM: see README)
//! ```
use krcore_uring::abi::sqe::MrAccess;
use krcore_uring::{Batch, Builder, Device, Error};

fn main() -> Result<(), Error> {
    let dev = Device::open()?;
    let gid = dev
        .query_devices()?
        .node_gid()
        .expect("a device with a RoCE v2 IPv4 GID");
    let mut ring = Builder::new(64).build(dev)?;
    let vqp = ring.connect(gid, 0)?;
    println!("connected: virtual QP on pooled QP {}", vqp.qpn());

    let access = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_ATOMIC;
    let mut local = ring.register(4096, access)?;
    local.bytes_mut()[..5].copy_from_slice(b"hello");
    // The "peer's" memory: here, our own region, imported as a remote one.
    let remote = ring.import(
        &vqp,
        &local.export().expect("registered with remote rights"),
    )?;

    let mut batch = Batch::new();
    batch
        .write(&vqp, &local, 0, &remote, 1024, 5)?
        .read(&vqp, &local, 2048, &remote, 1024, 5)?
        .faa(&vqp, &local, 3072, &remote, 3080, 10)?;
    for (i, c) in ring.run(batch)?.into_iter().enumerate() {
        let c = c?;
        println!("operation {i}: {} bytes", c.res);
    }
    let b = local.bytes();
    println!(
        "remote [1024..1029] = {:?}, read back {:?}",
        std::str::from_utf8(&b[1024..1029]).unwrap_or("?"),
        std::str::from_utf8(&b[2048..2053]).unwrap_or("?")
    );
    assert_eq!(&b[2048..2053], b"hello");

    // A range the imported region does not cover is refused before it is submitted
    // (and the kernel would refuse it too, naming the reason).
    if let Err(e) = Batch::new().read(&vqp, &local, 0, &remote, 4092, 8) {
        println!("refused: {e}");
    }
    ring.deregister(local)?;
    ring.disconnect(vqp)?;
    Ok(())
}
