//! Shared by the examples: retrying an operation that fails for a passing reason.
use std::thread::sleep;
use std::time::{Duration, Instant};

use krcore_abi::cqe::Reason;
use krcore_uring::Error;

/// Retries `f` while it fails for one of `reasons` (a peer or the MetaServer still
/// booting, a name not published yet, a peer with no receive posted yet), up to `secs`
/// seconds; then its last outcome.
pub fn retry<T>(
    secs: u64,
    reasons: &[Reason],
    mut f: impl FnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        match f() {
            Err(e)
                if e.reason().is_some_and(|r| reasons.contains(&r)) && Instant::now() < until =>
            {
                sleep(Duration::from_millis(200))
            }
            r => return r,
        }
    }
}
