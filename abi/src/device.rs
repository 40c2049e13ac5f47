//! The device query: what RDMA devices, ports and GIDs the module sees.
//!
//! [`QueryDevices`] is the argument of [`IOC_QUERY_DEVICES`](super::ioctl::IOC_QUERY_DEVICES).
//! The kernel answers with one [`DeviceGid`] row per (device, port, valid GID), and one
//! row with `gid_index == GID_NONE` for a port that has no GID yet, so every port shows.

use super::errno::Errno;

/// The ABI version this crate describes; the kernel reports its own in
/// [`QueryDevices::abi_version`] and user space refuses a mismatch.
pub const ABI_VERSION: u32 = 3;

/// `gid_index` of a row that lists a port without any valid GID.
pub const GID_NONE: u32 = u32::MAX;

/// Length of [`DeviceGid::name`], the kernel's `IB_DEVICE_NAME_MAX`.
pub const DEVICE_NAME_LEN: usize = 64;

/// Argument of the device query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "zerocopy",
    derive(
        zerocopy::FromBytes,
        zerocopy::IntoBytes,
        zerocopy::KnownLayout,
        zerocopy::Immutable
    )
)]
#[repr(C)]
pub struct QueryDevices {
    /// Out: the kernel's [`ABI_VERSION`].
    pub abi_version: u32,
    /// Out: how many rows the kernel has, whether or not they all fit.
    pub n_total: u32,
    /// In: user address of an array of `capacity` [`DeviceGid`] rows.
    pub rows: u64,
    /// In: capacity of `rows`, in rows.
    pub capacity: u32,
    /// Out: how many rows were written (`min(n_total, capacity)`).
    pub n_written: u32,
    /// Reserved, must be zero.
    pub resv: [u32; 4],
}

impl QueryDevices {
    /// Checks the fields user space sets: the reserved words must be zero, so they can
    /// carry meaning in a later ABI version.
    pub fn validate(&self) -> Result<(), Errno> {
        if self.resv != [0; 4] {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }
}

/// One (device, port, GID) row of the device query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "zerocopy",
    derive(
        zerocopy::FromBytes,
        zerocopy::IntoBytes,
        zerocopy::KnownLayout,
        zerocopy::Immutable
    )
)]
#[repr(C)]
pub struct DeviceGid {
    /// Device name (e.g. `rxe0`), NUL-padded.
    pub name: [u8; DEVICE_NAME_LEN],
    /// The kernel's index of the device (`ib_device.index`).
    pub dev_index: u32,
    /// Port number (1-based).
    pub port: u32,
    /// `enum ib_port_state` (4 is ACTIVE).
    pub port_state: u8,
    /// Link layer: 1 InfiniBand, 2 Ethernet (RoCE).
    pub link_layer: u8,
    /// `enum ib_gid_type` (2 is RoCE v2).
    pub gid_type: u8,
    /// Reserved, zero.
    pub resv0: u8,
    /// `enum ib_mtu` of the port's active MTU.
    pub active_mtu: u32,
    /// Index in the port's GID table, or [`GID_NONE`].
    pub gid_index: u32,
    /// Reserved, zero.
    pub resv1: u32,
    /// The GID, network byte order.
    pub gid: [u8; 16],
}

impl DeviceGid {
    /// An all-zero row, for filling in.
    pub const ZERO: DeviceGid = DeviceGid {
        name: [0; DEVICE_NAME_LEN],
        dev_index: 0,
        port: 0,
        port_state: 0,
        link_layer: 0,
        gid_type: 0,
        resv0: 0,
        active_mtu: 0,
        gid_index: 0,
        resv1: 0,
        gid: [0; 16],
    };

    /// The device name up to its first NUL.
    pub fn name_bytes(&self) -> &[u8] {
        let end = self
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(DEVICE_NAME_LEN);
        &self.name[..end]
    }
}

const _: () = assert!(core::mem::size_of::<QueryDevices>() == 40);
const _: () = assert!(core::mem::size_of::<DeviceGid>() == 104);
const _: () = assert!(core::mem::offset_of!(DeviceGid, gid) == 88);
