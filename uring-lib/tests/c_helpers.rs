//! The C helpers (uring-lib/c/krcore.h) prepare every opcode exactly as the Rust
//! constructors in abi do: a C program preps each entry and prints its bytes, which must
//! equal the Rust entry's. The C header is hand-written over the generated ABI header;
//! this is what keeps the two from drifting.

use std::path::PathBuf;
use std::process::Command;

use krcore_abi::meta::record::{name, name_words};
use krcore_abi::opcode::Opcode;
use krcore_abi::sqe::{MrAccess, Sqe};

const PROGRAM: &str = r#"
#include <stdio.h>
#include "krcore.h"

static void dump(void (*fill)(struct krcore_Sqe *)) {
    struct krcore_Sqe s;
    memset(&s, 0, sizeof(s));
    fill(&s);
    const unsigned char *b = (const unsigned char *)&s;
    for (size_t i = 0; i < sizeof(s); i++)
        printf("%02x", b[i]);
    printf("\n");
}

static const uint8_t GID[16] = {0,0,0,0,0,0,0,0,0,0,0xff,0xff,10,0,0,2};
static void nop(struct krcore_Sqe *s) { krcore_prep_nop(s); s->user_data = 1; }
static void connect(struct krcore_Sqe *s) { krcore_prep_connect(s, GID, 7); s->user_data = 2; }
static void disconnect(struct krcore_Sqe *s) { krcore_prep_disconnect(s, 3); s->user_data = 3; }
static void reg(struct krcore_Sqe *s) { krcore_prep_reg_mr(s, (void *)0x10000, 4096, 5); s->user_data = 4; }
static void dereg(struct krcore_Sqe *s) { krcore_prep_dereg_mr(s, 9); s->user_data = 5; }
static void import(struct krcore_Sqe *s) { krcore_prep_import_mr(s, 3, 0x20000, 512, 0xabcdef); s->user_data = 6; }
static void publish(struct krcore_Sqe *s) { krcore_prep_publish(s, 9, "table-17", 0640); s->user_data = 7; }
static void import_name(struct krcore_Sqe *s) { krcore_prep_import_name(s, 3, "a-name-of-24-bytes-long!", 64); krcore_sqe_owned_by(s, 1000); s->user_data = 8; }
static void rd(struct krcore_Sqe *s) { krcore_prep_read(s, 3, 9, (void *)0x10008, 8, 4, 0x20010); s->user_data = 9; }
static void wr(struct krcore_Sqe *s) { krcore_prep_write(s, 3, 9, (void *)0x10008, 8, 4, 0x20010); s->user_data = 10; }
static void wr_imm(struct krcore_Sqe *s) { krcore_prep_write_imm(s, 3, 9, (void *)0x10008, 8, 4, 0x20010, 77); s->user_data = 11; }
static void cas(struct krcore_Sqe *s) { krcore_prep_cas(s, 3, 9, (void *)0x10008, 4, 0x20010, 1, 2); s->user_data = 12; }
static void faa(struct krcore_Sqe *s) { krcore_prep_faa(s, 3, 9, (void *)0x10008, 4, 0x20010, 5); s->user_data = 13; }
static void send(struct krcore_Sqe *s) { krcore_prep_send(s, 3, 9, (void *)0x10008, 64); s->user_data = 14; }
static void send_imm(struct krcore_Sqe *s) { krcore_prep_send_imm(s, 3, 9, (void *)0x10008, 64, 88); s->user_data = 15; }
static void recv(struct krcore_Sqe *s) { krcore_prep_recv(s, 3, 9, (void *)0x10008, 64); s->user_data = 16; }
static void listen(struct krcore_Sqe *s) { krcore_prep_listen(s, 77); s->user_data = 17; }
static void unlisten(struct krcore_Sqe *s) { krcore_prep_unlisten(s, 77); s->user_data = 18; }
static void resolve(struct krcore_Sqe *s) { krcore_prep_resolve_name(s, "table-17"); s->user_data = 19; }

int main(void) {
    void (*all[])(struct krcore_Sqe *) = {nop, connect, disconnect, reg, dereg, import, publish,
        import_name, rd, wr, wr_imm, cas, faa, send, send_imm, recv, listen, unlisten, resolve};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        dump(all[i]);
    return 0;
}
"#;

fn rust_entries() -> Vec<Sqe> {
    let gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
    let words = |s: &str| name_words(&name(s).expect("a valid name"));
    let rd = |op, ud| Sqe::one_sided(op, ud, 3, 9, 0x10008, 8, 4, 0x20010);
    let two = |op, ud| Sqe::two_sided(op, ud, 3, 9, 0x10008, 64);
    vec![
        Sqe::nop(1),
        Sqe::connect(2, gid, 7),
        Sqe::disconnect(3, 3),
        Sqe::reg_mr(4, 0x10000, 4096, MrAccess::from_bits_retain(5)),
        Sqe::dereg_mr(5, 9),
        Sqe::import_mr(6, 3, 0x20000, 512, 0xabcdef),
        Sqe::publish(7, 9, words("table-17"), 0o640),
        Sqe::import_name(8, 3, words("a-name-of-24-bytes-long!"), 64, Some(1000)),
        rd(Opcode::Read, 9),
        rd(Opcode::Write, 10),
        rd(Opcode::WriteImm, 11).with_imm(77),
        Sqe::cas(12, 3, 9, 0x10008, 4, 0x20010, 1, 2),
        Sqe::faa(13, 3, 9, 0x10008, 4, 0x20010, 5),
        two(Opcode::Send, 14),
        two(Opcode::SendImm, 15).with_imm(88),
        two(Opcode::Recv, 16),
        Sqe::listen(17, 77),
        Sqe::unlisten(18, 77),
        Sqe::resolve_name(19, words("table-17")),
    ]
}

#[test]
fn every_opcode_has_a_c_prep() {
    let mut seen: Vec<u8> = rust_entries().iter().map(|s| s.opcode).collect();
    seen.sort();
    seen.dedup();
    let all: Vec<u8> = Opcode::ALL.iter().map(|&o| o as u8).collect();
    assert_eq!(seen, all, "an opcode without a C prep (and a case here)");
}

fn hex(s: &Sqe) -> String {
    // SAFETY: Sqe is repr(C), 64 bytes with no padding (abi asserts its layout).
    let b = unsafe { std::slice::from_raw_parts((s as *const Sqe).cast::<u8>(), 64) };
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn c_helpers_prepare_what_rust_does() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = std::env::temp_dir().join(format!("krcore-c-helpers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("preps.c"), dir.join("preps"));
    std::fs::write(&src, PROGRAM).unwrap();
    let cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-I"])
        .arg(root.join("abi/include"))
        .arg("-I")
        .arg(root.join("uring-lib/c"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("a C compiler");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let got: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let want: Vec<String> = rust_entries().iter().map(hex).collect();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "entry {i} (user_data {}) differs", i + 1);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
