//! Counters krcore keeps, and their text form: `name value` lines, one counter each, as
//! the module shows them (debugfs `krcore/counters` per device, each ring's fdinfo) and
//! the `krcore` tool reads them back. Both sides use this one writer and reader.

use core::fmt::{self, Write};

use super::cqe::Reason;

/// A device's (or one ring's) counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    /// Rings set up.
    pub rings: u64,
    /// SQEs taken.
    pub taken: u64,
    /// CQEs produced.
    pub completed: u64,
    /// CQEs that waited in a kernel overflow list because their CQ was full.
    pub cq_overflows: u64,
    /// Completions that named no request in flight (stale or stray).
    pub stray: u64,
    /// CONNECTs that bound a virtual QP.
    pub connects: u64,
    /// Groups of physical QPs recovered after a failure (reset and reconnected).
    pub recoveries: u64,
    /// Peer kernels' proofs refused (no such challenge, or a wrong tag: not a member).
    pub auth_refused: u64,
    /// Peer kernels' good proofs refused as replays (their challenge redeemed before).
    pub auth_replayed: u64,
    /// Peer kernels' dials admitted at their first request (a FRESH proof in time).
    pub auth_fresh: u64,
    /// Peer kernels' FRESH proofs, their tags good, answered by a challenge instead:
    /// out of time (the nodes' clocks apart), older than the device here, or replayed.
    pub auth_stale: u64,
    /// Peer kernels' notices dropped: shorter than a notice, or malformed.
    pub bad_notices: u64,
    /// Requests failed or refused, by [`Reason`] code (`failed[0]` stays 0). `deadline`
    /// counts requests that hit the request deadline, `no_receiver` SENDs no receive
    /// took in time (what RNR retries would have been).
    pub failed: [u64; Reason::COUNT],
}

impl Default for Counters {
    fn default() -> Self {
        Counters::ZERO
    }
}

/// Names of the scalar counters, in the order they are written.
const SCALARS: [&str; 12] = [
    "rings",
    "taken",
    "completed",
    "cq_overflows",
    "stray",
    "connects",
    "recoveries",
    "auth_refused",
    "auth_replayed",
    "auth_fresh",
    "auth_stale",
    "bad_notices",
];

impl Counters {
    /// All zero.
    pub const ZERO: Counters = Counters {
        rings: 0,
        taken: 0,
        completed: 0,
        cq_overflows: 0,
        stray: 0,
        connects: 0,
        recoveries: 0,
        auth_refused: 0,
        auth_replayed: 0,
        auth_fresh: 0,
        auth_stale: 0,
        bad_notices: 0,
        failed: [0; Reason::COUNT],
    };

    fn scalars(&mut self) -> [&mut u64; 12] {
        [
            &mut self.rings,
            &mut self.taken,
            &mut self.completed,
            &mut self.cq_overflows,
            &mut self.stray,
            &mut self.connects,
            &mut self.recoveries,
            &mut self.auth_refused,
            &mut self.auth_replayed,
            &mut self.auth_fresh,
            &mut self.auth_stale,
            &mut self.bad_notices,
        ]
    }

    /// Adds `o` in.
    pub fn add(&mut self, o: &Counters) {
        let mut o = *o;
        for (a, b) in self.scalars().into_iter().zip(o.scalars()) {
            *a = a.wrapping_add(*b);
        }
        for (a, b) in self.failed.iter_mut().zip(o.failed) {
            *a = a.wrapping_add(b);
        }
    }

    /// Requests failed for any reason.
    pub fn failed_total(&self) -> u64 {
        self.failed.iter().sum()
    }

    /// Writes every counter as a `{prefix}name value` line: the scalars, then
    /// `{prefix}failed.{reason} value` for every reason (zeros included, so the set of
    /// lines never changes).
    pub fn write(&self, prefix: &str, w: &mut impl Write) -> fmt::Result {
        let mut me = *self;
        for (name, v) in SCALARS.iter().zip(me.scalars()) {
            writeln!(w, "{prefix}{name} {v}")?;
        }
        for r in &Reason::ALL[1..] {
            writeln!(
                w,
                "{prefix}failed.{} {}",
                r.name(),
                self.failed[*r as usize]
            )?;
        }
        Ok(())
    }

    /// Adds in what `text` says (lines `write` wrote with `prefix`; other lines, and
    /// counters this version does not know, are skipped). Returns the lines taken.
    pub fn read(&mut self, prefix: &str, text: &str) -> usize {
        let mut taken = 0;
        for line in text.lines() {
            let Some((name, v)) = line
                .strip_prefix(prefix)
                .and_then(|l| l.split_once(' '))
                .and_then(|(n, v)| Some((n, v.trim().parse::<u64>().ok()?)))
            else {
                continue;
            };
            let slot = match name.strip_prefix("failed.") {
                Some(r) => Reason::ALL
                    .iter()
                    .find(|x| x.name() == r)
                    .map(|x| &mut self.failed[*x as usize]),
                None => SCALARS
                    .iter()
                    .position(|s| *s == name)
                    .map(|i| self.scalars().into_iter().nth(i).expect("in range")),
            };
            if let Some(slot) = slot {
                *slot = slot.wrapping_add(v);
                taken += 1;
            }
        }
        taken
    }
}

/// A [`Write`] into a fixed buffer that keeps what fits and then refuses, so the
/// kernel can format into a page with no allocation.
pub struct Buf<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Buf<'a> {
    /// Writes into `buf`.
    pub fn new(buf: &'a mut [u8]) -> Buf<'a> {
        Buf { buf, len: 0 }
    }

    /// Bytes written.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Write for Buf<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len() - self.len;
        if s.len() > room {
            self.buf[self.len..].copy_from_slice(&s.as_bytes()[..room]);
            self.len = self.buf.len();
            return Err(fmt::Error);
        }
        self.buf[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Counters {
        let mut c = Counters {
            rings: 3,
            taken: 1000,
            completed: 998,
            cq_overflows: 4,
            stray: 1,
            connects: 12,
            recoveries: 2,
            auth_refused: 6,
            auth_replayed: 1,
            auth_fresh: 9,
            auth_stale: 2,
            bad_notices: 3,
            ..Counters::ZERO
        };
        c.failed[Reason::RemoteRange as usize] = 5;
        c.failed[Reason::Deadline as usize] = 7;
        c
    }

    #[test]
    fn text_round_trips_and_sums() {
        let mut page = [0u8; 4096];
        let mut w = Buf::new(&mut page);
        sample().write("krcore-", &mut w).unwrap();
        let n = w.len();
        let text = core::str::from_utf8(&page[..n]).unwrap();
        assert!(text.starts_with("krcore-rings 3\nkrcore-taken 1000\n"));
        assert!(text.contains("krcore-failed.remote_range 5\n"));
        assert!(
            text.contains("krcore-failed.service_taken 0\n"),
            "zeros are written"
        );
        assert!(!text.contains("failed.none"));
        let mut back = Counters::ZERO;
        assert_eq!(back.read("krcore-", text), 12 + Reason::COUNT - 1);
        assert_eq!(back, sample());
        // Read twice: the counts add up (two devices' files).
        back.read("krcore-", text);
        let mut twice = sample();
        twice.add(&sample());
        assert_eq!(back, twice);
        assert_eq!(sample().failed_total(), 12);
    }

    #[test]
    fn reading_skips_what_it_does_not_know() {
        let mut c = Counters::ZERO;
        let text = "dev rxe0\nconnects 4\nfailed.no_such_reason 9\nnew_counter 1\nrings x\n";
        assert_eq!(c.read("", text), 1);
        assert_eq!(c.connects, 4);
        assert_eq!(c.failed_total(), 0);
    }

    #[test]
    fn a_full_buffer_keeps_what_fit() {
        let mut small = [0u8; 10];
        let mut w = Buf::new(&mut small);
        assert!(sample().write("", &mut w).is_err());
        assert_eq!(w.len(), 10);
        assert_eq!(&small, b"rings 3\nta");
    }
}
