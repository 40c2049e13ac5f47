//! uring-lib's safe API against the real module: batches, reasons, the example.

use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Batch, Builder, Device};

use crate::datapath::LOCAL_GID;
use crate::harness::{check, sh};

pub fn safe_batches_and_reasons() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut ring = Builder::new(8).build(dev).map_err(|e| e.to_string())?;
    let vqp = ring.connect(LOCAL_GID, 3).map_err(|e| e.to_string())?;
    let access = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_ATOMIC;
    let mut mr = ring.register(8192, access).map_err(|e| e.to_string())?;
    for (i, b) in mr.bytes_mut()[..4096].iter_mut().enumerate() {
        *b = i as u8;
    }
    // Imported smaller than the region: the kernel must refuse beyond it.
    let remote = ring
        .import(&vqp, mr.addr(), 4096, mr.rkey())
        .map_err(|e| e.to_string())?;
    // A raw entry in flight meanwhile: its completion must not be lost.
    // SAFETY: a NOP names no memory.
    unsafe { ring.push(&Sqe::nop(77)) }.map_err(|e| e.to_string())?;
    let mut b = Batch::new();
    for k in 0..20u64 {
        // 20 reads of 64 B: more than the SQ holds, so the batch is fed in parts.
        b.read(&vqp, &mr, 4096 + k * 64, &remote, k * 64, 64)
            .map_err(|e| e.to_string())?;
    }
    let out = ring.run(b).map_err(|e| e.to_string())?;
    check(
        out.len() == 20 && out.iter().all(|c| c.as_ref().is_ok_and(|c| c.res == 64)),
        || format!("{out:?}"),
    )?;
    let bytes = mr.bytes();
    check(bytes[4096..4096 + 1280] == bytes[..1280], || {
        "READ data differs".into()
    })?;
    let raw: Vec<u64> = ring.completions().map(|c| c.user_data).collect();
    check(raw == [77], || {
        format!("raw completion lost or duplicated: {raw:?}")
    })?;
    // The library checks ranges before submitting (the kernel's own check is tested in
    // datapath).
    check(
        Batch::new().read(&vqp, &mr, 0, &remote, 4090, 8).is_err(),
        || "out-of-range read built".into(),
    )?;
    let e = ring.disconnect(vqp).err();
    check(e.is_none(), || format!("disconnect: {e:?}"))?;
    let gone = ring.connect([9; 16], 0).err();
    println!(
        "  connect to a foreign GID: {}",
        gone.as_ref().map(|e| e.to_string()).unwrap_or_default()
    );
    check(
        gone.is_some_and(|e| {
            e.raw_os_error() == Some(libc::ENETUNREACH) && e.reason() == Some(Reason::Verbs)
        }),
        || "foreign GID accepted".into(),
    )?;
    ring.deregister(mr).map_err(|e| e.to_string())
}

pub fn example_read_write_runs() -> Result<(), String> {
    let out = sh(&["target/release/examples/read_write"])?;
    for l in out.lines() {
        println!("  {l}");
    }
    check(
        out.contains("read back Some(\"hello\")") || out.contains("read back \"hello\""),
        || format!("output: {out}"),
    )
}
