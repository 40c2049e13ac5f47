//! Closing a set's connections without leaving completions that name freed QPs.
//!
//! A set's QP holds work requests (its notice receives at least) whose completions land
//! in the device's shared CQ, each naming the QP; a QP destroyed before they are polled
//! leaves them naming freed memory, which the next poll reads. So a connection let go
//! of is *drained*: its QP is moved to the error state with a marker behind everything
//! on each queue (a send marker, and a receive marker when it has receives), and it is
//! closed only once both markers were polled, every earlier completion with them.
//!
//! [`Drains`] runs at most `N` drains at once (their markers are `wr_id`s the router
//! recognizes, [`Drains::marker_of`]) and keeps up to `W` connections waiting for a
//! free one, started in order as drains end. The backend's part is two calls: `begin`
//! (move the QP to the error state, post the markers) and `close`. While any drain runs
//! the CQ has completions coming ([`Drains::busy`]): the router must poll it whatever
//! else says it is idle.

use super::super::engine::{backend_index, backend_wr_id};

/// What the backend did with a connection it was asked to drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Begun {
    /// In the error state, the send marker posted, and the receive marker if `recv`.
    Draining {
        /// It had receives, and a receive marker follows them.
        recv: bool,
    },
    /// Torn down already (its device's removal quiesced the CQ first): close it now.
    TornDown,
}

#[derive(Clone, Copy, Debug)]
struct Draining<H> {
    conn: H,
    /// Its send marker came back.
    send: bool,
    /// Its receive marker came back (or it had none).
    recv: bool,
}

/// The first backend request number of the markers.
const MARKERS: u32 = 0x6000_0000;

/// The drains of one device: `N` at once, `W` connections waiting.
#[derive(Debug)]
pub struct Drains<H: Copy, const N: usize, const W: usize> {
    slots: [Option<Draining<H>>; N],
    /// Oldest first.
    waiting: [Option<H>; W],
}

impl<H: Copy, const N: usize, const W: usize> Default for Drains<H, N, W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H: Copy, const N: usize, const W: usize> Drains<H, N, W> {
    /// None running or waiting.
    pub const fn new() -> Self {
        Drains {
            slots: [None; N],
            waiting: [None; W],
        }
    }

    /// The `wr_id` of drain `k`'s send marker (`recv` false) or receive marker.
    pub const fn marker(k: usize, recv: bool) -> u64 {
        backend_wr_id(MARKERS + 2 * k as u32 + recv as u32)
    }

    /// Which drain and marker a `wr_id` is, if it is one.
    pub fn marker_of(wr_id: u64) -> Option<(usize, bool)> {
        let i = backend_index(wr_id, MARKERS, 2 * N as u32)?;
        Some(((i / 2) as usize, i & 1 == 1))
    }

    /// Lets go of `conn`, on which nothing posts any more: drained in a free slot
    /// (`begin(conn, send_marker, recv_marker)`), or waiting for one. `Err(conn)` when
    /// every drain runs and `W` wait already: the caller has more connections than it
    /// said it would.
    pub fn let_go(
        &mut self,
        conn: H,
        begin: &mut impl FnMut(H, u64, u64) -> Begun,
        close: &mut impl FnMut(H),
    ) -> Result<(), H> {
        // Those waiting go first, as they came.
        self.start_waiting(begin, close);
        if self.waiting[0].is_none() && self.start(conn, begin, close) {
            return Ok(());
        }
        match self.waiting.iter_mut().find(|w| w.is_none()) {
            Some(w) => {
                *w = Some(conn);
                Ok(())
            }
            None => Err(conn),
        }
    }

    /// Drain `k`'s marker came back: once both have, its connection is closed, and a
    /// waiting one takes the slot.
    pub fn seen(
        &mut self,
        k: usize,
        recv: bool,
        begin: &mut impl FnMut(H, u64, u64) -> Begun,
        close: &mut impl FnMut(H),
    ) {
        let Some(Some(d)) = self.slots.get_mut(k) else {
            return;
        };
        if recv {
            d.recv = true;
        } else {
            d.send = true;
        }
        if d.send && d.recv {
            let conn = d.conn;
            self.slots[k] = None;
            close(conn);
            self.start_waiting(begin, close);
        }
    }

    /// Whether completions are coming that the CQ must be polled for: a drain runs.
    pub fn busy(&self) -> bool {
        self.slots.iter().any(Option::is_some)
    }

    /// Connections running and waiting.
    pub fn len(&self) -> usize {
        self.slots.iter().flatten().count() + self.waiting.iter().flatten().count()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device is going, its connections torn down by it: hands every one to
    /// `put`, running or waiting, once.
    pub fn forget(&mut self, mut put: impl FnMut(H)) {
        for d in self.slots.iter_mut().filter_map(Option::take) {
            put(d.conn);
        }
        for w in self.waiting.iter_mut().filter_map(Option::take) {
            put(w);
        }
    }

    fn start(
        &mut self,
        conn: H,
        begin: &mut impl FnMut(H, u64, u64) -> Begun,
        close: &mut impl FnMut(H),
    ) -> bool {
        let Some(k) = self.slots.iter().position(Option::is_none) else {
            return false;
        };
        match begin(conn, Self::marker(k, false), Self::marker(k, true)) {
            Begun::TornDown => close(conn),
            Begun::Draining { recv } => {
                self.slots[k] = Some(Draining {
                    conn,
                    send: false,
                    recv: !recv,
                })
            }
        }
        true
    }

    fn start_waiting(
        &mut self,
        begin: &mut impl FnMut(H, u64, u64) -> Begun,
        close: &mut impl FnMut(H),
    ) {
        while let Some(conn) = self.waiting[0] {
            if !self.start(conn, begin, close) {
                return;
            }
            self.waiting.rotate_left(1);
            self.waiting[W - 1] = None;
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    /// A backend that records what it was asked, each connection's markers by value.
    #[derive(Default)]
    struct Nic {
        begun: Vec<(u32, u64, u64)>,
        closed: Vec<u32>,
        /// Connections with no receives (their drains have a send marker only).
        no_recvs: Vec<u32>,
        torn: Vec<u32>,
    }

    impl Nic {
        fn run(
            &mut self,
            d: &mut Drains<u32, 2, 2>,
            f: impl FnOnce(
                &mut Drains<u32, 2, 2>,
                &mut dyn FnMut(u32, u64, u64) -> Begun,
                &mut dyn FnMut(u32),
            ),
        ) {
            let Nic {
                begun,
                closed,
                no_recvs,
                torn,
            } = self;
            let mut begin = |c: u32, s: u64, r: u64| {
                if torn.contains(&c) {
                    return Begun::TornDown;
                }
                begun.push((c, s, r));
                Begun::Draining {
                    recv: !no_recvs.contains(&c),
                }
            };
            let mut close = |c: u32| closed.push(c);
            f(d, &mut begin, &mut close);
        }

        fn markers(&self, c: u32) -> (u64, u64) {
            let &(_, s, r) = self.begun.iter().find(|b| b.0 == c).unwrap();
            (s, r)
        }
    }

    fn let_go(nic: &mut Nic, d: &mut Drains<u32, 2, 2>, c: u32) -> Result<(), u32> {
        let mut out = Ok(());
        nic.run(d, |d, b, cl| {
            out = d.let_go(c, &mut |x, s, r| b(x, s, r), &mut |x| cl(x))
        });
        out
    }

    fn seen(nic: &mut Nic, d: &mut Drains<u32, 2, 2>, wr_id: u64) {
        let (k, recv) = Drains::<u32, 2, 2>::marker_of(wr_id).expect("a marker");
        nic.run(d, |d, b, cl| {
            d.seen(k, recv, &mut |x, s, r| b(x, s, r), &mut |x| cl(x))
        });
    }

    #[test]
    fn closed_only_once_both_markers_came_back() {
        let (mut nic, mut d) = (Nic::default(), Drains::new());
        let_go(&mut nic, &mut d, 7).unwrap();
        assert!(d.busy(), "flushes are coming: the CQ must be polled");
        let (s, r) = nic.markers(7);
        seen(&mut nic, &mut d, s);
        assert!(nic.closed.is_empty(), "the receive marker is still out");
        seen(&mut nic, &mut d, s);
        assert!(nic.closed.is_empty(), "a marker seen twice counts once");
        seen(&mut nic, &mut d, r);
        assert_eq!(nic.closed, [7]);
        assert!(!d.busy() && d.is_empty());
    }

    #[test]
    fn a_connection_without_receives_needs_its_send_marker_only() {
        let mut nic = Nic {
            no_recvs: std::vec![3],
            ..Nic::default()
        };
        let mut d = Drains::new();
        let_go(&mut nic, &mut d, 3).unwrap();
        let s = nic.markers(3).0;
        seen(&mut nic, &mut d, s);
        assert_eq!(nic.closed, [3]);
    }

    #[test]
    fn a_torn_down_connection_closes_at_once() {
        let mut nic = Nic {
            torn: std::vec![5],
            ..Nic::default()
        };
        let mut d = Drains::new();
        let_go(&mut nic, &mut d, 5).unwrap();
        assert_eq!(nic.closed, [5]);
        assert!(!d.busy());
    }

    #[test]
    fn waiting_ones_start_in_order_as_drains_end() {
        let (mut nic, mut d) = (Nic::default(), Drains::new());
        for c in 1..=4 {
            let_go(&mut nic, &mut d, c).unwrap();
        }
        assert_eq!(
            let_go(&mut nic, &mut d, 5),
            Err(5),
            "2 running, 2 waiting: full"
        );
        assert_eq!(nic.begun.len(), 2);
        assert_eq!(d.len(), 4);
        let (s, r) = nic.markers(2);
        seen(&mut nic, &mut d, s);
        seen(&mut nic, &mut d, r);
        assert_eq!(nic.closed, [2]);
        let order: Vec<u32> = nic.begun.iter().map(|b| b.0).collect();
        assert_eq!(order, [1, 2, 3], "the oldest waiting took the freed drain");
        // The freed slot's markers, both of 2's polled already: they come back for 3.
        assert_eq!(nic.markers(3), (s, r));
        // A newcomer queues behind 4, which waits still.
        let_go(&mut nic, &mut d, 6).unwrap();
        assert_eq!(nic.begun.len(), 3);
        let mut put = Vec::new();
        d.forget(|c| put.push(c));
        put.sort();
        assert_eq!(put, [1, 3, 4, 6], "every handle once, running or waiting");
        assert!(d.is_empty() && !d.busy());
    }

    #[test]
    fn other_wr_ids_are_no_markers() {
        type D = Drains<u32, 2, 2>;
        assert_eq!(D::marker_of(D::marker(1, true)), Some((1, true)));
        assert_eq!(D::marker_of(D::marker(2, false)), None, "past N");
        assert_eq!(D::marker_of(0), None);
        assert_eq!(D::marker_of(backend_wr_id(MARKERS - 1)), None);
    }
}
