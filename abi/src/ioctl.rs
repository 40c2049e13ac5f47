//! ioctl command numbers of `/dev/krcore` and their decoding.
//!
//! Commands use the kernel's `_IOC` encoding (`<asm-generic/ioctl.h>`): direction, type
//! `'K'`, number and the size of the argument struct. The kernel decodes every command
//! with [`decode`] before it touches user memory: an unknown command is `ENOTTY`, a
//! command naming a smaller struct than this ABI's is `EINVAL`, a larger one `E2BIG`.

use super::compat::OneOp;
use super::device::QueryDevices;
use super::errno::Errno;
use super::layout::{EnterArgs, EventfdArgs, SetupParams};

/// The ioctl type byte of every krcore command.
pub const IOC_MAGIC: u8 = b'K';

const NR_BITS: u32 = 8;
const TYPE_BITS: u32 = 8;
const SIZE_BITS: u32 = 14;
const NR_SHIFT: u32 = 0;
const TYPE_SHIFT: u32 = NR_SHIFT + NR_BITS;
const SIZE_SHIFT: u32 = TYPE_SHIFT + TYPE_BITS;
const DIR_SHIFT: u32 = SIZE_SHIFT + SIZE_BITS;
/// `_IOC_WRITE`: user space writes the argument (the kernel reads it).
const DIR_WRITE: u32 = 1;
/// `_IOC_READ`: user space reads the argument (the kernel writes it).
const DIR_READ: u32 = 2;

/// `_IOC(dir, type, nr, size)`.
pub const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << DIR_SHIFT)
        | ((ty as u32) << TYPE_SHIFT)
        | ((nr as u32) << NR_SHIFT)
        | ((size as u32) << SIZE_SHIFT)
}

/// `_IOWR(type, nr, T)`.
pub const fn iowr<T>(nr: u8) -> u32 {
    ioc(
        DIR_READ | DIR_WRITE,
        IOC_MAGIC,
        nr,
        core::mem::size_of::<T>(),
    )
}

/// `_IOW(type, nr, T)`.
pub const fn iow<T>(nr: u8) -> u32 {
    ioc(DIR_WRITE, IOC_MAGIC, nr, core::mem::size_of::<T>())
}

/// Number of [`IOC_QUERY_DEVICES`].
pub const NR_QUERY_DEVICES: u8 = 0x01;

/// Query the ABI version and the RDMA devices the module sees, with their ports and GIDs.
/// Argument: [`QueryDevices`]. `_IOWR('K', 0x01, struct QueryDevices)`, written out so the
/// C header carries the number; the assert below pins it to the encoding.
pub const IOC_QUERY_DEVICES: u32 = 0xc028_4b01;
const _: () = assert!(IOC_QUERY_DEVICES == iowr::<QueryDevices>(NR_QUERY_DEVICES));

/// Number of [`IOC_SETUP`].
pub const NR_SETUP: u8 = 0x02;

/// Set up this file's rings. Argument: [`SetupParams`] (sizes in, offsets out). Once per
/// file: a second setup is `EBUSY`. `_IOWR('K', 0x02, struct SetupParams)`.
pub const IOC_SETUP: u32 = 0xc060_4b02;
const _: () = assert!(IOC_SETUP == iowr::<SetupParams>(NR_SETUP));

/// Number of [`IOC_ENTER`].
pub const NR_ENTER: u8 = 0x03;

/// Submit and wait. Argument: [`EnterArgs`]. Returns the number of SQEs taken, or
/// `EINVAL` (with `TAIL_OVERRUN` set) when the SQ tail is hostile.
/// `_IOW('K', 0x03, struct EnterArgs)`.
pub const IOC_ENTER: u32 = 0x4020_4b03;
const _: () = assert!(IOC_ENTER == iow::<EnterArgs>(NR_ENTER));

/// Number of [`IOC_ENTER_VALUE`].
pub const NR_ENTER_VALUE: u8 = 0x07;

/// [`IOC_ENTER`] with its arguments in the ioctl's argument itself
/// ([`EnterArgs::pack`]), as `io_uring_enter` takes them in registers: nothing is copied
/// from user memory. Arguments that do not pack go through [`IOC_ENTER`].
/// `_IO('K', 0x07)`.
pub const IOC_ENTER_VALUE: u32 = 0x0000_4b07;
const _: () = assert!(IOC_ENTER_VALUE == ioc(0, IOC_MAGIC, NR_ENTER_VALUE, 0));

/// Number of [`IOC_REGISTER_EVENTFD`].
pub const NR_REGISTER_EVENTFD: u8 = 0x04;

/// Register an eventfd signalled when the ring gains completions. Argument:
/// [`EventfdArgs`]. `_IOW('K', 0x04, struct EventfdArgs)`.
pub const IOC_REGISTER_EVENTFD: u32 = 0x4010_4b04;
const _: () = assert!(IOC_REGISTER_EVENTFD == iow::<EventfdArgs>(NR_REGISTER_EVENTFD));

/// Number of [`IOC_ONE`].
pub const NR_ONE: u8 = 0x05;

/// The one-ioctl-per-op path (see [`compat`](super::compat)): push one SQE and/or pop
/// one CQE through the file's rings. Argument: [`OneOp`].
/// `_IOWR('K', 0x05, struct OneOp)`.
pub const IOC_ONE: u32 = 0xc080_4b05;
const _: () = assert!(IOC_ONE == iowr::<OneOp>(NR_ONE));

/// Number of [`IOC_DIRECT`].
pub const NR_DIRECT: u8 = 0x06;

/// Benchmark baseline, served only when the module is loaded with `bench_direct=1`
/// (`EPERM` otherwise): validate one send-queue SQE against the file's tables and post
/// it straight to its physical QP, bypassing rings, in-flight tracking and credits, then
/// wait for it and return its CQE (engine/direct.rs); a `Busy` CQE while
/// anything else is outstanding on the device. Argument: [`OneOp`] (`sqe` in, `cqe`
/// out). `_IOWR('K', 0x06, struct OneOp)`.
pub const IOC_DIRECT: u32 = 0xc080_4b06;
const _: () = assert!(IOC_DIRECT == iowr::<OneOp>(NR_DIRECT));

/// A decoded, size-checked ioctl command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// [`IOC_QUERY_DEVICES`].
    QueryDevices,
    /// [`IOC_SETUP`].
    Setup,
    /// [`IOC_ENTER`].
    Enter,
    /// [`IOC_ENTER_VALUE`].
    EnterValue,
    /// [`IOC_REGISTER_EVENTFD`].
    RegisterEventfd,
    /// [`IOC_ONE`].
    One,
    /// [`IOC_DIRECT`].
    Direct,
}

/// Decodes `cmd`, checking its type, number, direction and argument size.
pub fn decode(cmd: u32) -> Result<Command, Errno> {
    let ty = ((cmd >> TYPE_SHIFT) & ((1 << TYPE_BITS) - 1)) as u8;
    let nr = ((cmd >> NR_SHIFT) & ((1 << NR_BITS) - 1)) as u8;
    let size = ((cmd >> SIZE_SHIFT) & ((1 << SIZE_BITS) - 1)) as usize;
    let dir = cmd >> DIR_SHIFT;
    if ty != IOC_MAGIC {
        return Err(Errno::ENOTTY);
    }
    let (command, want_dir, want_size) = match nr {
        NR_QUERY_DEVICES => (
            Command::QueryDevices,
            DIR_READ | DIR_WRITE,
            core::mem::size_of::<QueryDevices>(),
        ),
        NR_SETUP => (
            Command::Setup,
            DIR_READ | DIR_WRITE,
            core::mem::size_of::<SetupParams>(),
        ),
        NR_ENTER => (Command::Enter, DIR_WRITE, core::mem::size_of::<EnterArgs>()),
        NR_ENTER_VALUE => (Command::EnterValue, 0, 0),
        NR_REGISTER_EVENTFD => (
            Command::RegisterEventfd,
            DIR_WRITE,
            core::mem::size_of::<EventfdArgs>(),
        ),
        NR_ONE => (
            Command::One,
            DIR_READ | DIR_WRITE,
            core::mem::size_of::<OneOp>(),
        ),
        NR_DIRECT => (
            Command::Direct,
            DIR_READ | DIR_WRITE,
            core::mem::size_of::<OneOp>(),
        ),
        _ => return Err(Errno::ENOTTY),
    };
    if dir != want_dir {
        return Err(Errno::EINVAL);
    }
    match size {
        s if s < want_size => Err(Errno::EINVAL),
        s if s > want_size => Err(Errno::E2BIG),
        _ => Ok(command),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_matches_linux_iowr() {
        // _IOWR('K', 1, 40-byte struct) computed by hand from <asm-generic/ioctl.h>.
        assert_eq!(core::mem::size_of::<QueryDevices>(), 40);
        assert_eq!(IOC_QUERY_DEVICES, (3 << 30) | (40 << 16) | (0x4b << 8) | 1);
    }

    #[test]
    fn decode_checks_everything() {
        assert_eq!(decode(IOC_QUERY_DEVICES), Ok(Command::QueryDevices));
        assert_eq!(decode(ioc(3, b'K', 0x7f, 40)), Err(Errno::ENOTTY));
        assert_eq!(decode(ioc(3, b'X', 1, 40)), Err(Errno::ENOTTY));
        assert_eq!(decode(ioc(3, b'K', 1, 39)), Err(Errno::EINVAL));
        assert_eq!(decode(ioc(3, b'K', 1, 41)), Err(Errno::E2BIG));
        assert_eq!(decode(ioc(2, b'K', 1, 40)), Err(Errno::EINVAL));
        assert_eq!(decode(IOC_SETUP), Ok(Command::Setup));
        assert_eq!(decode(IOC_ENTER), Ok(Command::Enter));
        assert_eq!(decode(IOC_ONE), Ok(Command::One));
        assert_eq!(decode(IOC_ENTER_VALUE), Ok(Command::EnterValue));
        assert_eq!(
            decode(ioc(1, b'K', NR_ENTER_VALUE, 0)),
            Err(Errno::EINVAL),
            "enter by value has no argument struct"
        );
        assert_eq!(decode(ioc(0, b'K', NR_ENTER_VALUE, 8)), Err(Errno::E2BIG));
        assert_eq!(
            decode(ioc(3, b'K', NR_ENTER, 32)),
            Err(Errno::EINVAL),
            "enter is write-only"
        );
    }
}
