//! Errors: every failure carries the errno and what krcore was doing.

use std::fmt;
use std::io;

/// A krcore error: the operation, and the OS error (errno) it failed with.
#[derive(Debug)]
pub struct Error {
    op: &'static str,
    source: io::Error,
    reason: Option<krcore_abi::cqe::Reason>,
}

impl Error {
    /// Wraps the OS error of the last failed call of `op`.
    pub(crate) fn last_os(op: &'static str) -> Error {
        Error {
            op,
            source: io::Error::last_os_error(),
            reason: None,
        }
    }

    /// An I/O error of `op` outside any ioctl.
    #[cfg(feature = "tokio")]
    pub(crate) fn io(op: &'static str, source: io::Error) -> Error {
        Error {
            op,
            source,
            reason: None,
        }
    }

    /// An error of `op` with the given errno.
    pub(crate) fn errno(op: &'static str, errno: krcore_abi::errno::Errno) -> Error {
        Error {
            op,
            source: io::Error::from_raw_os_error(errno.0),
            reason: None,
        }
    }

    /// The same OS error under a more specific operation name.
    pub(crate) fn context(self, op: &'static str) -> Error {
        Error {
            op,
            source: self.source,
            reason: self.reason,
        }
    }

    /// The failure a completion reported: its errno and its reason.
    pub(crate) fn failed(op: &'static str, cqe: &krcore_abi::cqe::Cqe) -> Error {
        Error {
            op,
            source: io::Error::from_raw_os_error(-cqe.res),
            reason: cqe.failure(),
        }
    }

    /// `op` refused before it reached the kernel, for the reason the kernel would give.
    pub(crate) fn refused(op: &'static str, reason: krcore_abi::cqe::Reason) -> Error {
        Error {
            op,
            source: io::Error::from_raw_os_error(reason.errno().0),
            reason: Some(reason),
        }
    }

    /// Why the kernel rejected or failed the operation, when a completion said so.
    pub fn reason(&self) -> Option<krcore_abi::cqe::Reason> {
        self.reason
    }

    /// The errno, where the failure had one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// What krcore was doing when it failed.
    pub fn op(&self) -> &'static str {
        self.op
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.source)?;
        if let Some(r) = self.reason {
            write!(f, " ({})", r.describe())?;
        }
        if self.source.raw_os_error() == Some(krcore_abi::errno::Errno::ENOENT.0)
            && self.op == "open /dev/krcore"
        {
            write!(f, " (is the krcore module loaded?)")?;
        }
        Ok(())
    }
}

/// Its message holds the OS error already, so it names no `source`: a report that
/// walks the chain (anyhow's, say) prints each part once. The errno stays at hand in
/// [`raw_os_error`](Error::raw_os_error) and [`kind`](Error::kind).
impl std::error::Error for Error {}

impl Error {
    /// The [`io::ErrorKind`] of the failure: the errno's, except that a bounded wait
    /// that ran out (`ETIME`) is [`TimedOut`](io::ErrorKind::TimedOut), as a socket's
    /// timeout is.
    pub fn kind(&self) -> io::ErrorKind {
        match self.source.raw_os_error() {
            Some(e) if e == krcore_abi::errno::Errno::ETIME.0 => io::ErrorKind::TimedOut,
            _ => self.source.kind(),
        }
    }
}

/// For callers in `io::Result` code: the error keeps its [kind](Error::kind), and the
/// krcore [`Error`] (operation, errno, reason) stays reachable through
/// [`io::Error::get_ref`] and `downcast_ref::<Error>()`.
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use krcore_abi::cqe::Reason;

    /// A report that walks the chain says the OS error once (before, the message and
    /// the source both did).
    #[test]
    fn a_chain_says_each_part_once() {
        let e = Error::errno("connect", krcore_abi::errno::Errno::EHOSTUNREACH);
        let mut report = String::new();
        let mut cur: Option<&dyn std::error::Error> = Some(&e);
        while let Some(c) = cur {
            report += &format!("{c}\n");
            cur = c.source();
        }
        let os = io::Error::from_raw_os_error(krcore_abi::errno::Errno::EHOSTUNREACH.0).to_string();
        assert_eq!(report.matches(&os).count(), 1, "{report}");
    }

    #[test]
    fn a_wait_that_ran_out_is_timed_out() {
        let e = Error::errno("wait for completions", krcore_abi::errno::Errno::ETIME);
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let io: io::Error = e.into();
        assert_eq!(io.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn an_io_error_keeps_the_kind_and_the_krcore_error() {
        let e = Error::refused("export name", Reason::BadName);
        let shown = e.to_string();
        let io: io::Error = e.into();
        assert_eq!(io.kind(), io::ErrorKind::InvalidInput, "BadName is EINVAL");
        assert_eq!(io.to_string(), shown);
        let inner = io
            .get_ref()
            .and_then(|i| i.downcast_ref::<Error>())
            .expect("wrapped");
        assert_eq!(inner.reason(), Some(Reason::BadName));
        assert_eq!(
            inner.raw_os_error(),
            Some(krcore_abi::errno::Errno::EINVAL.0)
        );
    }
}
