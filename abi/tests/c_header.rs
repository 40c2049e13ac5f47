//! The checked-in C header matches abi, and C compiles it to the same layout as Rust.
//!
//! `KRCORE_BLESS=1 cargo test -p krcore-abi --test c_header` rewrites the header.

use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use krcore_abi::compat::OneOp;
use krcore_abi::cqe::Cqe;
use krcore_abi::device::{DeviceGid, QueryDevices};
use krcore_abi::layout::{RingHeader, RingOffsets, SetupParams};
use krcore_abi::sqe::Sqe;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generate() -> String {
    let config = cbindgen::Config::from_file(root().join("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(root())
        .with_config(config)
        .generate()
        .expect("cbindgen")
        .write(&mut out);
    String::from_utf8(out).unwrap()
}

/// `krcore_reasons.h`: each reason's name and description as C strings, from abi's
/// `Reason` (so C's table cannot drift from Rust's).
fn generate_reasons() -> String {
    use krcore_abi::cqe::Reason;
    let mut s = String::from(
        "/* SPDX-License-Identifier: MIT OR Apache-2.0 */\n\
         /* Why an entry failed, as text: generated from abi's Reason by\n \
         * `KRCORE_BLESS=1 cargo test -p krcore-abi --test c_header`; do not edit. */\n\
         #ifndef KRCORE_REASONS_H\n#define KRCORE_REASONS_H\n\n#include <stdint.h>\n\n",
    );
    for (f, text) in [
        ("name", Reason::name as fn(Reason) -> &'static str),
        ("describe", Reason::describe),
    ] {
        s += &format!(
            "/* A reason's {f} (a CQE's `reason`); NULL for one this header does not know. */\n\
             static inline const char *krcore_reason_{f}(uint16_t reason)\n{{\n\tswitch (reason) {{\n"
        );
        for r in Reason::ALL {
            s += &format!("\tcase {}: return {:?};\n", r as u16, text(r));
        }
        s += "\t}\n\treturn 0;\n}\n\n";
    }
    s + "#endif\n"
}

/// The checked-in `include/NAME` is `fresh` (rewritten first under `KRCORE_BLESS`).
fn check_current(name: &str, fresh: &str) {
    let path = root().join("include").join(name);
    if std::env::var_os("KRCORE_BLESS").is_some() {
        std::fs::write(&path, fresh).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "abi/include/{name} is stale: rerun with KRCORE_BLESS=1 and commit it"
    );
}

#[test]
fn reasons_header_is_current() {
    check_current("krcore_reasons.h", &generate_reasons());
}

#[test]
fn header_is_current() {
    check_current("krcore_abi.h", &generate());
}

#[test]
fn c_sees_the_rust_layout() {
    // Sizes and offsets as Rust lays them out; C must agree, or this fails to compile.
    let checks = [
        ("struct krcore_Sqe", "", size_of::<Sqe>()),
        ("struct krcore_Sqe", "user_data", offset_of!(Sqe, user_data)),
        (
            "struct krcore_Sqe",
            "remote_addr",
            offset_of!(Sqe, remote_addr),
        ),
        ("struct krcore_Sqe", "arg1", offset_of!(Sqe, arg1)),
        ("struct krcore_Cqe", "", size_of::<Cqe>()),
        ("struct krcore_Cqe", "res", offset_of!(Cqe, res)),
        ("struct krcore_Cqe", "aux", offset_of!(Cqe, aux)),
        ("struct krcore_Cqe", "reason", offset_of!(Cqe, reason)),
        ("struct krcore_RingHeader", "", size_of::<RingHeader>()),
        (
            "struct krcore_RingHeader",
            "tail",
            offset_of!(RingHeader, tail),
        ),
        (
            "struct krcore_RingHeader",
            "flags",
            offset_of!(RingHeader, flags),
        ),
        ("struct krcore_RingOffsets", "", size_of::<RingOffsets>()),
        ("struct krcore_SetupParams", "", size_of::<SetupParams>()),
        (
            "struct krcore_SetupParams",
            "cq_off",
            offset_of!(SetupParams, cq_off),
        ),
        ("struct krcore_QueryDevices", "", size_of::<QueryDevices>()),
        ("struct krcore_DeviceGid", "", size_of::<DeviceGid>()),
        ("struct krcore_DeviceGid", "gid", offset_of!(DeviceGid, gid)),
        ("struct krcore_OneOp", "", size_of::<OneOp>()),
        ("struct krcore_OneOp", "cqe", offset_of!(OneOp, cqe)),
        ("struct krcore_OneOp", "popped", offset_of!(OneOp, popped)),
    ];
    let mut c = String::from("#include <stddef.h>\n#include \"krcore_abi.h\"\n");
    for (ty, field, want) in checks {
        let expr = if field.is_empty() {
            format!("sizeof({ty})")
        } else {
            format!("offsetof({ty}, {field})")
        };
        c += &format!("_Static_assert({expr} == {want}, \"{ty} {field}\");\n");
    }
    let dir = std::env::temp_dir().join(format!("krcore-c-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("layout.c");
    std::fs::write(&file, c).unwrap();
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-fsyntax-only", "-I"])
        .arg(root().join("include"))
        .arg(&file)
        .output()
        .expect("cc");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "C disagrees with Rust:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
