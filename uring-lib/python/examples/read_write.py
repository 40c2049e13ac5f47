#!/usr/bin/env python3
"""The krcore Python package against the real module: CONNECT to this node's loopback
pool, register memory, import its export, then WRITE, READ and FAA in one batch with
the bytes checked; a refused READ with its reason; a RECV nobody answers, bounded by a
timeout, then cancelled by DISCONNECT.

    target/pyvenv/bin/python3 uring-lib/python/examples/read_write.py   # after `make python`
"""
import struct
import sys
import threading

import krcore
from krcore import Access, Batch, Reason


def main():
    with krcore.Ring(16) as ring:
        # An endpoint that pairs on one port (a RECV below waits on it); service 0
        # would be one-sided only.
        node = ring.node_gid()
        vqp = ring.pair(node, 4006, 4006)
        print(f"connected: {vqp}")
        mr = ring.register(8192, Access.LOCAL_WRITE | Access.REMOTE_READ |
                           Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
        # The descriptor as Rust's MrDescriptor has it: descriptor, addr, len.
        d = mr.export()
        assert d._fields == ("descriptor", "addr", "len") and d.len == 8192, d
        remote = ring.import_mr(vqp, d)
        msg = b"hello from python"
        mr.view[:len(msg)] = msg
        batch = (Batch()
                 .write(vqp, mr, 0, remote, 4096, len(msg))
                 .read(vqp, mr, 2048, remote, 4096, len(msg))
                 .faa(vqp, mr, 3000, remote, 6000, 10))
        res = ring.run(batch)
        assert res == [len(msg), len(msg), 8], res
        # Each result keeps its CQE's aux (a RECV's immediate data; none here).
        assert all(isinstance(r, krcore.Completion) and r.aux >= 0 for r in res), res
        assert bytes(mr.view[4096:4096 + len(msg)]) == msg
        assert bytes(mr.view[2048:2048 + len(msg)]) == msg
        assert struct.unpack_from("<Q", mr.view, 6000)[0] == 10
        print(f"RDMA WRITE: {len(msg)} bytes landed; READ and FAA checked")

        # The kernel's own range check, past the library's (which refuses this too):
        # an import that claims 8 bytes past the export.
        try:
            Batch().read(vqp, mr, 0, remote, 8190, 8)
            raise AssertionError("out-of-range READ built")
        except krcore.KrcoreError as e:
            print(f"refused by the library: {e}")
        try:
            wide = ring.import_mr(vqp, d._replace(len=d.len + 8))
            [r] = ring.run(Batch().read(vqp, mr, 0, wide, 8190, 8))
        except krcore.KrcoreError as e:
            r = e
        assert isinstance(r, krcore.KrcoreError) and r.reason is Reason.REMOTE_RANGE, r
        print(f"refused by the kernel: {r} (reason {r.reason.name}, errno {r.errno})")
        # A reason a newer module may give, which this package does not know: kept as
        # its number, not a ValueError.
        e = krcore.KrcoreError("an operation", 5, 250)
        assert e.reason == 250 and "reason 250" in str(e), e

        # A RECV nobody answers, bounded: its region goes with it (the NIC may still
        # write it), so the object refuses use until the ring frees it; DISCONNECT
        # cancels the RECV.
        spare = ring.register(64, Access.LOCAL_WRITE)
        try:
            ring.run(Batch().recv(vqp, spare, 0, 64), timeout=0.1)
            raise AssertionError("a RECV nobody answers completed")
        except TimeoutError as e:
            assert isinstance(e, krcore.KrcoreTimeout), e
            print(f"a RECV waited 100 ms: {e}")
        try:
            spare.view
            raise AssertionError("a given-up region's memory was reachable")
        except BufferError as e:
            print(f"its region went with it: {e}")
        # Timeouts are seconds, finite and not negative.
        for bad in (float("inf"), float("nan"), -1.0):
            try:
                ring.run(Batch().recv(vqp, mr, 0, 64), timeout=bad)
                raise AssertionError(f"timeout {bad} taken")
            except ValueError:
                pass
        # A view pins a region: what would take the region away is refused meanwhile.
        with mr.view as v:
            try:
                ring.deregister(mr)
                raise AssertionError("a viewed region was deregistered")
            except BufferError:
                v[0] = 1
        ring.disconnect(vqp)
        ring.deregister(mr)

        # A blocking wait releases the GIL: a RECV waits on another thread while this
        # one SENDs to it from a second ring.
        with krcore.Ring(8) as other:
            here, there = ring.pair(node, 4007, 4008), other.pair(node, 4008, 4007)
            inbox = ring.register(64, Access.LOCAL_WRITE)
            note = other.register(64, Access(0))
            got = []
            t = threading.Thread(target=lambda: got.extend(
                ring.run(Batch().recv(here, inbox, 0, 64), timeout=30)))
            t.start()
            note.view[:7] = b"thread!"
            while not got:
                [sent] = other.run(Batch().send(there, note, 0, 7))
                if not isinstance(sent, krcore.KrcoreError):
                    break
                assert sent.reason == Reason.NO_RECEIVER, sent
            t.join()
            assert got == [7] and bytes(inbox.view[:7]) == b"thread!", (got, bytes(inbox.view[:7]))
            print("a RECV on another thread took this thread's SEND")
    print("python client: ok")


if __name__ == "__main__":
    sys.exit(main())
