//! The substrate: user-space verbs on rxe0 work in this VM.

use crate::harness::check;

pub fn loopback_read_8b() -> Result<(), String> {
    let got = verify::verbs::loopback_read("rxe0").map_err(|e| e.to_string())?;
    println!("  read {:?}", String::from_utf8_lossy(&got));
    check(&got == b"krcore!!", || format!("read {got:?}"))
}
