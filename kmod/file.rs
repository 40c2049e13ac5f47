// SPDX-License-Identifier: GPL-2.0
//! The per-file context of `/dev/krcore` and the file operations the shim forwards.

use core::ffi::{c_int, c_long, c_uint, c_ulong, c_void};

use kernel::prelude::*;
use kernel::uaccess::UserSlice;

use crate::abi::device::{DeviceGid, QueryDevices, ABI_VERSION};
use crate::abi::errno::Errno;
use crate::abi::ioctl::{self, Command};
use crate::device::Registry;
use crate::shim::Vma;

/// State of one open file. Rings and virtual QPs hang off it in later issues.
pub(crate) struct FileCtx {
    _private: (),
}

impl FileCtx {
    fn ioctl(&self, cmd: u32, arg: usize) -> Result<c_long> {
        match ioctl::decode(cmd)? {
            Command::QueryDevices => query_devices(arg),
        }
    }
}

/// `IOC_QUERY_DEVICES`: read the argument, write up to `capacity` rows, write it back.
fn query_devices(arg: usize) -> Result<c_long> {
    let (mut reader, mut writer) = UserSlice::new(arg, size_of::<QueryDevices>()).reader_writer();
    let mut q: QueryDevices = reader.read()?;
    q.validate()?;
    let cap = q.capacity as usize;
    let mut rows = UserSlice::new(q.rows as usize, cap * size_of::<DeviceGid>()).writer();
    let (mut total, mut written) = (0u32, 0u32);
    Registry::get().for_each_row(|row| {
        if (written as usize) < cap {
            rows.write(row)?;
            written += 1;
        }
        total += 1;
        Ok(())
    })?;
    q.abi_version = ABI_VERSION;
    q.n_total = total;
    q.n_written = written;
    writer.write(&q)?;
    Ok(0)
}

/// open(2): allocate the file's context.
#[no_mangle]
extern "C" fn krcore_rs_open(out: *mut *mut c_void) -> c_int {
    match KBox::new(FileCtx { _private: () }, GFP_KERNEL) {
        Ok(ctx) => {
            // SAFETY: `out` points at a local of the shim's open handler.
            unsafe { *out = KBox::into_raw(ctx).cast() };
            0
        }
        Err(_) => ENOMEM.to_errno(),
    }
}

/// Last close: free the file's context.
#[no_mangle]
extern "C" fn krcore_rs_release(ctx: *mut c_void) {
    // SAFETY: `ctx` came from `KBox::into_raw` in `krcore_rs_open`, and release runs
    // once, after every other file operation on this file has returned.
    drop(unsafe { KBox::from_raw(ctx.cast::<FileCtx>()) });
}

/// ioctl(2).
#[no_mangle]
extern "C" fn krcore_rs_ioctl(ctx: *mut c_void, cmd: c_uint, arg: c_ulong) -> c_long {
    // SAFETY: `ctx` is the live context of an open file (see `krcore_rs_release`).
    let ctx = unsafe { &*ctx.cast::<FileCtx>() };
    match ctx.ioctl(cmd, arg as usize) {
        Ok(v) => v,
        Err(e) => e.to_errno() as c_long,
    }
}

/// mmap(2): nothing is mappable until a ring is set up.
#[no_mangle]
extern "C" fn krcore_rs_mmap(
    _ctx: *mut c_void,
    _vma: *mut Vma,
    _pgoff: c_ulong,
    _len: c_ulong,
) -> c_int {
    Errno::ENXIO.to_neg()
}
