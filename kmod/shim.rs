// SPDX-License-Identifier: GPL-2.0
//! The C shim's functions as Rust sees them (declared in shim.h).

use core::ffi::{c_char, c_int, c_void};

/// An RDMA device (`struct ib_device`), opaque to Rust.
#[repr(C)]
pub(crate) struct IbDevice {
    _opaque: [u8; 0],
}

/// A VMA (`struct vm_area_struct`), opaque to Rust.
#[repr(C)]
pub(crate) struct Vma {
    _opaque: [u8; 0],
}

/// `struct krcore_port_attr`.
#[repr(C)]
#[derive(Default)]
pub(crate) struct PortAttr {
    pub(crate) state: u32,
    pub(crate) active_mtu: u32,
    pub(crate) gid_tbl_len: u32,
    pub(crate) link_layer: u32,
}

extern "C" {
    pub(crate) fn krcore_shim_ring_alloc(size: usize) -> *mut c_void;
    pub(crate) fn krcore_shim_ring_free(mem: *mut c_void);
    pub(crate) fn krcore_shim_ring_mmap(vma: *mut Vma, mem: *mut c_void) -> c_int;
    pub(crate) fn krcore_shim_register() -> c_int;
    pub(crate) fn krcore_shim_unregister();
    pub(crate) fn krcore_shim_dev_name(dev: *mut IbDevice) -> *const c_char;
    pub(crate) fn krcore_shim_dev_index(dev: *mut IbDevice) -> u32;
    pub(crate) fn krcore_shim_first_port(dev: *mut IbDevice) -> u32;
    pub(crate) fn krcore_shim_last_port(dev: *mut IbDevice) -> u32;
    pub(crate) fn krcore_shim_query_port(
        dev: *mut IbDevice,
        port: u32,
        out: *mut PortAttr,
    ) -> c_int;
    pub(crate) fn krcore_shim_query_gid(
        dev: *mut IbDevice,
        port: u32,
        index: u32,
        gid: *mut u8,
        gid_type: *mut u32,
    ) -> c_int;
}
