#!/usr/bin/env python3
"""A server in Python that listens on a service and answers peers it never connected
to: LISTEN on SERVICE (a second ring's LISTEN must fail SERVICE_TAKEN), accept N peers
from any node, RECV one message from each on its own virtual QP (it must name the
address the accept reported), answer "echo: " and the message, UNLISTEN, DISCONNECT.
The clients are uring-lib/examples/listener.rs's (`listener client ADDR SERVICE ME`).

    target/pyvenv/bin/python3 uring-lib/python/examples/listener.py SERVICE N   # after `make python`
"""
import sys
import time

import krcore
from krcore import Access, Batch, KrcoreError, Reason


def echo(ring, vqp, mr, text):
    """SENDs "echo: TEXT" on `vqp`, retried while the peer has no receive posted."""
    msg = ("echo: " + text).encode()
    mr.view[:len(msg)] = msg
    until = time.monotonic() + 60
    while True:
        [res] = ring.run(Batch().send(vqp, mr, 0, len(msg)))
        if not isinstance(res, KrcoreError):
            return
        if res.reason != Reason.NO_RECEIVER or time.monotonic() > until:
            raise res


def main():
    service, n = int(sys.argv[1]), int(sys.argv[2])
    with krcore.Ring(64) as ring:
        listener = ring.listen(service)
        with krcore.Ring(8) as other:
            try:
                other.listen(service)
                raise SystemExit("a second ring's LISTEN was not refused")
            except KrcoreError as e:
                assert e.reason == Reason.SERVICE_TAKEN, e
        print(f"python: listening on service {service} for {n} peers")
        peers = [ring.accept(listener, timeout=120) for _ in range(n)]
        mr = ring.register(256, Access.LOCAL_WRITE)
        for vqp, peer in peers:
            print(f"python: accepted {peer} as {vqp}")
            [res] = ring.run(Batch().recv(vqp, mr, 0, 256))
            if isinstance(res, KrcoreError):
                raise res
            text = bytes(mr.view[:res]).decode()
            assert text == f"hello from {peer}:{vqp.port}", (peer, vqp.port, text)
            echo(ring, vqp, mr, text)
        assert ring.unlisten(listener) == [], "peers past the ones expected"
        for vqp, _ in peers:
            ring.disconnect(vqp)
    print("python listener: ok")


if __name__ == "__main__":
    main()
