//! The keys of receives advertised to peer kernels: which is free, which a receive
//! holds, and when one let go may be made again.
//!
//! A receive advertised to a peer gets a key of the device's set, registered over the
//! receive's bytes (a fast registration posted on a set QP just before the advert that
//! carries it) and closed by the peer's `Data` (SEND with invalidate). A key let go
//! before that (the receive cancelled, the peer leaving it open) is destroyed, which
//! closes it, and made again before its pages may go. But not while its registration
//! could still run: a peer that stalls our send queue keeps the registration queued, and
//! a registration that runs after the key was destroyed or reused maps a freed or
//! another receive's pages. So a key let go early *waits* until the advert posted after
//! its registration completes (success or flush: the registration ran, or never will),
//! or until the QP it was posted on is drained ([`Keys::gone`]).
//!
//! The backend does what each step asks ([`Let`], through the `free` callback): the
//! hardware part (registering, destroying, making again, unpinning) is
//! kmod/engine/fastreg.c's; every choice is here. Bounded: the caller's storage, one [`Slot`] per key, fixed at creation.

use super::super::engine::Store;

/// A key's index in the set.
pub type Index = u16;

/// One key's state, as the caller stores it (a set of `n` keys is `n` of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot<Q>(State<Q>);

impl<Q> Default for Slot<Q> {
    fn default() -> Self {
        Slot(State::Free { next: None })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State<Q> {
    /// On the free list, made (closed at the NIC), mapping nothing.
    Free { next: Option<Index> },
    /// Registered for a receive, on QP `qp`; `settled` once that registration is known
    /// to have run or never to run.
    Held { rkey: u32, qp: Q, settled: bool },
    /// Let go before its registration settled: it waits for that.
    Waiting { qp: Q },
    /// Could not be made again: the set has one key fewer.
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
    /// All are held or waiting: the advert waits.
    Busy,
    /// The device is going.
    Dead,
}

/// A device's set of advert keys, one per slot of its storage (at most 65,536 used);
/// `Q` names a set QP (compared, never used).
pub struct Keys<Q: Copy + PartialEq, S: Store> {
    key: S::Buf<Slot<Q>>,
    free: Option<Index>,
    dead: bool,
}

impl<Q: Copy + PartialEq, S: Store> Keys<Q, S> {
    /// A key per slot of `slots`, all free, key 0 first.
    pub fn new(mut slots: S::Buf<Slot<Q>>) -> Self {
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

    fn at(&mut self, i: usize) -> Option<&mut State<Q>> {
        self.key.as_mut().get_mut(i).map(|s| &mut s.0)
    }

    /// The key the next advert takes: register it, then [`hold`](Keys::hold) it once
    /// its registration is posted (a failed post takes nothing).
    pub fn next(&self) -> Result<Index, NoKey> {
        match (self.dead, self.free) {
            (true, _) => Err(NoKey::Dead),
            (false, None) => Err(NoKey::Busy),
            (false, Some(i)) => Ok(i),
        }
    }

    /// Key `i` (what [`next`](Keys::next) gave) was registered as `rkey` on QP `qp`.
    pub fn hold(&mut self, i: Index, rkey: u32, qp: Q) {
        debug_assert_eq!(self.free, Some(i), "the free list's head");
        if let Some(k) = self.at(i as usize) {
            if let State::Free { next } = *k {
                *k = State::Held {
                    rkey,
                    qp,
                    settled: false,
                };
                self.free = next;
            }
        }
    }

    /// The receive holding `rkey` let it go (`closed`: the NIC closed it, the peer's
    /// `Data` invalidated it): freed through `free` now, or left waiting for its
    /// registration to settle. Nothing when no held key has that rkey.
    pub fn release(&mut self, rkey: u32, closed: bool, free: impl FnOnce(Let) -> bool) {
        if let Some(l) = self.release_now(rkey, closed) {
            self.free_with(l, free);
        }
    }

    fn release_now(&mut self, rkey: u32, closed: bool) -> Option<Let> {
        if self.dead {
            return None;
        }
        let i = self
            .key
            .as_ref()
            .iter()
            .position(|k| matches!(k.0, State::Held { rkey: r, .. } if r == rkey))?;
        let k = self.at(i)?;
        let State::Held { qp, settled, .. } = *k else {
            return None;
        };
        if !settled {
            *k = State::Waiting { qp };
            return None;
        }
        Some(Let {
            index: i as Index,
            remake: !closed,
        })
    }

    /// The advert of key `i` completed or was flushed: its registration ran or never
    /// will. A key let go meanwhile is freed through `free`.
    pub fn advert_done(&mut self, i: u32, free: impl FnOnce(Let) -> bool) {
        if self.dead {
            return;
        }
        let Some(k) = self.at(i as usize) else { return };
        match *k {
            State::Held { rkey, qp, .. } => {
                *k = State::Held {
                    rkey,
                    qp,
                    settled: true,
                };
            }
            State::Waiting { .. } => self.free_with(
                Let {
                    index: i as Index,
                    remake: true,
                },
                free,
            ),
            State::Free { .. } | State::Lost => {}
        }
    }

    /// QP `qp` was drained (or torn down): no registration posted on it can run any
    /// more. Its held keys are settled; those let go are freed through `free`.
    pub fn gone(&mut self, qp: Q, mut free: impl FnMut(Let) -> bool) {
        if self.dead {
            return;
        }
        for i in 0..self.key.as_ref().len() {
            let Some(k) = self.at(i) else { break };
            match *k {
                State::Held { rkey, qp: q, .. } if q == qp => {
                    *k = State::Held {
                        rkey,
                        qp,
                        settled: true,
                    };
                }
                State::Waiting { qp: q } if q == qp => self.free_with(
                    Let {
                        index: i as Index,
                        remake: true,
                    },
                    &mut free,
                ),
                _ => {}
            }
        }
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

    type K = Keys<u8, VecStore>;

    fn four() -> K {
        K::new(alloc::vec![Slot::default(); 4])
    }

    fn take(k: &mut K, rkey: u32, qp: u8) -> Index {
        let i = k.next().unwrap();
        k.hold(i, rkey, qp);
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
        let got: [Index; 4] = core::array::from_fn(|n| take(&mut k, 100 + n as u32, 1));
        assert_eq!(got, [0, 1, 2, 3]);
        assert_eq!(k.next(), Err(NoKey::Busy));
        // A closed key only lets its pages go, once its advert completed.
        assert!(asked(|f| k.advert_done(2, f)).is_empty());
        assert_eq!(asked(|f| k.release(102, true, f)), [Let { index: 2, remake: false }]);
        assert_eq!(k.next(), Ok(2));
    }

    /// A key let go before its advert completed waits, whatever closed it, and is
    /// made again only once the advert completes: a registration that ran late on a
    /// freed or reused key would map pages that are not the receive's.
    #[test]
    fn a_key_let_go_before_its_advert_completed_waits() {
        let mut k = four();
        let i = take(&mut k, 7, 1);
        assert!(asked(|f| k.release(7, true, f)).is_empty(), "its registration may still run");
        assert!(asked(|f| k.release(7, false, f)).is_empty(), "let go once");
        assert_eq!(k.free_count(), 3);
        assert_eq!(asked(|f| k.advert_done(i as u32, f)), [Let { index: i, remake: true }]);
        assert!(asked(|f| k.advert_done(i as u32, f)).is_empty(), "once");
        assert_eq!(k.free_count(), 4);
    }

    #[test]
    fn a_drained_qp_settles_its_keys_and_frees_the_waiting_ones() {
        let mut k = four();
        let (a, b, c) = (take(&mut k, 1, 1), take(&mut k, 2, 1), take(&mut k, 3, 2));
        assert!(asked(|f| k.release(1, false, f)).is_empty());
        assert_eq!(asked(|f| k.gone(1, f)), [Let { index: a, remake: true }]);
        // b was settled by the drain: let go now, it is freed at once.
        assert_eq!(asked(|f| k.release(2, false, f)), [Let { index: b, remake: true }]);
        // c's QP was not drained: it still waits.
        assert!(asked(|f| k.release(3, false, f)).is_empty());
        assert!(asked(|f| k.gone(1, f)).is_empty(), "nothing more on QP 1");
        assert_eq!(asked(|f| k.gone(2, f)), [Let { index: c, remake: true }]);
    }

    #[test]
    fn a_key_that_cannot_be_made_again_is_lost() {
        let mut k = four();
        let i = take(&mut k, 4, 1);
        k.advert_done(i as u32, |_| unreachable!("held, not let go"));
        k.release(4, false, |_| false);
        assert_eq!(k.free_count(), 3);
        assert!(asked(|f| k.gone(1, f)).is_empty());
        assert_eq!(k.free_count(), 3);
    }

    #[test]
    fn a_dead_set_takes_and_frees_nothing() {
        let mut k = four();
        take(&mut k, 9, 1);
        assert!(k.kill());
        assert!(!k.kill());
        assert_eq!(k.next(), Err(NoKey::Dead));
        assert!(asked(|f| k.release(9, true, f)).is_empty());
        assert!(asked(|f| k.advert_done(0, f)).is_empty());
        assert!(asked(|f| k.gone(1, f)).is_empty());
    }

    #[test]
    fn unknown_rkeys_and_indices_change_nothing() {
        let mut k = four();
        take(&mut k, 5, 1);
        assert!(asked(|f| k.release(6, false, f)).is_empty());
        assert!(asked(|f| k.advert_done(99, f)).is_empty());
        assert!(asked(|f| k.advert_done(3, f)).is_empty(), "a free key");
        assert_eq!(k.free_count(), 3);
        assert!(asked(|f| k.release(5, true, f)).is_empty(), "not settled yet");
    }
}
