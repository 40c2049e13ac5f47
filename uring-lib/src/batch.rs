//! A batch of data operations, built against typed handles and checked for range on
//! the spot (the kernel checks again: it trusts nothing).

use std::marker::PhantomData;

use krcore_abi::errno::Errno;
use krcore_abi::opcode::Opcode;
use krcore_abi::sqe::Sqe;

use crate::lock::CoreLock;
use crate::{Error, Registered, RemoteRegion, Vqp};

/// Data operations to run together with [`Ring::run`](crate::Ring::run). It borrows the
/// local regions it uses, so they stay alive and untouched until their completions.
/// Completions come back in the order the operations were added.
///
/// A region a batch uses cannot be dropped (deregistered, its memory freed) before
/// the batch has run:
///
/// ```compile_fail,E0505
/// # use krcore_uring::{Batch, MemoryRegion, RemoteRegion, Ring, Vqp};
/// # fn f(ring: &mut Ring, vqp: &Vqp, mr: MemoryRegion, remote: &RemoteRegion)
/// #     -> Result<(), krcore_uring::Error> {
/// let mut b = Batch::new();
/// b.read(vqp, &mr, 0, remote, 0, 8)?;
/// drop(mr); // the READ would land in freed memory
/// ring.run(b)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct Batch<'a> {
    pub(crate) sqes: Vec<Sqe>,
    /// The ring whose handles the batch names (the first operation's).
    ring: Option<u64>,
    /// Some operation named a handle of another ring than the first's.
    mixed: bool,
    _regions: PhantomData<&'a Registered<'a>>,
}

fn range(what: &'static str, off: u64, len: u32, size: u64) -> Result<(), Error> {
    match off.checked_add(len as u64) {
        Some(end) if end <= size && len > 0 => Ok(()),
        _ => Err(Error::errno(what, Errno::ERANGE)),
    }
}

impl Batch<'_> {
    /// The entries `build` adds over `regions` (what the batch runs that own their
    /// regions, blocking or async, push), to run on `ring`.
    pub(crate) fn entries_over<F>(
        ring: &CoreLock,
        regions: &[crate::MemoryRegion],
        build: F,
    ) -> Result<Vec<Sqe>, Error>
    where
        F: for<'r> FnOnce(&mut Batch<'r>, &'r [crate::MemoryRegion]) -> Result<(), Error>,
    {
        let mut b = Batch::new();
        build(&mut b, regions)?;
        b.check(ring)?;
        Ok(b.sqes)
    }

    /// Notes that an operation names a handle of ring `id`.
    fn note(&mut self, id: u64) {
        match self.ring {
            None => self.ring = Some(id),
            Some(r) => self.mixed |= r != id,
        }
    }

    /// Whether it may run on `ring`: every handle it names is that ring's (each ring
    /// numbers its handles from the same start, so another's would be taken for one
    /// of its own).
    pub(crate) fn check(&self, ring: &CoreLock) -> Result<(), Error> {
        match self.mixed || self.ring.is_some_and(|r| r != ring.id) {
            true => Err(crate::ops::foreign()),
            false => Ok(()),
        }
    }
}

impl<'a> Batch<'a> {
    /// An empty batch.
    pub fn new() -> Batch<'a> {
        Batch::default()
    }

    /// Operations in the batch.
    pub fn len(&self) -> usize {
        self.sqes.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.sqes.is_empty()
    }

    #[allow(clippy::too_many_arguments)] // the verb's own operands
    fn one_sided(
        &mut self,
        op: Opcode,
        vqp: &Vqp,
        local: &'a Registered<'_>,
        local_off: u64,
        remote: &RemoteRegion,
        remote_off: u64,
        len: u32,
    ) -> Result<&mut Self, Error> {
        range("local range", local_off, len, local.len() as u64)?;
        range("remote range", remote_off, len, remote.len as u64)?;
        for id in [vqp.ring, local.ring_id, remote.ring] {
            self.note(id);
        }
        let ud = self.sqes.len() as u64;
        self.sqes.push(Sqe::one_sided(
            op,
            ud,
            vqp.handle,
            local.handle,
            local.addr() + local_off,
            len,
            remote.handle,
            remote.addr + remote_off,
        ));
        Ok(self)
    }

    /// RDMA READ of `len` bytes at `remote_off` into `local` at `local_off`.
    pub fn read(
        &mut self,
        vqp: &Vqp,
        local: &'a Registered<'_>,
        local_off: u64,
        remote: &RemoteRegion,
        remote_off: u64,
        len: u32,
    ) -> Result<&mut Self, Error> {
        self.one_sided(Opcode::Read, vqp, local, local_off, remote, remote_off, len)
    }

    /// RDMA WRITE of `len` bytes of `local` at `local_off` to `remote_off`.
    pub fn write(
        &mut self,
        vqp: &Vqp,
        local: &'a Registered<'_>,
        local_off: u64,
        remote: &RemoteRegion,
        remote_off: u64,
        len: u32,
    ) -> Result<&mut Self, Error> {
        self.one_sided(
            Opcode::Write,
            vqp,
            local,
            local_off,
            remote,
            remote_off,
            len,
        )
    }

    /// RDMA WRITE with immediate data: `len` bytes of `local` at `local_off` to
    /// `remote_off`, consuming the oldest receive the peer posted on its end, which
    /// completes with the length and `imm` (the bytes land in the remote range, not in
    /// the receive).
    #[allow(clippy::too_many_arguments)]
    pub fn write_imm(
        &mut self,
        vqp: &Vqp,
        local: &'a Registered<'_>,
        local_off: u64,
        remote: &RemoteRegion,
        remote_off: u64,
        len: u32,
        imm: u32,
    ) -> Result<&mut Self, Error> {
        self.one_sided(
            Opcode::WriteImm,
            vqp,
            local,
            local_off,
            remote,
            remote_off,
            len,
        )?;
        let s = self.sqes.last_mut().expect("just pushed");
        *s = s.with_imm(imm);
        Ok(self)
    }

    /// 8-byte compare-and-swap at `remote_off`; the old value lands at `local_off`.
    #[allow(clippy::too_many_arguments)] // the verb's own operands
    pub fn cas(
        &mut self,
        vqp: &Vqp,
        local: &'a Registered<'_>,
        local_off: u64,
        remote: &RemoteRegion,
        remote_off: u64,
        compare: u64,
        swap: u64,
    ) -> Result<&mut Self, Error> {
        self.one_sided(Opcode::Cas, vqp, local, local_off, remote, remote_off, 8)?;
        let s = self.sqes.last_mut().expect("just pushed");
        (s.arg0, s.arg1) = (compare, swap);
        Ok(self)
    }

    /// 8-byte fetch-and-add at `remote_off`; the old value lands at `local_off`.
    pub fn faa(
        &mut self,
        vqp: &Vqp,
        local: &'a Registered<'_>,
        local_off: u64,
        remote: &RemoteRegion,
        remote_off: u64,
        add: u64,
    ) -> Result<&mut Self, Error> {
        self.one_sided(Opcode::Faa, vqp, local, local_off, remote, remote_off, 8)?;
        self.sqes.last_mut().expect("just pushed").arg0 = add;
        Ok(self)
    }

    /// SEND of `len` bytes of `local` at `local_off`, with immediate data if given.
    pub fn send(
        &mut self,
        vqp: &Vqp,
        local: &'a Registered<'_>,
        local_off: u64,
        len: u32,
        imm: Option<u32>,
    ) -> Result<&mut Self, Error> {
        range("local range", local_off, len, local.len() as u64)?;
        self.note(vqp.ring);
        self.note(local.ring_id);
        let ud = self.sqes.len() as u64;
        let op = if imm.is_some() {
            Opcode::SendImm
        } else {
            Opcode::Send
        };
        self.sqes.push(
            Sqe::two_sided(
                op,
                ud,
                vqp.handle,
                local.handle,
                local.addr() + local_off,
                len,
            )
            .with_imm(imm.unwrap_or(0)),
        );
        Ok(self)
    }

    /// DISCONNECT of `vqp`, after the entries before it (receives still posted on it
    /// come back `Cancelled` first; across nodes once the peer's kernel confirmed it
    /// writes none of them).
    pub fn disconnect(&mut self, vqp: Vqp) -> &mut Self {
        self.note(vqp.ring);
        let ud = self.sqes.len() as u64;
        self.sqes.push(Sqe::disconnect(ud, vqp.handle));
        self
    }

    /// RECV into `local` at `local_off`, up to `len` bytes. Its completion needs the
    /// peer's SEND, in this batch or from another process.
    pub fn recv(
        &mut self,
        vqp: &Vqp,
        local: &'a Registered<'_>,
        local_off: u64,
        len: u32,
    ) -> Result<&mut Self, Error> {
        range("local range", local_off, len, local.len() as u64)?;
        self.note(vqp.ring);
        self.note(local.ring_id);
        let ud = self.sqes.len() as u64;
        self.sqes.push(Sqe::two_sided(
            Opcode::Recv,
            ud,
            vqp.handle,
            local.handle,
            local.addr() + local_off,
            len,
        ));
        Ok(self)
    }
}
