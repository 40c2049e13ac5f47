"""Builds krcore's Python extension with cffi, over the C headers: the generated ABI
header (abi/include/krcore_abi.h, krcore_reasons.h) and the inline helpers
(uring-lib/c/krcore.h). They are read from `krcore/include/`, where setup.py copies
them from the repository when it runs inside one (an sdist carries them there), else
from the repository itself.

The declarations cffi needs come from the C preprocessor, not from parsing the header
by hand: the ABI header run through `cc -E` (with empty stand-ins for the standard
headers, whose types cffi knows) gives its structs and enums as the compiler sees them,
and `cc -dM -E` its constants, which the C compiler then evaluates. Used by setup.py.
"""
import os
import subprocess
import sys
import tempfile

import cffi

HERE = os.path.dirname(os.path.abspath(__file__))
VENDORED = os.path.join(HERE, "include")
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
if os.path.exists(os.path.join(VENDORED, "krcore_abi.h")):
    ABI_INCLUDE = C_INCLUDE = VENDORED
else:
    ABI_INCLUDE = os.path.join(ROOT, "abi", "include")
    C_INCLUDE = os.path.join(ROOT, "uring-lib", "c")
CC = os.environ.get("CC", "cc")
STD_HEADERS = ["stdarg.h", "stdbool.h", "stddef.h", "stdint.h", "stdlib.h"]


def preprocess(*flags):
    """The ABI header through the preprocessor, standard headers left empty."""
    with tempfile.TemporaryDirectory() as std:
        for h in STD_HEADERS:
            open(os.path.join(std, h), "w").close()
        return subprocess.run(
            [CC, "-E", "-P", "-nostdinc", "-I", std, *flags,
             os.path.join(ABI_INCLUDE, "krcore_abi.h")],
            check=True, capture_output=True, text=True).stdout


def constants():
    """`#define NAME ...` for each integer constant of the ABI header."""
    out = []
    for line in preprocess("-dM").splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[1].lower().startswith("krcore_"):
            continue
        if "(" in parts[1] or parts[2].startswith("{"):
            continue  # function-like macros, and the opcode list
        out.append(f"#define {parts[1]} ...")
    return "\n".join(out)


HELPERS = """
struct krcore_ring {
    int fd;
    struct krcore_SetupParams params;
    uint32_t sqe_tail;
    ...;
};
int krcore_queue_init(unsigned entries, struct krcore_ring *r, unsigned flags);
void krcore_queue_exit(struct krcore_ring *r);
struct krcore_Sqe *krcore_get_sqe(struct krcore_ring *r);
int krcore_submit(struct krcore_ring *r);
int krcore_submit_and_wait(struct krcore_ring *r, uint32_t want);
int krcore_enter(struct krcore_ring *r, uint32_t min_complete, uint32_t timeout_us);
uint32_t krcore_cq_ready(const struct krcore_ring *r);
int krcore_peek_cqe(struct krcore_ring *r, struct krcore_Cqe **cqe);
void krcore_cq_advance(struct krcore_ring *r, uint32_t n);
int krcore_node_gid(struct krcore_ring *r, uint8_t gid[16]);
void krcore_prep_nop(struct krcore_Sqe *sqe);
void krcore_prep_connect(struct krcore_Sqe *sqe, const uint8_t gid[16], uint32_t service);
void krcore_prep_pair(struct krcore_Sqe *sqe, const uint8_t gid[16], uint16_t port,
                      uint16_t peer_port);
void krcore_prep_disconnect(struct krcore_Sqe *sqe, uint32_t vqp);
void krcore_prep_reg_mr(struct krcore_Sqe *sqe, void *addr, uint32_t len, uint32_t access);
void krcore_prep_dereg_mr(struct krcore_Sqe *sqe, uint32_t mr);
void krcore_prep_import_mr(struct krcore_Sqe *sqe, uint32_t vqp, uint64_t addr, uint32_t len,
                           uint64_t descriptor);
int krcore_prep_publish(struct krcore_Sqe *sqe, uint32_t mr, const char *name, uint16_t mode);
int krcore_prep_import_name(struct krcore_Sqe *sqe, uint32_t vqp, const char *name, uint32_t len);
void krcore_sqe_owned_by(struct krcore_Sqe *sqe, uint32_t uid);
int krcore_prep_resolve_name(struct krcore_Sqe *sqe, const char *name);
void krcore_prep_read(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr, uint32_t len,
                      uint32_t rmr, uint64_t raddr);
void krcore_prep_write(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr, uint32_t len,
                       uint32_t rmr, uint64_t raddr);
void krcore_prep_write_imm(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr,
                           uint32_t len, uint32_t rmr, uint64_t raddr, uint32_t imm);
void krcore_prep_cas(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr, uint32_t rmr,
                     uint64_t raddr, uint64_t compare, uint64_t swap);
void krcore_prep_faa(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr, uint32_t rmr,
                     uint64_t raddr, uint64_t add);
void krcore_prep_send(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr, uint32_t len);
void krcore_prep_send_imm(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr,
                          uint32_t len, uint32_t imm);
void krcore_prep_recv(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr, uint32_t len);
void krcore_prep_listen(struct krcore_Sqe *sqe, uint32_t service);
void krcore_prep_unlisten(struct krcore_Sqe *sqe, uint32_t service);
"""

ffi = cffi.FFI()
ffi.cdef(preprocess())
ffi.cdef(constants())
ffi.cdef(HELPERS)
ffi.set_source(
    "krcore._krcore",
    '#include "krcore.h"',
    include_dirs=[ABI_INCLUDE, C_INCLUDE],
    extra_compile_args=["-std=gnu11", "-Wno-unused-function"],
)
