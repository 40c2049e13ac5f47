"""A Python operation's cost through the two faces a Python package could have: the
cffi package (`krcore`, over the C header) and a PyO3 module over the Rust library
(`krcore_pyo3`, benches/pyo3-face). Each times one 8 B READ at a time on this node's
loopback pool, built and run as a batch; blocks of each alternate, in one run, and the
medians and 99th percentiles are reported with their ratio. In the guest:

    PYTHONPATH=target/pyo3-face target/pyvenv/bin/python3 benches/py/faces.py [OPS]
"""
import statistics
import sys
import time

import krcore
import krcore_pyo3

OPS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
BLOCKS = 10
ACCESS = krcore.Access.LOCAL_WRITE | krcore.Access.REMOTE_READ


def cffi_face():
    ring = krcore.Ring(16)
    vqp = ring.connect(ring.node_gid(), 0)
    mr = ring.register(4096, ACCESS)
    remote = ring.import_mr(vqp, mr.export())

    def op():
        assert ring.run(krcore.Batch().read(vqp, mr, 0, remote, 64, 8)) == [8]
    return ring, op


def pyo3_face():
    ring = krcore_pyo3.Ring(16)
    vqp = ring.connect(ring.node_gid(), 0)
    mr = ring.register(4096, int(ACCESS))
    remote = ring.import_mr(vqp, mr)

    def op():
        assert ring.read(vqp, mr, 0, remote, 64, 8) == 8
    return ring, op


def block(op, n):
    out = []
    for _ in range(n):
        t = time.perf_counter_ns()
        op()
        out.append(time.perf_counter_ns() - t)
    return out


def main():
    faces = {"cffi": cffi_face(), "pyo3": pyo3_face()}
    times = {name: [] for name in faces}
    for name, (_, op) in faces.items():
        block(op, 100)  # warm
    for _ in range(BLOCKS):
        for name, (_, op) in faces.items():
            times[name] += block(op, OPS // BLOCKS)
    stats = {}
    for name, t in times.items():
        t.sort()
        stats[name] = (statistics.median(t) / 1e3, t[int(len(t) * 0.99)] / 1e3)
        print(f"python faces: {name}: {len(t)} READs of 8 B, one at a time: "
              f"median {stats[name][0]:.1f} us, p99 {stats[name][1]:.1f} us")
    print(f"python faces: pyo3/cffi median {stats['pyo3'][0] / stats['cffi'][0]:.2f}x, "
          f"p99 {stats['pyo3'][1] / stats['cffi'][1]:.2f}x")


main()
