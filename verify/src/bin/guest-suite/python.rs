//! Any language can use the rings: a Python client built only from the C header.

use crate::harness::{check, sh};

pub fn ctypes_client_nop_and_write() -> Result<(), String> {
    let out = sh(&[
        "python3",
        "uring-lib/examples/python/krcore_ctypes.py",
        "abi/include/krcore_abi.h",
    ])?;
    for l in out.lines() {
        println!("  {l}");
    }
    check(
        out.contains("RDMA WRITE: 17 bytes landed") && out.contains("python client: ok"),
        || format!("output: {out}"),
    )
}
