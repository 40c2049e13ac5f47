#!/usr/bin/env python3
"""A krcore client in plain Python: proof that any language can use the rings.

No krcore code is imported. The layout comes from parsing the generated C header
(abi/include/krcore_abi.h): its #defines, enums and structs become ctypes types. The
script sets up a ring, maps the SQ and CQ, runs a NOP, then CONNECT, REG_MR,
IMPORT_MR and an RDMA WRITE whose bytes it checks.

    python3 krcore_ctypes.py [HEADER]
"""
import ctypes
import fcntl
import mmap
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_HEADER = os.path.join(HERE, "..", "..", "..", "abi", "include", "krcore_abi.h")
CTYPES = {"uint8_t": ctypes.c_uint8, "uint16_t": ctypes.c_uint16, "uint32_t": ctypes.c_uint32,
          "uint64_t": ctypes.c_uint64, "int32_t": ctypes.c_int32}


def parse_header(path):
    """Constants (defines and enum values) and ctypes structs of the header."""
    text = open(path).read()
    consts = {"UINT32_MAX": 0xFFFFFFFF}
    for name, value in re.findall(r"^#define (krcore_\w+) (.+)$", text, re.M):
        v = re.sub(r"\(u?int\d+_t\)", "", value).strip()
        if re.fullmatch(r"[\w\s()<|x]+", v):
            try:
                consts[name] = eval(v, {}, dict(consts))  # digits, shifts, known names only
            except (NameError, SyntaxError):
                pass
    for name, value in re.findall(r"^\s+(KRCORE_\w+) = (\d+),?$", text, re.M):
        consts[name] = int(value)
    structs = {}
    for name, body in re.findall(r"^struct (krcore_\w+) \{\n(.*?)^\};", text, re.M | re.S):
        fields = []
        for line in body.splitlines():
            m = re.match(r"\s+(?:struct )?(\w+) (\w+)(?:\[(\w+)\])?;", line)
            if not m:
                continue
            ty, field, n = m.groups()
            t = CTYPES.get(ty) or structs[ty]
            if n:
                t = t * (int(n) if n.isdigit() else consts[n])
            fields.append((field, t))
        structs[name] = type(name, (ctypes.Structure,), {"_fields_": fields})
    return consts, structs


class Ring:
    """The application side of a krcore ring, straight from the header's layout."""

    def __init__(self, fd, c, s, entries=8):
        self.fd, self.c, self.s = fd, c, s
        p = s["krcore_SetupParams"](sq_entries=entries)
        buf = bytearray(p)
        fcntl.ioctl(fd, c["krcore_IOC_SETUP"], buf, True)
        self.p = s["krcore_SetupParams"].from_buffer_copy(buf)
        self.sq = mmap.mmap(fd, self.p.sq_off.map_len, offset=c["krcore_OFF_SQ_RING"])
        self.cq = mmap.mmap(fd, self.p.cq_off.map_len, offset=c["krcore_OFF_CQ_RING"])

    def _u32(self, m, off, value=None):
        if value is None:
            return struct.unpack_from("=I", m, off)[0]
        # On x86 a plain aligned store is a release store (the TSO memory model), which
        # is what publishing an index needs.
        struct.pack_into("=I", m, off, value & 0xFFFFFFFF)

    def run(self, **fields):
        """Pushes one SQE, enters until its CQE is ready, and returns the CQE."""
        Sqe, Cqe = self.s["krcore_Sqe"], self.s["krcore_Cqe"]
        tail = self._u32(self.sq, self.p.sq_off.tail)
        mask = self.p.sq_entries - 1
        off = self.p.sq_off.entries + (tail & mask) * ctypes.sizeof(Sqe)
        self.sq[off:off + ctypes.sizeof(Sqe)] = bytes(Sqe(**fields))
        self._u32(self.sq, self.p.sq_off.tail, tail + 1)
        args = self.s["krcore_EnterArgs"](to_submit=1, min_complete=1,
                                          flags=self.c["krcore_EnterFlags_GETEVENTS"])
        fcntl.ioctl(self.fd, self.c["krcore_IOC_ENTER"], bytes(args))
        head = self._u32(self.cq, self.p.cq_off.head)
        assert self._u32(self.cq, self.p.cq_off.tail) != head, "no CQE after enter"
        off = self.p.cq_off.entries + (head & (self.p.cq_entries - 1)) * ctypes.sizeof(Cqe)
        cqe = Cqe.from_buffer_copy(self.cq[off:off + ctypes.sizeof(Cqe)])
        self._u32(self.cq, self.p.cq_off.head, head + 1)
        if cqe.res < 0:
            raise OSError(-cqe.res, f"opcode {fields.get('opcode')} failed, reason {cqe.reason}")
        return cqe


def local_gid(fd, c, s):
    """rxe0's RoCE v2 GID (index 1), from the device query."""
    Row, Query = s["krcore_DeviceGid"], s["krcore_QueryDevices"]
    rows = (Row * 16)()
    q = Query(rows=ctypes.addressof(rows), capacity=16)
    buf = bytearray(q)
    fcntl.ioctl(fd, c["krcore_IOC_QUERY_DEVICES"], buf, True)
    q = Query.from_buffer_copy(buf)
    assert q.abi_version == c["krcore_ABI_VERSION"], "ABI version mismatch"
    for r in rows[:q.n_written]:
        if bytes(r.name).rstrip(b"\0") == b"rxe0" and r.gid_index == 1:
            return bytes(r.gid)
    raise SystemExit("rxe0 GID 1 not found")


def main():
    c, s = parse_header(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_HEADER)
    fd = os.open("/dev/krcore", os.O_RDWR)
    ring = Ring(fd, c, s)
    print(f"ring: {ring.p.sq_entries} SQEs, {ring.p.cq_entries} CQEs, mapped from the header's layout")

    cqe = ring.run(opcode=c["KRCORE_OPCODE_NOP"], user_data=7)
    assert (cqe.user_data, cqe.res) == (7, 0), cqe
    print("NOP: completed")

    gid = local_gid(fd, c, s)
    hi, lo = struct.unpack("=QQ", gid)
    vqp = ring.run(opcode=c["KRCORE_OPCODE_CONNECT"], user_data=1, remote_addr=hi, arg0=lo).res
    buf = ctypes.create_string_buffer(4096)
    addr = ctypes.addressof(buf)
    access = c["krcore_MrAccess_LOCAL_WRITE"] | c["krcore_MrAccess_REMOTE_WRITE"] | c["krcore_MrAccess_REMOTE_READ"]
    cqe = ring.run(opcode=c["KRCORE_OPCODE_REG_MR"], user_data=2, addr=addr, len=4096, imm=access)
    mr, descriptor = cqe.res, cqe.aux
    rmr = ring.run(opcode=c["KRCORE_OPCODE_IMPORT_MR"], user_data=3, vqp=vqp, remote_addr=addr,
                   len=4096, arg0=descriptor).res
    payload = b"written by python"
    ctypes.memmove(addr, payload, len(payload))
    cqe = ring.run(opcode=c["KRCORE_OPCODE_WRITE"], user_data=4, vqp=vqp, mr=mr, addr=addr,
                   len=len(payload), rmr=rmr, remote_addr=addr + 2048)
    got = ctypes.string_at(addr + 2048, len(payload))
    assert cqe.res == len(payload) and got == payload, (cqe.res, got)
    print(f"RDMA WRITE: {cqe.res} bytes landed: {got.decode()!r}")
    ring.run(opcode=c["KRCORE_OPCODE_DEREG_MR"], user_data=5, mr=mr)
    ring.run(opcode=c["KRCORE_OPCODE_DISCONNECT"], user_data=6, vqp=vqp)
    os.close(fd)
    print("python client: ok")


if __name__ == "__main__":
    main()
