//! Fixed-capacity tables with generation-tagged handles.
//!
//! A handle is `generation << 24 | index`, generations run 1..=127, so a zeroed field is
//! never a valid handle, a handle is positive as an `i32` (CQE results carry handles),
//! and a handle kept after its object was removed fails to resolve (until 127 reuses of
//! the same slot).

use super::Store;

/// `i mod n` for `i < 2n`, by comparison: no division, so no divide-by-zero panic path
/// in the kernel build (and cheaper).
#[inline]
fn wrap(i: u32, n: u32) -> u32 {
    if i >= n {
        i - n
    } else {
        i
    }
}

/// Largest generation, so handles stay below 2^31.
const MAX_GEN: u8 = 127;

/// Largest table a handle can address.
pub const MAX_TABLE: usize = 1 << 24;

/// One slot of a [`Table`].
#[derive(Clone, Copy, Debug)]
pub struct Slot<T> {
    gen: u8,
    val: Option<T>,
}

impl<T> Slot<T> {
    /// An empty slot, for filling the storage a table is made from.
    pub const EMPTY: Slot<T> = Slot { gen: 0, val: None };
}

/// A table of at most `storage.len()` values.
pub struct Table<T, S: Store> {
    slots: S::Buf<Slot<T>>,
    len: u32,
    /// Where the next free-slot search starts.
    hint: u32,
}

impl<T, S: Store> Table<T, S> {
    /// A table over `storage` (its slots are reset to empty).
    pub fn new(mut storage: S::Buf<Slot<T>>) -> Self {
        let slots = storage.as_mut();
        assert!(
            slots.len() <= MAX_TABLE,
            "table too large for 24-bit handles"
        );
        for s in slots.iter_mut() {
            *s = Slot::EMPTY;
        }
        Table {
            slots: storage,
            len: 0,
            hint: 0,
        }
    }

    /// Values stored.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether no value is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Values it can hold.
    pub fn capacity(&self) -> usize {
        self.slots.as_ref().len()
    }

    /// Stores `v`, returning its handle, or gives `v` back when full.
    pub fn insert(&mut self, v: T) -> Result<u32, T> {
        let n = self.capacity() as u32;
        if self.len == n {
            return Err(v);
        }
        let slots = self.slots.as_mut();
        for k in 0..n {
            let i = wrap(self.hint + k, n);
            let s = &mut slots[i as usize];
            if s.val.is_none() {
                s.gen = if s.gen >= MAX_GEN { 1 } else { s.gen + 1 };
                s.val = Some(v);
                self.len += 1;
                self.hint = wrap(i + 1, n);
                return Ok(((s.gen as u32) << 24) | i);
            }
        }
        unreachable!("len < capacity but no free slot")
    }

    fn index(&self, handle: u32) -> Option<usize> {
        let i = (handle & 0x00ff_ffff) as usize;
        let s = self.slots.as_ref().get(i)?;
        (s.val.is_some() && s.gen as u32 == handle >> 24).then_some(i)
    }

    /// The value of `handle`.
    pub fn get(&self, handle: u32) -> Option<&T> {
        let i = self.index(handle)?;
        self.slots.as_ref()[i].val.as_ref()
    }

    /// The value of `handle`, mutable.
    pub fn get_mut(&mut self, handle: u32) -> Option<&mut T> {
        let i = self.index(handle)?;
        self.slots.as_mut()[i].val.as_mut()
    }

    /// Removes and returns the value of `handle`.
    pub fn remove(&mut self, handle: u32) -> Option<T> {
        let i = self.index(handle)?;
        self.len -= 1;
        self.slots.as_mut()[i].val.take()
    }

    /// Every (handle, value).
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots.as_ref().iter().enumerate().filter_map(|(i, s)| {
            s.val
                .as_ref()
                .map(|v| (((s.gen as u32) << 24) | i as u32, v))
        })
    }

    /// The handle of the value in slot `i`, if there is one.
    pub fn handle_at(&self, i: usize) -> Option<u32> {
        let s = self.slots.as_ref().get(i)?;
        s.val.as_ref().map(|_| ((s.gen as u32) << 24) | i as u32)
    }

    /// Every value, mutable.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots
            .as_mut()
            .iter_mut()
            .filter_map(|s| s.val.as_mut())
    }

    /// Removes every value for which `f` says so, calling `f` with each.
    pub fn drain_where(&mut self, mut f: impl FnMut(u32, &T) -> bool) {
        for (i, s) in self.slots.as_mut().iter_mut().enumerate() {
            let handle = ((s.gen as u32) << 24) | i as u32;
            if s.val.as_ref().is_some_and(|v| f(handle, v)) {
                s.val = None;
                self.len -= 1;
            }
        }
    }
}

/// A fixed-capacity FIFO over caller storage.
pub struct Fifo<T: Copy, S: Store> {
    buf: S::Buf<T>,
    head: u32,
    len: u32,
}

impl<T: Copy, S: Store> Fifo<T, S> {
    /// A FIFO over `storage`, empty.
    pub fn new(storage: S::Buf<T>) -> Self {
        Fifo {
            buf: storage,
            head: 0,
            len: 0,
        }
    }

    /// Entries queued.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries it can hold.
    pub fn capacity(&self) -> usize {
        self.buf.as_ref().len()
    }

    /// Appends `v`, or gives it back when full.
    pub fn push(&mut self, v: T) -> Result<(), T> {
        let cap = self.capacity() as u32;
        if self.len == cap {
            return Err(v);
        }
        let i = wrap(self.head + self.len, cap);
        self.buf.as_mut()[i as usize] = v;
        self.len += 1;
        Ok(())
    }

    /// The oldest entry.
    pub fn front(&self) -> Option<T> {
        (self.len > 0).then(|| self.buf.as_ref()[self.head as usize])
    }

    /// Removes the oldest entry.
    pub fn pop(&mut self) -> Option<T> {
        let v = self.front()?;
        self.head = wrap(self.head + 1, self.capacity() as u32);
        self.len -= 1;
        Some(v)
    }

    /// Drops the `n` newest entries.
    pub fn truncate_back(&mut self, n: usize) {
        self.len -= (n as u32).min(self.len);
    }

    /// Removes the oldest entry equal to `v`, keeping the others' order; `false` if none.
    pub fn remove(&mut self, v: T) -> bool
    where
        T: PartialEq,
    {
        self.remove_where(|x| x == v).is_some()
    }

    /// Removes and returns the oldest entry `pred` holds for, keeping the others' order.
    pub fn remove_where(&mut self, mut pred: impl FnMut(T) -> bool) -> Option<T> {
        let cap = self.capacity() as u32;
        let k =
            (0..self.len).find(|&k| pred(self.buf.as_ref()[wrap(self.head + k, cap) as usize]))?;
        // Shift the entries before it one place back, then drop the front.
        let buf = self.buf.as_mut();
        let found = buf[wrap(self.head + k, cap) as usize];
        let mut j = k;
        while j > 0 {
            buf[wrap(self.head + j, cap) as usize] = buf[wrap(self.head + j - 1, cap) as usize];
            j -= 1;
        }
        self.head = wrap(self.head + 1, cap);
        self.len -= 1;
        Some(found)
    }

    /// Whether `pred` holds for some queued entry.
    pub fn any(&self, mut pred: impl FnMut(T) -> bool) -> bool {
        let cap = self.capacity() as u32;
        (0..self.len).any(|k| pred(self.buf.as_ref()[wrap(self.head + k, cap) as usize]))
    }
}
