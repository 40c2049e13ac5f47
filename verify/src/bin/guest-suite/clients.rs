//! krcore from other languages: the C example over uring-lib/c/krcore.h, and the
//! Python package (a PyO3 module over the Rust library).

use crate::harness::{check, sh};

pub fn c_example_runs() -> Result<(), String> {
    let out = sh(&["target/release/c-read-write"])?;
    for l in out.lines() {
        println!("  {l}");
    }
    check(out.contains("c client: ok"), || format!("output: {out}"))
}

/// The package as a user installs it: built from its sdist into a wheel by maturin,
/// installed into a virtual environment (`make python`). Besides the example's
/// operations: a timed-out RECV's region refused afterwards, a viewed region not
/// deregistered, and a blocking RECV on one thread taking another thread's SEND
/// (the wait releases the GIL).
pub fn python_package_runs_the_example() -> Result<(), String> {
    let out = sh(&[
        "target/pyvenv/bin/python3",
        "uring-lib/python/examples/read_write.py",
    ])?;
    for l in out.lines() {
        println!("  {l}");
    }
    check(
        out.contains("RDMA WRITE: 17 bytes landed")
            && out.contains("reason REMOTE_RANGE")
            && out.contains("a RECV on another thread took this thread's SEND")
            && out.contains("python client: ok"),
        || format!("output: {out}"),
    )
}

/// The package's asyncio face (`krcore.AsyncRing`): messages awaited on two rings,
/// READs gathered, a RECV given up on while the event loop runs on.
pub fn python_asyncio_runs_the_example() -> Result<(), String> {
    let out = sh(&[
        "target/pyvenv/bin/python3",
        "uring-lib/python/examples/async_messages.py",
    ])?;
    for l in out.lines() {
        println!("  {l}");
    }
    check(
        out.contains("python async:") && out.contains(": ok"),
        || format!("output: {out}"),
    )
}

/// The package's edges (uring-lib/python/tests/edges.py): another ring's handles
/// refused (before, a PUBLISH or a READ went to the kernel under the other ring's
/// handle numbers), a forked child refusing its parent's ring and leaving it working,
/// a coroutine never made giving its region back (before, it was freed), an unlisten
/// ending an accept that waits (before, it waited behind it), bad timeouts refused
/// (before, a panic).
pub fn python_edges() -> Result<(), String> {
    let out = sh(&[
        "target/pyvenv/bin/python3",
        "uring-lib/python/tests/edges.py",
    ])?;
    for l in out.lines() {
        println!("  {l}");
    }
    check(out.contains("python edges: ok"), || {
        format!("output: {out}")
    })
}
