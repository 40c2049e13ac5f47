"""krcore from asyncio: two rings of this node paired, a RECV awaited while the other
ring's SEND is, eight READs each in its own coroutine at once, and a RECV given up on
(asyncio.wait_for) after which the ring goes on: the next message goes to the RECV
given up on, the one after to a fresh one. In the guest, after `make python`:

    target/pyvenv/bin/python3 uring-lib/python/examples/async_messages.py
"""
import asyncio

import krcore

LOCAL = krcore.Access.LOCAL_WRITE


async def exchange(a, va, inbox, b, vb, note, text):
    """`text` from b to a: a's RECV and b's SEND awaited together."""
    note.view[:len(text)] = text
    got, sent = await asyncio.gather(
        a.run(krcore.Batch().recv(va, inbox, 0, 64)),
        b.run(krcore.Batch().send(vb, note, 0, len(text))))
    assert got[0] == len(text) and sent[0] == len(text), (got, sent)
    assert bytes(inbox.view[:len(text)]) == text, bytes(inbox.view[:len(text)])


async def main():
    with krcore.Ring(16) as ring_a, krcore.Ring(16) as ring_b:
        a, b = krcore.AsyncRing(ring_a), krcore.AsyncRing(ring_b)
        node = a.node_gid()
        va = await a.pair(node, 71, 72)
        vb = await b.pair(node, 72, 71)
        inbox = await a.register(64, LOCAL)
        note = await b.register(64, krcore.Access(0))
        await exchange(a, va, inbox, b, vb, note, b"hello!")

        # Eight READs of this node's own table, one coroutine each, at once.
        table = await a.register(4096, LOCAL | krcore.Access.REMOTE_READ)
        table.view[:] = bytes(i % 251 for i in range(4096))
        v0 = await a.connect(node, 0)
        remote = await a.import_mr(v0, table.export())
        bufs = [await a.register(64, LOCAL) for _ in range(8)]
        done = await asyncio.gather(*(
            a.run(krcore.Batch().read(v0, bufs[k], 0, remote, 64 * k, 64)) for k in range(8)))
        assert all(d == [64] for d in done), done
        for k, buf in enumerate(bufs):
            assert bytes(buf.view) == bytes(table.view[64 * k:64 * (k + 1)]), k

        # A RECV given up on after 200 ms: it stays posted, takes the next message into
        # its region (which went with it: parked in the ring until the RECV completes),
        # and the ring goes on.
        # The loop runs on meanwhile: a ticker counts its turns.
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticking = asyncio.create_task(ticker())
        try:
            await asyncio.wait_for(a.run(krcore.Batch().recv(va, inbox, 0, 64)), 0.2)
            raise AssertionError("a RECV with no message completed")
        except asyncio.TimeoutError:
            pass
        ticking.cancel()
        assert ticks >= 10, f"the event loop ran {ticks} times in 200 ms"
        note.view[:6] = b"later!"
        sent = await b.run(krcore.Batch().send(vb, note, 0, 6))
        assert sent == [6], sent
        fresh = await a.register(64, LOCAL)
        await exchange(a, va, fresh, b, vb, note, b"third!")
        try:
            inbox.view
            raise AssertionError("a given-up region's memory was reachable")
        except BufferError:
            pass
        await a.disconnect(v0)
        print("python async: READs gathered, messages exchanged, a RECV given up on: ok")


asyncio.run(main())
