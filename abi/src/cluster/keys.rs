//! The keys of receives advertised to peer kernels: which is free, which a receive
//! holds, and when one let go may be made again.
//!
//! A receive advertised to a peer gets a key of the device's set, registered over the
//! receive's bytes and closed by the peer's `Data` (SEND with invalidate). A key let go
//! before that (the receive cancelled, the peer leaving it open) is destroyed, which
//! closes it, and made again before its pages may go.
//!
//! The registration runs on the device's own QP, which carries nothing else, and has
//! completed before the advert is posted (kmod/engine/fastreg.c). Not on the set QP the
//! advert goes on: soft-RoCE re-executes a completed local request that sits behind an
//! unacknowledged one when it retransmits, and a registration run again fails on a key
//! that is open (the QP goes to error) or opens again one the peer closed. So a held key
//! is never still being registered, and one let go is freed at once. A registration
//! whose completion does not come within its bound is ended by resetting that QP, and
//! its key made again; only when neither can be done may it still run, and its key is
//! [lost](Keys::lose), never taken again.
//!
//! The backend does what each step asks ([`Let`], through the `free` callback): the
//! hardware part (registering, destroying, making again, unpinning) is
//! kmod/engine/fastreg.c's; every choice is here. Bounded: the caller's storage, one
//! [`Slot`] per key, fixed at creation.

use super::super::engine::Store;

/// A key's index in the set.
pub type Index = u16;

/// One key's state, as the caller stores it (a set of `n` keys is `n` of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(State);

impl Default for Slot {
    fn default() -> Self {
        Slot(State::Free { next: None })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// On the free list, made (closed at the NIC), mapping nothing.
    Free { next: Option<Index> },
    /// Registered for a receive.
    Held { rkey: u32 },
    /// Could not be made again, or its registration may still run: the set has one
    /// key fewer.
    Lost,
}

/// What the backend must do with a key let go (the `free` callbacks, which answer
/// whether the key could be made again; a key that could not is lost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Let {
    /// The key.
    pub index: Index,
    /// Destroy it and make it again (it may be open at the NIC); when false the NIC
    /// closed it, and only its pages are let go.
    pub remake: bool,
}

/// Why no key was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoKey {
    /// All are held or lost: the advert waits.
    Busy,
    /// The device is going.
    Dead,
}

/// A device's set of advert keys, one per slot of its storage (at most 65,536 used).
pub struct Keys<S: Store> {
    key: S::Buf<Slot>,
    free: Option<Index>,
    dead: bool,
}

impl<S: Store> Keys<S> {
    /// A key per slot of `slots`, all free, key 0 first.
    pub fn new(mut slots: S::Buf<Slot>) -> Self {
        let all = slots.as_mut();
        let n = all.len().min(Index::MAX as usize + 1);
        for (i, k) in all.iter_mut().enumerate() {
            let next = i + 1;
            *k = Slot(State::Free {
                next: (next < n).then_some(next as Index),
            });
        }
        Keys {
            free: (n > 0).then_some(0),
            key: slots,
            dead: false,
        }
    }

    fn at(&mut self, i: usize) -> Option<&mut State> {
        self.key.as_mut().get_mut(i).map(|s| &mut s.0)
    }

    /// The key the next advert takes: register it, then [`hold`](Keys::hold) it once
    /// its registration completed, or [`lose`](Keys::lose) it (a registration that
    /// failed at once takes nothing).
    pub fn next(&self) -> Result<Index, NoKey> {
        match (self.dead, self.free) {
            (true, _) => Err(NoKey::Dead),
            (false, None) => Err(NoKey::Busy),
            (false, Some(i)) => Ok(i),
        }
    }

    /// Takes key `i` (what [`next`](Keys::next) gave) off the free list as `to`.
    fn take(&mut self, i: Index, to: State) {
        debug_assert_eq!(self.free, Some(i), "the free list's head");
        if let Some(k) = self.at(i as usize) {
            if let State::Free { next } = *k {
                *k = to;
                self.free = next;
            }
        }
    }

    /// Key `i` (what [`next`](Keys::next) gave) was registered as `rkey`.
    pub fn hold(&mut self, i: Index, rkey: u32) {
        self.take(i, State::Held { rkey });
    }

    /// Key `i` (what [`next`](Keys::next) gave) is out of use for good: its
    /// registration's completion did not come, so it may still run.
    pub fn lose(&mut self, i: Index) {
        self.take(i, State::Lost);
    }

    /// The receive holding `rkey` let it go (`closed`: the NIC closed it, the peer's
    /// `Data` invalidated it): freed through `free`. Nothing when no held key has that
    /// rkey.
    pub fn release(&mut self, rkey: u32, closed: bool, free: impl FnOnce(Let) -> bool) {
        if self.dead {
            return;
        }
        let Some(i) = self
            .key
            .as_ref()
            .iter()
            .position(|k| matches!(k.0, State::Held { rkey: r } if r == rkey))
        else {
            return;
        };
        self.free_with(
            Let {
                index: i as Index,
                remake: !closed,
            },
            free,
        );
    }

    /// Has the backend free key `l.index` as `l` says: free again, or lost when it
    /// could not be made again.
    fn free_with(&mut self, l: Let, free: impl FnOnce(Let) -> bool) {
        let head = self.free;
        let ok = free(l);
        if let Some(k) = self.at(l.index as usize) {
            *k = if ok {
                State::Free { next: head }
            } else {
                State::Lost
            };
        }
        if ok {
            self.free = Some(l.index);
        }
    }

    /// The device goes: no key is taken or let go from now on (the backend destroys
    /// them all). Whether it was alive.
    pub fn kill(&mut self) -> bool {
        !core::mem::replace(&mut self.dead, true)
    }

    /// Keys free now.
    pub fn free_count(&self) -> usize {
        self.key
            .as_ref()
            .iter()
            .filter(|k| matches!(k.0, State::Free { .. }))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::VecStore;
    use alloc::vec::Vec;

    type K = Keys<VecStore>;

    fn four() -> K {
        K::new(alloc::vec![Slot::default(); 4])
    }

    fn take(k: &mut K, rkey: u32) -> Index {
        let i = k.next().unwrap();
        k.hold(i, rkey);
        i
    }

    /// What the backend was asked to free.
    fn asked(f: impl FnOnce(&mut dyn FnMut(Let) -> bool)) -> Vec<Let> {
        let mut v = Vec::new();
        f(&mut |l| {
            v.push(l);
            true
        });
        v
    }

    #[test]
    fn keys_are_taken_until_none_is_free() {
        let mut k = four();
        let got: [Index; 4] = core::array::from_fn(|n| take(&mut k, 100 + n as u32));
        assert_eq!(got, [0, 1, 2, 3]);
        assert_eq!(k.next(), Err(NoKey::Busy));
        // A closed key only lets its pages go.
        assert_eq!(
            asked(|f| k.release(102, true, f)),
            [Let {
                index: 2,
                remake: false
            }]
        );
        assert_eq!(k.next(), Ok(2));
    }

    /// A key let go before the NIC closed it is made again, at once (its registration
    /// completed before it was held), and only once.
    #[test]
    fn a_key_let_go_open_is_made_again_once() {
        let mut k = four();
        let i = take(&mut k, 7);
        assert_eq!(
            asked(|f| k.release(7, false, f)),
            [Let {
                index: i,
                remake: true
            }]
        );
        assert!(asked(|f| k.release(7, false, f)).is_empty(), "let go once");
        assert_eq!(k.free_count(), 4);
        assert_eq!(k.next(), Ok(i), "the freed key is taken first");
    }

    /// A key whose registration may still run is never taken again, and the rest go on.
    #[test]
    fn a_lost_key_is_never_taken_again() {
        let mut k = four();
        let i = k.next().unwrap();
        k.lose(i);
        assert_eq!(k.free_count(), 3);
        let rest: [Index; 3] = core::array::from_fn(|n| take(&mut k, n as u32));
        assert!(!rest.contains(&i));
        assert_eq!(k.next(), Err(NoKey::Busy));
    }

    #[test]
    fn a_key_that_cannot_be_made_again_is_lost() {
        let mut k = four();
        take(&mut k, 4);
        k.release(4, false, |_| false);
        assert_eq!(k.free_count(), 3);
        assert!(asked(|f| k.release(4, false, f)).is_empty());
        assert_eq!(k.free_count(), 3);
    }

    #[test]
    fn a_dead_set_takes_and_frees_nothing() {
        let mut k = four();
        take(&mut k, 9);
        assert!(k.kill());
        assert!(!k.kill());
        assert_eq!(k.next(), Err(NoKey::Dead));
        assert!(asked(|f| k.release(9, true, f)).is_empty());
    }

    #[test]
    fn unknown_rkeys_change_nothing() {
        let mut k = four();
        take(&mut k, 5);
        assert!(asked(|f| k.release(6, false, f)).is_empty());
        assert_eq!(k.free_count(), 3);
    }
}
