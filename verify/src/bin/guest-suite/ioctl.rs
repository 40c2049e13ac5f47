//! The ioctl path treats its input as hostile: each bad command or argument gets the
//! errno that names the problem, and nothing else happens.

use krcore_uring::abi::device::{DeviceGid, QueryDevices};
use krcore_uring::abi::ioctl::{ioc, IOC_ENTER_VALUE, IOC_QUERY_DEVICES, NR_QUERY_DEVICES};
use krcore_uring::abi::layout::EnterArgs;
use krcore_uring::abi::sqe::Sqe;
use krcore_uring::{Builder, Device};

use crate::harness::check;

const RW: u32 = 3;
const SIZE: usize = std::mem::size_of::<QueryDevices>();

fn errno_of(dev: &Device, cmd: u32, arg: usize) -> i32 {
    // SAFETY: the kernel must reject every call made here before touching `arg`, or
    // `arg` points at a QueryDevices (with rows the test chose) that outlives the call.
    match unsafe { dev.ioctl_raw(cmd, arg) } {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

fn expect(dev: &Device, what: &str, cmd: u32, arg: usize, want: i32) -> Result<(), String> {
    let got = errno_of(dev, cmd, arg);
    println!("  {what}: errno {got}");
    check(got == want, || format!("{what}: errno {got}, want {want}"))
}

pub fn rejects_bad_commands() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut q = QueryDevices::default();
    let arg = &mut q as *mut _ as usize;
    expect(
        &dev,
        "unknown number",
        ioc(RW, b'K', 0x7f, SIZE),
        arg,
        libc::ENOTTY,
    )?;
    expect(
        &dev,
        "foreign type",
        ioc(RW, b'T', NR_QUERY_DEVICES, SIZE),
        arg,
        libc::ENOTTY,
    )?;
    expect(
        &dev,
        "short struct",
        ioc(RW, b'K', NR_QUERY_DEVICES, SIZE - 8),
        arg,
        libc::EINVAL,
    )?;
    expect(
        &dev,
        "oversized struct",
        ioc(RW, b'K', NR_QUERY_DEVICES, SIZE + 8),
        arg,
        libc::E2BIG,
    )?;
    expect(
        &dev,
        "write-only direction",
        ioc(1, b'K', NR_QUERY_DEVICES, SIZE),
        arg,
        libc::EINVAL,
    )?;
    // Nothing may have been written back by a rejected command.
    check(q == QueryDevices::default(), || {
        format!("rejected ioctl wrote {q:?}")
    })?;
    // mmap has nothing to map before a ring exists.
    // SAFETY: a fresh shared mapping request; the result is unmapped if it succeeds.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&dev),
            0,
        )
    };
    let err = std::io::Error::last_os_error().raw_os_error();
    if p != libc::MAP_FAILED {
        // SAFETY: mapped just above.
        unsafe { libc::munmap(p, 4096) };
    }
    check(p == libc::MAP_FAILED && err == Some(libc::ENXIO), || {
        format!("mmap without rings: {err:?}, want ENXIO")
    })
}

pub fn rejects_bad_arguments() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    expect(&dev, "null argument", IOC_QUERY_DEVICES, 0, libc::EFAULT)?;
    expect(
        &dev,
        "kernel-space argument",
        IOC_QUERY_DEVICES,
        0xffff_8880_0000_0000,
        libc::EFAULT,
    )?;
    let mut q = QueryDevices {
        resv: [0, 0, 1, 0],
        ..Default::default()
    };
    expect(
        &dev,
        "nonzero reserved",
        IOC_QUERY_DEVICES,
        &mut q as *mut _ as usize,
        libc::EINVAL,
    )?;
    let mut q = QueryDevices {
        rows: 0x10,
        capacity: 4,
        ..Default::default()
    };
    expect(
        &dev,
        "unmapped rows pointer",
        IOC_QUERY_DEVICES,
        &mut q as *mut _ as usize,
        libc::EFAULT,
    )?;
    // The device still answers normally afterwards.
    let list = dev.query_devices().map_err(|e| e.to_string())?;
    check(!list.rows.is_empty(), || {
        "no rows after the bad calls".into()
    })
}

pub fn truncates_to_capacity() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut q = QueryDevices::default();
    expect(
        &dev,
        "capacity 0",
        IOC_QUERY_DEVICES,
        &mut q as *mut _ as usize,
        0,
    )?;
    check(q.n_total >= 1 && q.n_written == 0, || {
        format!("capacity 0: {q:?}")
    })?;
    let mut one = [DeviceGid::ZERO; 1];
    let mut q = QueryDevices {
        rows: one.as_mut_ptr() as u64,
        capacity: 1,
        ..Default::default()
    };
    expect(
        &dev,
        "capacity 1",
        IOC_QUERY_DEVICES,
        &mut q as *mut _ as usize,
        0,
    )?;
    check(q.n_written == 1 && one[0].name_bytes() == b"rxe0", || {
        format!("capacity 1: {q:?} {:?}", one[0])
    })
}

/// IOC_ENTER_VALUE takes any 64-bit value: before setup it is ENXIO, unknown flag bits
/// are EINVAL, a count larger than the ring takes what is there, and the ring works on.
pub fn enter_by_value_checks_its_value() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    expect(&dev, "enter before setup", IOC_ENTER_VALUE, 0, libc::ENXIO)?;
    let mut r = Builder::new(8)
        .build(Device::open().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    for (what, v, want) in [
        ("unknown flag bit", 1usize << 63, libc::EINVAL),
        ("every bit set", usize::MAX, libc::EINVAL),
        ("to_submit 2^24-1, nothing queued", (1 << 24) - 1, 0),
    ] {
        expect(r.device(), what, IOC_ENTER_VALUE, v, want)?;
    }
    // SAFETY: a NOP names no memory.
    unsafe { r.submission().push(&Sqe::nop(7)) }.map_err(|e| format!("{e:?}"))?;
    r.submit_and_wait(1).map_err(|e| e.to_string())?;
    let got: Vec<_> = r.completions().map(|c| (c.user_data, c.res)).collect();
    check(got == [(7, 0)], || {
        format!("NOP after the bad values: {got:?}")
    })?;
    let packed = EnterArgs::default().pack();
    check(packed == Some(0), || {
        format!("empty enter packs to {packed:?}")
    })
}
