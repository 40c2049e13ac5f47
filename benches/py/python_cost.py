"""What the Python package adds to an operation: 8 B READs one at a time on this
node's loopback pool, each built and run as a batch through `krcore` (the PyO3 module
over the Rust library), against the same READs through the Rust library itself (the
`krcore lat` tool, with a fresh ring each block). Blocks of each alternate in one run;
the medians and 99th percentiles over all blocks are reported with their ratio. In the
guest (`make bench-python`):

    target/pyvenv/bin/python3 benches/py/python_cost.py [OPS]
"""
import json
import statistics
import subprocess
import sys
import time

import krcore

OPS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
BLOCKS = 10
TOOL = "target/release/krcore"
ACCESS = krcore.Access.LOCAL_WRITE | krcore.Access.REMOTE_READ


def python_block(n):
    """`n` READs through the package, each timed (us); a fresh ring, as the tool's."""
    with krcore.Ring(16) as ring:
        vqp = ring.connect(ring.node_gid(), 0)
        mr = ring.register(4096, ACCESS)
        remote = ring.import_mr(vqp, mr.export())
        for _ in range(20):  # warm, as the tool is
            ring.run(krcore.Batch().read(vqp, mr, 0, remote, 64, 8))
        out = []
        for _ in range(n):
            t = time.perf_counter_ns()
            done = ring.run(krcore.Batch().read(vqp, mr, 0, remote, 64, 8))
            out.append(time.perf_counter_ns() - t)
            assert done == [8], done
        ring.deregister(mr)
        return [t / 1e3 for t in out]


def rust_block(n):
    """The tool's median and p99 (us) for `n` READs through the Rust library."""
    out = subprocess.run([TOOL, "lat", "--op", "read", "--size", "8", "--iters", str(n),
                          "--json"], check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return r["median_us"], r["p99_us"]


def main():
    per = OPS // BLOCKS
    py, rust = [], []
    for _ in range(BLOCKS):
        py += python_block(per)
        rust.append(rust_block(per))
    py.sort()
    py_med, py_p99 = statistics.median(py), py[int(len(py) * 0.99)]
    rust_med = statistics.median(m for m, _ in rust)
    rust_p99 = statistics.median(p for _, p in rust)
    print(f"python cost: {len(py)} READs of 8 B one at a time, in {BLOCKS} blocks each way")
    print(f"python cost: package median {py_med:.1f} us, p99 {py_p99:.1f} us")
    print(f"python cost: Rust library median {rust_med:.1f} us, p99 {rust_p99:.1f} us "
          f"(medians of its blocks' figures)")
    print(f"python cost: package/Rust median {py_med / rust_med:.2f}x, "
          f"p99 {py_p99 / rust_p99:.2f}x")


main()
