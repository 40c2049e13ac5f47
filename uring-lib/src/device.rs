//! The `/dev/krcore` file and the device query.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use krcore_abi::device::{DeviceGid, QueryDevices, ABI_VERSION, GID_NONE};
use krcore_abi::errno::Errno;
use krcore_abi::ioctl::IOC_QUERY_DEVICES;

use crate::Error;

/// Where the module's misc device appears.
pub const DEVICE_PATH: &str = "/dev/krcore";

/// An open `/dev/krcore`.
#[derive(Debug)]
pub struct Device {
    file: File,
}

/// One (device, port, GID) row of the device query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidRow(pub DeviceGid);

impl std::ops::Deref for GidRow {
    type Target = DeviceGid;
    fn deref(&self) -> &DeviceGid {
        &self.0
    }
}

impl GidRow {
    /// The RDMA device's name.
    pub fn name(&self) -> &str {
        std::str::from_utf8(self.0.name_bytes()).unwrap_or("?")
    }

    /// Whether this row carries a GID (not the placeholder row of a GID-less port).
    pub fn has_gid(&self) -> bool {
        self.0.gid_index != GID_NONE
    }

    /// The IPv4 address of a RoCE v2 IPv4 GID (`::ffff:a.b.c.d`), the form a node's
    /// address takes in CONNECT.
    pub fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        let g = &self.0.gid;
        (self.has_gid() && g[..10] == [0; 10] && g[10..12] == [0xff, 0xff])
            .then(|| std::net::Ipv4Addr::new(g[12], g[13], g[14], g[15]))
    }

    /// The GID as an IPv6-style string (a RoCE v2 IPv4 GID shows as `::ffff:a.b.c.d`).
    pub fn gid_string(&self) -> String {
        if !self.has_gid() {
            return "-".into();
        }
        std::net::Ipv6Addr::from(self.0.gid).to_string()
    }
}

/// The answer of the device query.
#[derive(Clone, Debug)]
pub struct DeviceList {
    /// The kernel's ABI version.
    pub abi_version: u32,
    /// Every row the kernel reported.
    pub rows: Vec<GidRow>,
}

impl DeviceList {
    /// This node's address as CONNECT names it: the first RoCE v2 IPv4 GID. CONNECT
    /// to it reaches the node's own (loopback) pool.
    pub fn node_gid(&self) -> Option<[u8; 16]> {
        self.rows.iter().find(|r| r.ipv4().is_some()).map(|r| r.gid)
    }
}

impl Device {
    /// Opens [`DEVICE_PATH`].
    pub fn open() -> Result<Device, Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(DEVICE_PATH)
            .map_err(|_| Error::last_os("open /dev/krcore"))?;
        Ok(Device { file })
    }

    /// A device over an already open file (the benchmarks' stand-in for the device).
    #[cfg(any(test, feature = "bench-support"))]
    pub(crate) fn from_file(file: File) -> Device {
        Device { file }
    }

    /// Issues a raw ioctl, returning its non-negative result.
    ///
    /// # Safety
    /// `arg` must be valid for whatever `cmd` reads and writes.
    pub unsafe fn ioctl_raw(&self, cmd: u32, arg: usize) -> Result<i32, Error> {
        // SAFETY: the caller vouches for `arg`; the fd is open for our lifetime.
        unsafe { rustix::ioctl::ioctl(&self.file, Raw { cmd, arg }) }
            .map_err(|e| Error::errno("ioctl", Errno(e.raw_os_error())))
    }

    /// Lists the RDMA devices, ports and GIDs the module sees. Checks the ABI version.
    pub fn query_devices(&self) -> Result<DeviceList, Error> {
        let mut rows = vec![DeviceGid::ZERO; 8];
        loop {
            let mut q = QueryDevices {
                rows: rows.as_mut_ptr() as u64,
                capacity: rows.len() as u32,
                ..QueryDevices::default()
            };
            // SAFETY: `q` and `rows` (of `capacity` rows) outlive the call.
            unsafe { self.ioctl_raw(IOC_QUERY_DEVICES, &mut q as *mut _ as usize) }
                .map_err(|e| e.context("query devices"))?;
            if q.abi_version != ABI_VERSION {
                return Err(Error::errno(
                    "query devices: ABI version mismatch",
                    Errno::EPROTO,
                ));
            }
            if q.n_total as usize <= rows.len() {
                rows.truncate(q.n_written as usize);
                return Ok(DeviceList {
                    abi_version: q.abi_version,
                    rows: rows.into_iter().map(GidRow).collect(),
                });
            }
            // More rows than room (devices may come and go between calls): grow, retry.
            rows.resize(q.n_total as usize, DeviceGid::ZERO);
        }
    }
}

/// One of the module's ioctls, its argument as `ioctl_raw`'s caller vouches for it.
struct Raw {
    cmd: u32,
    arg: usize,
}

// SAFETY: `ioctl_raw`'s caller vouches that `arg` is valid for whatever `cmd` reads
// and writes (so it may mutate); the output is the call's return value alone.
unsafe impl rustix::ioctl::Ioctl for Raw {
    type Output = i32;
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> rustix::ioctl::Opcode {
        self.cmd as rustix::ioctl::Opcode
    }

    fn as_ptr(&mut self) -> *mut std::ffi::c_void {
        self.arg as *mut std::ffi::c_void
    }

    unsafe fn output_from_ptr(
        out: rustix::ioctl::IoctlOutput,
        _: *mut std::ffi::c_void,
    ) -> rustix::io::Result<i32> {
        Ok(out)
    }
}

impl AsRawFd for Device {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl AsFd for Device {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}
