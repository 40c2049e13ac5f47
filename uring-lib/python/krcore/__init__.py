"""krcore from Python: rings, virtual QPs, registered memory and batches of RDMA
operations. A PyO3 module over the Rust library (krcore-uring): the same ring, the same
checks, and its async ring under asyncio.

    import krcore
    with krcore.Ring(64) as ring:
        vqp = ring.connect(ring.node_gid(), 0)             # this node's loopback pool
        mr = ring.register(4096, krcore.Access.LOCAL_WRITE | krcore.Access.REMOTE_READ)
        remote = ring.import_mr(vqp, mr.export())
        mr.view[:5] = b"hello"
        batch = krcore.Batch().read(vqp, mr, 1024, remote, 0, 5)
        print(ring.run(batch))                              # [5]: bytes read
        print(bytes(mr.view[1024:1029]))                    # b'hello'

Names are the Rust library's: `Reason.REMOTE_RANGE` is `Reason::RemoteRange`. A failed
operation raises (or, in a batch, returns) `KrcoreError`, an `OSError` with the errno
and the `reason`; a bounded wait that ran out raises `KrcoreTimeout`, a `TimeoutError`.

Blocking calls release the GIL while they wait. `AsyncRing` runs the library's futures
on one worker thread of the module's own and hands their results to the event loop:
a coroutine that waits holds no thread, and cancelling it is safe (see `AsyncRing`).
"""
import atexit as _atexit
import os as _os

from ._krcore import (AsyncRing, Batch, Listener, MemoryRegion, RemoteRegion, Ring, Vqp,
                      _forked, _quiesce)
from ._types import (Access, Completion, KrcoreError, KrcoreTimeout, MrDescriptor, Opcode,
                     Reason)

# A forked child shares the parent's rings (file and mappings): it must neither use
# them nor end them when its copies of the objects go.
_os.register_at_fork(after_in_child=_forked)
# The async worker's threads hand results to asyncio by taking the GIL, also after a
# cancelled coroutine is gone: the interpreter's exit waits for them, as a thread
# taking the GIL while it finalizes would crash the process.
_atexit.register(_quiesce)

__all__ = ["Access", "AsyncRing", "Batch", "Completion", "KrcoreError", "KrcoreTimeout",
           "Listener", "MemoryRegion", "MrDescriptor", "Opcode", "Reason", "RemoteRegion",
           "Ring", "Vqp"]
