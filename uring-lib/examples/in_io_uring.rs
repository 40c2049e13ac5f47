//! krcore entries inside io_uring's own ring, beside a file read.
//!
//! `in_io_uring NAME`: imports NAME (at least 64 bytes, published with remote write by
//! its node, e.g. `krcore serve --name NAME`), writes a file of 64 known bytes, then
//! through one io_uring (SQE128, CQE32) and no krcore enter:
//! - a link chain: io_uring's READ of the file into registered memory, then a krcore
//!   WRITE of that memory to NAME, which runs only once the read completed;
//! - a krcore READ of NAME back into other memory, which must hold the file's bytes;
//! - the same READ from an io_uring with SQPOLL, naming the ring's file registered;
//! - 32 NOPs in one submission;
//! - a RECV, refused `NotThroughUring`, and a READ on a virtual QP this ring does not
//!   have, refused `BadVqp`, each with its reason in the CQE.
use std::io::Write as _;
use std::os::fd::AsRawFd;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::Sqe;
use krcore_uring::in_io_uring::{command, outcome, CMD_OP};
use krcore_uring::{Builder, Device, MrAccess, Reason};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const LEN: u32 = 64;

/// Submits `entries` and waits for as many completions: (user_data, res, extra) each.
fn run(
    u: &mut IoUring<squeue::Entry128, cqueue::Entry32>,
    entries: &[squeue::Entry128],
) -> Result<Vec<(u64, i32, u64)>> {
    for e in entries {
        // SAFETY: every buffer an entry names (the file read's) lives past the wait.
        unsafe { u.submission().push(e)? };
    }
    u.submit_and_wait(entries.len())?;
    let mut out: Vec<_> = u
        .completion()
        .map(|c| (c.user_data(), c.result(), c.big_cqe()[0]))
        .collect();
    out.sort_by_key(|c| c.0);
    Ok(out)
}

fn main() -> Result<()> {
    let name = std::env::args().nth(1).ok_or("usage: in_io_uring NAME")?;
    let mut ring = Builder::new(16).build(Device::open()?)?;
    let (vqp, remote) = ring.connect_name(&name, LEN)?;
    let mut mr = ring.register(4096, MrAccess::LOCAL_WRITE)?;
    let want: Vec<u8> = (0..LEN as u8).map(|i| i.wrapping_mul(7) ^ 0x5a).collect();
    let path = std::env::temp_dir().join(format!("in_io_uring.{}", std::process::id()));
    std::fs::File::create(&path)?.write_all(&want)?;
    let file = std::fs::File::open(&path)?;
    std::fs::remove_file(&path)?;

    let mut u: IoUring<squeue::Entry128, cqueue::Entry32> = IoUring::builder().build(64)?;
    let fd = types::Fd(ring.as_raw_fd());
    let krcore = |sqe: Sqe, ud: u64| {
        opcode::UringCmd80::new(fd, CMD_OP)
            .cmd(command(&sqe))
            .build()
            .user_data(ud)
    };

    // The file's bytes into the MR, then on to NAME: one chain.
    let read_file = opcode::Read::new(types::Fd(file.as_raw_fd()), mr.addr() as *mut u8, LEN)
        .build()
        .flags(squeue::Flags::IO_LINK)
        .user_data(1)
        .into();
    let write = Sqe::one_sided(
        Opcode::Write,
        0,
        vqp.handle(),
        mr.handle(),
        mr.addr(),
        LEN,
        remote.handle(),
        remote.addr(),
    );
    let got = run(&mut u, &[read_file, krcore(write, 2)])?;
    if got.iter().map(|c| c.1).collect::<Vec<_>>() != [LEN as i32, LEN as i32] {
        return Err(format!("file read then WRITE: {got:?}").into());
    }
    // NAME back, into the MR's second KiB.
    let back = mr.addr() + 1024;
    let read = Sqe::one_sided(
        Opcode::Read,
        0,
        vqp.handle(),
        mr.handle(),
        back,
        LEN,
        remote.handle(),
        remote.addr(),
    );
    let got = run(&mut u, &[krcore(read, 3)])?;
    outcome("read", got[0].1, got[0].2)?;
    if mr.bytes()[1024..1024 + LEN as usize] != want[..] {
        return Err("what was read back is not the file's bytes".into());
    }
    // The same READ from an io_uring whose own kernel thread takes its SQ (SQPOLL),
    // naming the ring's file by its registered index: no system call per entry.
    let mut polled: IoUring<squeue::Entry128, cqueue::Entry32> =
        IoUring::builder().setup_sqpoll(2000).build(8)?;
    polled.submitter().register_files(&[ring.as_raw_fd()])?;
    let fixed = opcode::UringCmd80::new(types::Fixed(0), CMD_OP)
        .cmd(command(&read))
        .build()
        .user_data(6);
    let got = run(&mut polled, &[fixed])?;
    outcome("read (SQPOLL, registered file)", got[0].1, got[0].2)?;
    let nops: Vec<_> = (0..32).map(|i| krcore(Sqe::nop(0), 100 + i)).collect();
    let got = run(&mut u, &nops)?;
    if got.len() != 32 || got.iter().any(|c| c.1 != 0) {
        return Err(format!("32 NOPs: {got:?}").into());
    }
    let recv = Sqe::two_sided(Opcode::Recv, 0, vqp.handle(), mr.handle(), mr.addr(), LEN);
    let stray = Sqe::one_sided(Opcode::Read, 0, 999, mr.handle(), mr.addr(), 8, 0, 0);
    let got = run(&mut u, &[krcore(recv, 4), krcore(stray, 5)])?;
    let reasons: Vec<_> = got
        .iter()
        .map(|c| outcome("entry", c.1, c.2).err().and_then(|e| e.reason()))
        .collect();
    if reasons != [Some(Reason::NotThroughUring), Some(Reason::BadVqp)] {
        return Err(format!("RECV and a stray virtual QP: {got:?}").into());
    }
    ring.disconnect(vqp)?;
    println!(
        "in_io_uring: {name}: a file read linked to a WRITE, read back equal (also with \
         SQPOLL and a registered file); 32 NOPs; RECV refused NotThroughUring, a stray \
         virtual QP BadVqp"
    );
    Ok(())
}
