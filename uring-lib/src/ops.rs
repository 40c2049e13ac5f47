//! The control operations, each as its entry and what its completion makes, so the
//! blocking [`Ring`](crate::Ring) and the [`AsyncRing`](crate::AsyncRing) run the same
//! ones and differ only in how they wait.

use std::marker::PhantomData;
use std::sync::Weak;

use krcore_abi::cqe::{Cqe, Reason};
use krcore_abi::sqe::{MrAccess, Sqe};

use crate::lock::CoreLock;
use crate::{Error, MemoryRegion, MrDescriptor, Registered, RemoteRegion, Vqp};

/// The ring as a completion's maker sees it (regions hold it to deregister).
pub(crate) type RingRef = Weak<CoreLock>;

/// The identity of the ring `ring` stands for (0 once it is gone, which no ring has).
pub(crate) fn ring_id(ring: &RingRef) -> u64 {
    ring.upgrade().map_or(0, |r| r.id)
}

/// The refusal of a handle that belongs to another ring than the one asked: each ring
/// numbers its handles from the same start, so the kernel would take it for one of the
/// asked ring's own.
pub(crate) fn foreign() -> Error {
    Error::errno("a handle of another ring", krcore_abi::errno::Errno::EINVAL)
}

/// One control entry, and `make`: what its successful completion makes (a plain
/// closure, so running a control operation allocates nothing for it).
pub(crate) struct Control<T, F: FnOnce(&Cqe, &RingRef) -> T> {
    /// What the operation is called in errors.
    pub(crate) op: &'static str,
    pub(crate) sqe: Sqe,
    pub(crate) make: F,
    /// The ring whose handle the entry names, if it names one.
    uses: Option<u64>,
}

impl<T, F: FnOnce(&Cqe, &RingRef) -> T> Control<T, F> {
    fn new(op: &'static str, sqe: Sqe, make: F) -> Control<T, F> {
        Control {
            op,
            sqe,
            make,
            uses: None,
        }
    }

    /// The entry names a handle of ring `id`.
    fn using(mut self, id: u64) -> Control<T, F> {
        self.uses = Some(id);
        self
    }

    /// Whether it may run on `ring`: every handle it names is that ring's.
    pub(crate) fn check(&self, ring: &CoreLock) -> Result<(), Error> {
        match self.uses {
            Some(id) if id != ring.id => Err(foreign()),
            _ => Ok(()),
        }
    }

    /// Its result, from its completion.
    pub(crate) fn finish(self, c: &Cqe, ring: &RingRef) -> Result<T, Error> {
        if c.res < 0 {
            return Err(Error::failed(self.op, c));
        }
        Ok((self.make)(c, ring))
    }
}

/// An export name as an SQE carries it; one the kernel would refuse is refused here, with
/// the kernel's reason.
fn name_words(name: &str) -> Result<[u64; 3], Error> {
    krcore_abi::meta::record::name(name)
        .map(|n| krcore_abi::meta::record::name_words(&n))
        .ok_or_else(|| Error::refused("export name", Reason::BadName))
}

/// A CONNECT entry ([`Sqe::connect`], [`Sqe::connect_from`] or [`Sqe::pair`]) and the
/// virtual QP its completion gives.
pub(crate) fn connect(sqe: Sqe) -> Control<Vqp, impl FnOnce(&Cqe, &RingRef) -> Vqp> {
    Control::new("connect", sqe, |c, ring| Vqp {
        handle: c.res as u32,
        qpn: c.aux as u32,
        port: c.port,
        ring: ring_id(ring),
    })
}

pub(crate) fn disconnect(vqp: Vqp) -> Control<(), impl FnOnce(&Cqe, &RingRef)> {
    Control::new("disconnect", Sqe::disconnect(0, vqp.handle), |_, _| ()).using(vqp.ring)
}

pub(crate) fn unlisten(service: u32) -> Control<(), impl FnOnce(&Cqe, &RingRef)> {
    Control::new("unlisten", Sqe::unlisten(0, service), |_, _| ())
}

/// Registers `len` bytes at `ptr`, lent for `'b`.
fn register_at<'b>(
    ptr: *mut u8,
    len: usize,
    access: MrAccess,
) -> Result<Control<Registered<'b>, impl FnOnce(&Cqe, &RingRef) -> Registered<'b>>, Error> {
    let len32 = u32::try_from(len)
        .map_err(|_| Error::errno("register memory", krcore_abi::errno::Errno::ERANGE))?;
    // The address travels as a number: the closure needs no raw pointer to be Send.
    let addr = ptr as usize;
    Ok(Control::new(
        "register memory",
        Sqe::reg_mr(0, addr as u64, len32, access),
        move |c, ring| Registered {
            ptr: addr as *mut u8,
            len,
            handle: c.res as u32,
            descriptor: c.aux,
            ring: ring.clone(),
            ring_id: ring_id(ring),
            live: true,
            _lent: PhantomData,
        },
    ))
}

/// The rights only this process's own requests use: memory lent with no more may end
/// its loan as Rust's borrows say (a forgotten region only pins pages), since nothing
/// reaches it between requests.
const LOCAL_ONLY: MrAccess = MrAccess::LOCAL_WRITE;

/// Registers `buf` for as long as it is lent, with local rights alone (see
/// [`Ring::register_slice`](crate::Ring::register_slice)).
pub(crate) fn register_slice<'b>(
    buf: &'b mut [u8],
    access: MrAccess,
) -> Result<Control<Registered<'b>, impl FnOnce(&Cqe, &RingRef) -> Registered<'b>>, Error> {
    if !LOCAL_ONLY.contains(access) {
        return Err(Error::refused(
            "register lent memory with remote rights",
            Reason::MrAccess,
        ));
    }
    register_at(buf.as_mut_ptr(), buf.len(), access)
}

/// Registers `buf` with any rights.
///
/// # Safety
/// As [`Ring::register_slice_remote`](crate::Ring::register_slice_remote).
pub(crate) unsafe fn register_slice_remote<'b>(
    buf: &'b mut [u8],
    access: MrAccess,
) -> Result<Control<Registered<'b>, impl FnOnce(&Cqe, &RingRef) -> Registered<'b>>, Error> {
    register_at(buf.as_mut_ptr(), buf.len(), access)
}

/// Allocates `len` bytes (rounded up to 8), zeroed, and registers them.
pub(crate) fn register(
    len: usize,
    access: MrAccess,
) -> Result<Control<MemoryRegion, impl FnOnce(&Cqe, &RingRef) -> MemoryRegion>, Error> {
    // A region holds at most 4 GiB: refused before anything is allocated.
    if len.div_ceil(8) * 8 > u32::MAX as usize {
        return Err(Error::errno(
            "register memory",
            krcore_abi::errno::Errno::ERANGE,
        ));
    }
    let buf = MemoryRegion::alloc(len)?;
    // The buffer lives in the MemoryRegion the completion makes, which frees it only
    // after its DEREG_MR completed (else leaks it); on failure nothing was registered.
    let reg = register_at(buf.as_ptr() as *mut u8, buf.len() * 8, access)?;
    Ok(Control::new(reg.op, reg.sqe, move |c, ring| MemoryRegion {
        region: (reg.make)(c, ring),
        buf,
    }))
}

pub(crate) fn import(
    vqp: &Vqp,
    d: &MrDescriptor,
) -> Control<RemoteRegion, impl FnOnce(&Cqe, &RingRef) -> RemoteRegion> {
    let (ring, vqp, d) = (vqp.ring, vqp.handle, *d);
    Control::new(
        "import memory",
        Sqe::import_mr(0, vqp, d.addr, d.len, d.descriptor),
        move |c, _| RemoteRegion {
            handle: c.res as u32,
            vqp,
            addr: d.addr,
            len: d.len,
            ring,
        },
    )
    .using(ring)
}

pub(crate) fn publish(
    mr: &Registered<'_>,
    name: &str,
    mode: u16,
) -> Result<Control<(), impl FnOnce(&Cqe, &RingRef)>, Error> {
    Ok(Control::new(
        "publish memory",
        Sqe::publish(0, mr.handle, name_words(name)?, mode),
        |_, _| (),
    )
    .using(mr.ring_id))
}

pub(crate) fn resolve_name(
    name: &str,
) -> Result<Control<std::net::Ipv4Addr, impl FnOnce(&Cqe, &RingRef) -> std::net::Ipv4Addr>, Error> {
    Ok(Control::new(
        "resolve a name",
        Sqe::resolve_name(0, name_words(name)?),
        |c, _| std::net::Ipv4Addr::from((c.aux >> 32) as u32),
    ))
}

pub(crate) fn import_name(
    vqp: &Vqp,
    name: &str,
    len: u32,
    owner: Option<u32>,
) -> Result<Control<RemoteRegion, impl FnOnce(&Cqe, &RingRef) -> RemoteRegion>, Error> {
    let (ring, vqp) = (vqp.ring, vqp.handle);
    Ok(Control::new(
        "import memory by name",
        Sqe::import_name(0, vqp, name_words(name)?, len, owner),
        move |c, _| RemoteRegion {
            handle: c.res as u32,
            vqp,
            addr: c.aux,
            len,
            ring,
        },
    )
    .using(ring))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Safe code lends memory with local rights only: `mem::forget` of a region with a
    /// remote right would leave peers writing memory whose loan ended.
    #[test]
    fn lent_memory_takes_no_remote_right_in_safe_code() {
        let mut buf = [0u8; 64];
        for access in [
            MrAccess::REMOTE_READ,
            MrAccess::REMOTE_WRITE,
            MrAccess::REMOTE_ATOMIC,
        ] {
            let e = register_slice(&mut buf, access | MrAccess::LOCAL_WRITE).err();
            assert_eq!(
                e.and_then(|e| e.reason()),
                Some(Reason::MrAccess),
                "{access:?}"
            );
        }
        assert!(register_slice(&mut buf, MrAccess::LOCAL_WRITE).is_ok());
        assert!(register_slice(&mut buf, MrAccess::empty()).is_ok());
    }
}
