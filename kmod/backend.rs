// SPDX-License-Identifier: GPL-2.0
//! The engine's [`Backend`] in the kernel.
//!
//! Device contexts (PD, CQs, the pool of connected RC QPs) are not built yet, so there
//! is no physical QP to bind: CONNECT and REG_MR fail with `ENODEV`, and with no virtual
//! QP no data operation passes validation. NOP, validation and the ring protocol run for
//! real. Verbs arrive with the device contexts.

use crate::abi::engine::{Backend, Connection, MrKeys, PostError, RecvWr, SendWr};
use crate::abi::errno::Errno;
use crate::abi::sqe::MrAccess;

/// A backend with no device context.
pub(crate) struct NoDevice;

impl Backend for NoDevice {
    fn post_send(&mut self, _qp: u32, _wrs: &[SendWr]) -> Result<(), PostError> {
        Err(PostError {
            posted: 0,
            errno: Errno::ENODEV,
        })
    }
    fn post_recv(&mut self, _qp: u32, _wr: &RecvWr) -> Result<(), Errno> {
        Err(Errno::ENODEV)
    }
    fn reg_mr(&mut self, _addr: u64, _len: u32, _access: MrAccess) -> Result<MrKeys, Errno> {
        Err(Errno::ENODEV)
    }
    fn dereg_mr(&mut self, _keys: MrKeys) {}
    fn connect(&mut self, _gid: [u8; 16], _service: u32) -> Result<Connection, Errno> {
        Err(Errno::ENODEV)
    }
    fn disconnect(&mut self, _qp: u32) {}
}
