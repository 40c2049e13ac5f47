"""The Python package's edges against the real module (the guest suite runs it, after
`make python`): another ring's handles refused; a forked child leaving its parent's
ring alone and using its own; a coroutine never run giving its regions back; an unlisten ending an
accept that waits; bad timeouts refused.

    target/pyvenv/bin/python3 uring-lib/python/tests/edges.py
"""
import asyncio
import errno
import os
import sys

import krcore
from krcore import Access, Batch

RW = Access.LOCAL_WRITE | Access.REMOTE_READ


def refused(call, code, text=""):
    """`call` raises a KrcoreError with errno `code` (and `text` in its message)."""
    try:
        call()
    except krcore.KrcoreError as e:
        assert e.errno == code and text in str(e), e
        return e
    raise AssertionError(f"not refused: {call}")


def handles_stay_with_their_ring():
    a = krcore.Ring(8)
    with krcore.Ring(8) as b:
        node = a.node_gid()
        va = a.connect(node, 0)
        mr = a.register(64, RW)
        remote = a.import_mr(va, mr.export())
        b.connect(node, 0)
        b.register(64, RW)  # b's first handles are numbered as a's are
        for call in (lambda: b.publish(mr, "edges"),
                     lambda: b.run(Batch().read(va, mr, 0, remote, 0, 8)),
                     lambda: b.import_mr(va, mr.export()),
                     lambda: b.disconnect(va)):
            refused(call, errno.EINVAL, "another ring")
        # Nothing of a's was touched: its virtual QP and region still work.
        assert a.run(Batch().read(va, mr, 0, remote, 8, 8)) == [8]
        print("edges: another ring's handles refused")
    return a, va, mr, remote


def in_child(body):
    """Runs `body` in a forked child; its exit status is the verdict."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            body()
        except BaseException as e:
            print(f"edges: child: {e!r}", file=sys.stderr, flush=True)
            code = 1
        # Its copies of the objects go without ending the parent's.
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert status == 0, f"the child failed: {status:#x}"


def reads_back(ring):
    """A ring of this process's own: a region read into itself over a virtual QP."""
    node = ring.node_gid()
    v = ring.connect(node, 0)
    m = ring.register(64, RW)
    m.view[:8] = b"childown"
    r = ring.import_mr(v, m.export())
    assert ring.run(Batch().read(v, m, 8, r, 0, 8)) == [8]
    assert bytes(m.view[8:16]) == b"childown", bytes(m.view[:16])
    return v, m, r


def a_child_leaves_the_parent_alone_and_has_its_own(a, va, mr, remote):
    """A pre-fork server's worker: the parent's ring refused (EBADF), the child's own
    ring, region and async ring working, and the child's ring the grandchild's
    parent's in turn."""
    listener = a.listen(7313)

    def child():
        refused(lambda: a.run(Batch().read(va, mr, 0, remote, 0, 8)), 9, "forked")
        refused(lambda: krcore.AsyncRing(a), 9, "forked")
        with krcore.Ring(8) as own:
            # The parent's listen is neither accepted on nor ended from here.
            refused(lambda: own.accept(listener, timeout=0.01), 9, "forked")
            refused(lambda: own.unlisten(listener), 9, "forked")
            v, m, r = reads_back(own)
            in_child(lambda: refused(lambda: own.run(Batch().read(v, m, 0, r, 0, 8)), 9, "forked"))
            assert own.run(Batch().read(v, m, 16, r, 0, 8)) == [8], "the grandchild touched it"

        async def own_async():
            ar = krcore.AsyncRing(8)
            v = await ar.connect(ar.node_gid(), 0)
            m = await ar.register(64, RW)
            await ar.disconnect(v)
            ar.close()
        asyncio.run(own_async())
        a.close()  # the parent's: only forgotten here
    in_child(child)
    assert a.run(Batch().read(va, mr, 0, remote, 16, 8)) == [8], "the parent's ring was touched"
    assert a.unlisten(listener) == [] and listener.ended, "the parent's listen was touched"
    print("edges: a forked child refused its parent's ring, left it working, and used its own")


def a_child_of_an_async_parent_is_told_why():
    """The async worker is a thread, and a fork keeps none: a child of a process whose
    async rings ran is refused one, by name, and its blocking rings work."""
    def child():
        refused(lambda: krcore.AsyncRing(8), errno.EOPNOTSUPP, "forked")
        with krcore.Ring(8) as own:
            reads_back(own)
    in_child(child)
    print("edges: a child of an async parent refused an AsyncRing by name, used a Ring")


def a_coroutine_never_run_gives_regions_back():
    ar = krcore.AsyncRing(8)
    node = ar.node_gid()

    async def setup():
        v = await ar.pair(node, 4101, 4101)
        return v, await ar.register(64, Access.LOCAL_WRITE)
    vqp, mr = asyncio.run(setup())
    try:
        ar.run(Batch().recv(vqp, mr, 0, 64))  # no running loop: no awaitable made
        raise AssertionError("an awaitable was made with no event loop")
    except RuntimeError:
        pass
    mr.view[0] = 1  # the region is back, whole

    async def unlisten_ends_an_accept():
        listener = await ar.listen(7311)
        waiting = asyncio.ensure_future(ar.accept(listener))
        await asyncio.sleep(0.05)
        left = await asyncio.wait_for(ar.unlisten(listener), 5)
        assert left == [] and listener.ended, (left, listener)
        try:
            await waiting
            raise AssertionError("an accept outlived its listen")
        except krcore.KrcoreError as e:
            assert e.errno == errno.ECANCELED, e
        await ar.disconnect(vqp)
    asyncio.run(unlisten_ends_an_accept())
    print("edges: an awaitable never made gave its region back; unlisten ended an accept")


def timeouts_are_checked():
    with krcore.Ring(8) as ring:
        listener = ring.listen(7312)
        for bad in (float("inf"), float("nan"), -1.0, 1e300):
            try:
                ring.accept(listener, timeout=bad)
                raise AssertionError(f"timeout {bad} taken")
            except ValueError:
                pass
        ring.unlisten(listener)
    print("edges: timeouts past a Duration, negative or not a number refused")


a, va, mr, remote = handles_stay_with_their_ring()
with a:
    a_child_leaves_the_parent_alone_and_has_its_own(a, va, mr, remote)
a_coroutine_never_run_gives_regions_back()
a_child_of_an_async_parent_is_told_why()
timeouts_are_checked()
print("python edges: ok")
