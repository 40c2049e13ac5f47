"""krcore from Python: rings, virtual QPs, registered memory and batches of RDMA
operations, over the same C helpers (uring-lib/c/krcore.h) C programs use.

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
and the `reason`.
"""
import asyncio
import collections
import enum
import errno as _errno
import ipaddress
import os
import socket

from ._krcore import ffi, lib

__all__ = ["Access", "AsyncRing", "Batch", "Completion", "KrcoreError", "Listener",
           "MemoryRegion", "MrDescriptor", "Opcode", "Reason", "RemoteRegion", "Ring", "Vqp",
           "gid_of"]


def _members(prefix):
    return {n[len(prefix):]: getattr(lib, n) for n in dir(lib) if n.startswith(prefix)}


Reason = enum.IntEnum("Reason", _members("KRCORE_REASON_"))
Reason.__doc__ = "Why the kernel refused or failed an operation (abi's `cqe::Reason`)."
Opcode = enum.IntEnum("Opcode", _members("KRCORE_OPCODE_"))
Opcode.__doc__ = "An operation code (abi's `opcode::Opcode`)."
Access = enum.IntFlag("Access", _members("krcore_MrAccess_"))
Access.__doc__ = "Rights a memory region is registered with."


class KrcoreError(OSError):
    """An operation failed: `errno` and strerror as any OSError, plus krcore's
    `reason` (a Reason, or None when the failure had none) and the operation `op`."""

    def __init__(self, op, err, reason=None):
        self.op = op
        # A reason this package does not know yet (a newer module's) stays a number.
        try:
            self.reason = Reason(reason) if reason else None
        except ValueError:
            self.reason = reason
        msg = f"{op}: {os.strerror(err)}"
        if self.reason is not None:
            msg += f" ({getattr(self.reason, 'name', f'reason {reason}')})"
        super().__init__(err, msg)

    def __str__(self):
        return self.strerror


def gid_of(node):
    """The GID CONNECT names `node` by: an IPv4 address (or a host name, by its first
    IPv4 address) as its IPv4-mapped GID, an IPv6 address as itself, 16 bytes as they
    are."""
    if isinstance(node, (bytes, bytearray)) and len(node) == 16:
        return bytes(node)
    try:
        ip = ipaddress.ip_address(node)
    except ValueError:
        return _gid_of_infos(socket.getaddrinfo(node, None))
    return _gid_of_ip(ip)


async def _gid_of_async(node):
    """As `gid_of`, a host name resolved by the event loop (blocking nothing)."""
    if (isinstance(node, (bytes, bytearray)) and len(node) == 16) or _is_ip(node):
        return gid_of(node)
    return _gid_of_infos(await asyncio.get_running_loop().getaddrinfo(node, None))


def _is_ip(node):
    try:
        ipaddress.ip_address(node)
        return True
    except ValueError:
        return False


def _gid_of_infos(infos):
    """The GID of a name's first IPv4 address (the module serves RoCE v2 over IPv4),
    else of its first."""
    v4 = [i for i in infos if i[0] == socket.AF_INET]
    return _gid_of_ip(ipaddress.ip_address((v4 or infos)[0][4][0]))


def _gid_of_ip(ip):
    if ip.version == 4:
        ip = ipaddress.IPv6Address("::ffff:" + str(ip))
    return ip.packed


class Completion(int):
    """A successful operation's result: its `res` (an int: bytes moved, or a handle) and
    its `aux` (a RECV's immediate data), as the CQE had them."""

    def __new__(cls, res, aux):
        c = super().__new__(cls, res)
        c.aux = aux
        return c

    def __repr__(self):
        return f"Completion(res={int(self)}, aux={self.aux:#x})"


class Vqp:
    """A virtual QP: a ring's connection through a pooled kernel QP."""

    def __init__(self, handle, qpn, port=0):
        # port: a CONNECT's own (ephemeral unless it named one); an accepted one's, the
        # connecting peer's; 0 with no endpoint (service 0).
        self.handle, self.qpn, self.port = handle, qpn, port

    def __repr__(self):
        return f"Vqp(handle={self.handle}, qpn={self.qpn})"


class MemoryRegion:
    """Memory the ring allocated and registered. `view` is a writable memoryview of it;
    keep the object while operations use it (the ring keeps it alive until
    deregistered)."""

    def __init__(self, buf, size, handle, descriptor):
        self._buf, self.size, self.handle, self.descriptor = buf, size, handle, descriptor
        self.addr = int(ffi.cast("uintptr_t", buf))
        self.view = memoryview(ffi.buffer(buf, size))

    def export(self):
        """What a peer needs to import it (remote rights only): an MrDescriptor."""
        if not self.descriptor:
            raise KrcoreError("export", _errno.EINVAL)
        return MrDescriptor(self.descriptor, self.addr, self.size)


MrDescriptor = collections.namedtuple("MrDescriptor", ["descriptor", "addr", "len"])
MrDescriptor.__doc__ = """An exported region as its owner hands it to a peer, in the order
and with the names of Rust's `MrDescriptor` (`d._asdict()` is its JSON): the
kernel-issued descriptor, the start address, the length. A peer may import a sub-range
by narrowing `addr` and `len` (`d._replace(len=64)`)."""


class RemoteRegion:
    """A peer's memory imported for one virtual QP: the only remote range its
    operations may touch."""

    def __init__(self, handle, addr, length):
        self.handle, self.addr, self.len = handle, addr, length


class Batch:
    """Operations to run together with `Ring.run`, checked for range as they are added.
    Each method returns the batch, so calls chain."""

    def __init__(self):
        self.ops = []

    @staticmethod
    def _range(what, off, n, size):
        if n <= 0 or off < 0 or off + n > size:
            raise KrcoreError(what, _errno.ERANGE)

    def _one_sided(self, prep, vqp, local, off, remote, roff, n, *extra):
        self._range("local range", off, n, local.size)
        self._range("remote range", roff, n, remote.len)
        self.ops.append((local, lambda s: prep(s, vqp.handle, local.handle,
                                               ffi.cast("void *", local.addr + off), n,
                                               remote.handle, remote.addr + roff, *extra)))
        return self

    def read(self, vqp, local, off, remote, roff, n):
        """RDMA READ of `n` bytes at `roff` into `local` at `off`."""
        return self._one_sided(lib.krcore_prep_read, vqp, local, off, remote, roff, n)

    def write(self, vqp, local, off, remote, roff, n, imm=None):
        """RDMA WRITE of `n` bytes of `local` at `off` to `roff`; with `imm`, WRITE_IMM
        (it consumes the peer's oldest receive on its end)."""
        if imm is None:
            return self._one_sided(lib.krcore_prep_write, vqp, local, off, remote, roff, n)
        return self._one_sided(lib.krcore_prep_write_imm, vqp, local, off, remote, roff, n,
                               imm)

    def _atomic(self, prep, vqp, local, off, remote, roff, *args):
        self._range("local range", off, 8, local.size)
        self._range("remote range", roff, 8, remote.len)
        self.ops.append((local, lambda s: prep(s, vqp.handle, local.handle,
                                               ffi.cast("void *", local.addr + off),
                                               remote.handle, remote.addr + roff, *args)))
        return self

    def cas(self, vqp, local, off, remote, roff, compare, swap):
        """8-byte compare-and-swap at `roff`; the old value lands at `off`."""
        return self._atomic(lib.krcore_prep_cas, vqp, local, off, remote, roff, compare, swap)

    def faa(self, vqp, local, off, remote, roff, add):
        """8-byte fetch-and-add at `roff`; the old value lands at `off`."""
        return self._atomic(lib.krcore_prep_faa, vqp, local, off, remote, roff, add)

    def _two_sided(self, what, prep, vqp, local, off, n, *extra):
        self._range(what, off, n, local.size)
        self.ops.append((local, lambda s: prep(s, vqp.handle, local.handle,
                                               ffi.cast("void *", local.addr + off), n, *extra)))
        return self

    def send(self, vqp, local, off, n, imm=None):
        """SEND of `n` bytes of `local` at `off`, with immediate data if given."""
        if imm is None:
            return self._two_sided("local range", lib.krcore_prep_send, vqp, local, off, n)
        return self._two_sided("local range", lib.krcore_prep_send_imm, vqp, local, off, n, imm)

    def recv(self, vqp, local, off, n):
        """RECV of up to `n` bytes into `local` at `off`: waits for the peer's SEND."""
        return self._two_sided("local range", lib.krcore_prep_recv, vqp, local, off, n)


class Listener:
    """A service a ring listens on (`Ring.listen`); `Ring.accept` takes the peers
    that join it, `Ring.unlisten` ends it."""

    def __init__(self, service, tag):
        self.service, self.tag, self.ended = service, tag, False

    def __repr__(self):
        return f"Listener(service={self.service}, ended={self.ended})"


class Ring:
    """A krcore ring: `/dev/krcore` set up with `entries` submission entries, mapped.
    One thread at a time. Closing it (or leaving its `with`) releases everything the
    kernel holds for it."""

    def __init__(self, entries=64, sqpoll=False):
        self._r = ffi.new("struct krcore_ring *")
        flags = lib.krcore_SetupFlags_SQPOLL if sqpoll else 0
        e = lib.krcore_queue_init(entries, self._r, flags)
        if e < 0:
            raise KrcoreError("ring setup" + (" (is the module loaded?)"
                                              if e == -_errno.ENOENT else ""), -e)
        self._tag = 0
        self._regions = {}
        # Each listen's completions not yet accepted, by its tag.
        self._listens = {}

    def close(self):
        if self._r is not None and self._r.fd >= 0:
            lib.krcore_queue_exit(self._r)
            self._regions.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def fileno(self):
        """The device file's descriptor."""
        return self._r.fd

    def node_gid(self):
        """This node's address as CONNECT names it (its first RoCE v2 IPv4 GID)."""
        gid = ffi.new("uint8_t[16]")
        e = lib.krcore_node_gid(self._r, gid)
        if e < 0:
            raise KrcoreError("query devices", -e)
        return bytes(gid)

    # Every operation is written once, as a generator (below, `_g_*`): it yields what
    # it waits for, ("run", preps) for entries to run (it is sent their completions),
    # ("push", (preps, first)) for entries pushed tagged from `first` whose
    # completions go elsewhere, or ("next", tag) for a listen's next completion, and
    # returns its result. The blocking ring drives it with `_drive`; `AsyncRing` with
    # its own, awaiting.

    def _drive(self, gen, timeout_us=0):
        """Runs operation `gen`, waiting in the kernel."""
        try:
            want = next(gen)
            while True:
                kind, arg = want
                if kind == "run":
                    got = self._complete_all(arg, timeout_us)
                elif kind == "next":
                    got = self._next_of(arg, timeout_us)
                else:
                    while self._push(*arg, 0) == 0:
                        self._enter(timeout_us)
                        self._reap()
                    got = None
                want = gen.send(got)
        except StopIteration as done:
            return done.value

    def _push(self, preps, first, pushed=0):
        """Pushes `preps[pushed:]` as far as the SQ has room, tagged from `first`;
        returns how many are pushed now."""
        while pushed < len(preps):
            sqe = lib.krcore_get_sqe(self._r)
            if sqe == ffi.NULL:
                break
            preps[pushed](sqe)
            sqe.user_data = first + pushed
            pushed += 1
        return pushed

    def _tags(self, n):
        """`n` fresh tags; the first."""
        first = self._tag + 1
        self._tag += n
        return first

    def _complete_all(self, preps, timeout_us=0):
        """Runs the entries `preps` fill in; their completions (res, aux, reason, flags,
        port), in order. A wait bounded by `timeout_us` that passes raises TimeoutError
        (ETIME)."""
        first = self._tags(len(preps))
        got, pushed = {}, 0
        while len(got) < len(preps):
            pushed = self._push(preps, first, pushed)
            self._enter(timeout_us)
            for tag, c in self._reap():
                # Completions of waits given up on (a timeout) are dropped here.
                if first <= tag < first + len(preps):
                    got[tag] = c
        return [got[first + i] for i in range(len(preps))]

    def _enter(self, timeout_us):
        """Submits, and waits for a completion (at most `timeout_us`, if not 0)."""
        e = lib.krcore_enter(self._r, 1, timeout_us)
        if e == -_errno.ETIME:
            raise TimeoutError(_errno.ETIME, "wait: timer expired")
        if e < 0 and e != -_errno.EINTR:
            raise KrcoreError("enter", -e)

    def _reap(self):
        """Takes every ready completion: (tag, (res, aux, reason, flags, port)) for each, but
        a listen's, which wait in its queue for `accept`."""
        out = []
        cqe = ffi.new("struct krcore_Cqe **")
        while lib.krcore_peek_cqe(self._r, cqe) == 0:
            c = cqe[0]
            entry = (c.res, c.aux, c.reason, c.flags, c.port)
            if c.user_data in self._listens:
                self._listens[c.user_data].append(entry)
            else:
                out.append((c.user_data, entry))
            lib.krcore_cq_advance(self._r, 1)
        return out

    def _next_of(self, tag, timeout_us):
        """The oldest completion of listen `tag`, waiting for one."""
        queue = self._listens[tag]
        while not queue:
            self._enter(timeout_us)
            self._reap()
        return queue.pop(0)

    def _g_listen(self, service):
        tag = self._tags(1)
        self._listens[tag] = []
        # The entry's completions all come to its listen queue: pushed, then waited
        # for there.
        yield ("push", ([lambda s: lib.krcore_prep_listen(s, service)], tag))
        res, _, reason, flags, _ = yield ("next", tag)
        if res < 0:
            del self._listens[tag]
            raise KrcoreError("listen", -res, reason)
        return Listener(service, tag)

    def listen(self, service):
        """Listens on `service`: each peer node whose virtual QP connects to this node
        for it becomes a virtual QP of this ring, taken with `accept`. SERVICE_TAKEN
        when another ring of this node listens on it."""
        return self._drive(self._g_listen(service))

    def _g_accept(self, listener):
        if listener.ended:
            raise KrcoreError("accept: the listen has ended", _errno.ECANCELED)
        res, aux, reason, flags, port = yield ("next", listener.tag)
        if not flags & lib.krcore_CqeFlags_MORE:
            listener.ended = True
            del self._listens[listener.tag]
        if res < 0:
            raise KrcoreError("accept", -res, reason)
        return Vqp(res, aux & 0xffffffff, port), str(ipaddress.IPv4Address(aux >> 32))

    def accept(self, listener, timeout=None):
        """The next peer that joined `listener`'s service: (Vqp, its IPv4 address as a
        string); the Vqp's `port` is the peer's. `timeout` (seconds) bounds the wait
        (TimeoutError). A peer this ring had no room for raises KrcoreError
        (TABLE_FULL); the listen goes on."""
        us = 0 if timeout is None else max(1, int(timeout * 1e6))
        return self._drive(self._g_accept(listener), us)

    def _g_unlisten(self, listener):
        if not listener.ended:
            yield from self._g_control("unlisten",
                                       lambda s: lib.krcore_prep_unlisten(s, listener.service))
        left = []
        for res, aux, _, flags, port in self._listens.pop(listener.tag, []):
            if res >= 0 and flags & lib.krcore_CqeFlags_ACCEPT:
                peer = str(ipaddress.IPv4Address(aux >> 32))
                left.append((Vqp(res, aux & 0xffffffff, port), peer))
        listener.ended = True
        return left

    def unlisten(self, listener):
        """Ends a listen; the peers that joined and were not accepted yet, as `accept`
        gives them (theirs are this ring's virtual QPs)."""
        return self._drive(self._g_unlisten(listener))

    def _g_control(self, op, prep):
        """One control entry: its completion, raising if it failed."""
        (c,) = yield ("run", [prep])
        if c[0] < 0:
            raise KrcoreError(op, -c[0], c[2])
        return c

    def _g_connect(self, op, prep):
        res, aux, _, _, port = yield from self._g_control(op, prep)
        return Vqp(res, aux & 0xffffffff, port)

    @staticmethod
    def _connect_prep(gid, service):
        gid = ffi.new("uint8_t[16]", gid)
        return lambda s: lib.krcore_prep_connect(s, gid, service)

    @staticmethod
    def _pair_prep(gid, port, peer_port):
        gid = ffi.new("uint8_t[16]", gid)
        return lambda s: lib.krcore_prep_pair(s, gid, port, peer_port)

    def connect(self, node, service):
        """A virtual QP to `node` (an address, host name or GID), to the listen on port
        `service` there, from an ephemeral port of this node; service 0 (named, never
        assumed): no endpoint, one-sided requests only."""
        return self._drive(self._g_connect("connect", self._connect_prep(gid_of(node), service)))

    def pair(self, node, port, peer_port):
        """A virtual QP on this node's `port` paired with `peer_port` at `node`, whose end
        names them back (`pair(.., peer_port, port)`): neither side listens."""
        prep = self._pair_prep(gid_of(node), port, peer_port)
        return self._drive(self._g_connect("pair", prep))

    def _g_disconnect(self, vqp):
        yield from self._g_control("disconnect", lambda s: lib.krcore_prep_disconnect(s, vqp.handle))

    def disconnect(self, vqp):
        """Releases a virtual QP; its receives still posted come back CANCELLED."""
        return self._drive(self._g_disconnect(vqp))

    def _g_register(self, size, access):
        buf = ffi.new("uint8_t[]", size)
        res, aux, _, _, _ = yield from self._g_control(
            "register memory", lambda s: lib.krcore_prep_reg_mr(s, buf, size, int(access)))
        mr = MemoryRegion(buf, size, res, aux)
        self._regions[res] = mr
        return mr

    def register(self, size, access):
        """Allocates `size` bytes (zeroed) and registers them with `access` (Access)."""
        return self._drive(self._g_register(size, access))

    def _g_deregister(self, mr):
        yield from self._g_control("deregister memory",
                                   lambda s: lib.krcore_prep_dereg_mr(s, mr.handle))
        self._regions.pop(mr.handle, None)

    def deregister(self, mr):
        """Deregisters `mr` (revoking its export); its memory is freed with it."""
        return self._drive(self._g_deregister(mr))

    def _g_import_mr(self, vqp, export):
        descriptor, addr, length = MrDescriptor(*export)
        res, _, _, _, _ = yield from self._g_control("import memory", lambda s: lib.krcore_prep_import_mr(
            s, vqp.handle, addr, length, descriptor))
        return RemoteRegion(res, addr, length)

    def import_mr(self, vqp, export):
        """Imports a peer's export (an MrDescriptor) for `vqp` only."""
        return self._drive(self._g_import_mr(vqp, export))

    def _g_publish(self, mr, name, mode):
        yield from self._g_control("publish memory", lambda s: self._named(
            lib.krcore_prep_publish(s, mr.handle, name.encode(), mode)))

    def publish(self, mr, name, mode=0o600):
        """Publishes `mr` under `name` in the MetaServer, granting `mode` as a file's
        mode does (rw bits for this user, its group and others)."""
        return self._drive(self._g_publish(mr, name, mode))

    def _g_import_name(self, vqp, name, length, owner):
        def prep(s):
            e = self._named(lib.krcore_prep_import_name(s, vqp.handle, name.encode(), length))
            if owner is not None:
                lib.krcore_sqe_owned_by(s, owner)
            return e
        res, aux, _, _, _ = yield from self._g_control("import memory by name", prep)
        return RemoteRegion(res, aux, length)

    def import_name(self, vqp, name, length, owner=None):
        """Imports the first `length` bytes of the export published as `name`, with the
        rights its mode grants this user; with `owner`, only if that uid published it
        (`WRONG_OWNER` otherwise)."""
        return self._drive(self._g_import_name(vqp, name, length, owner))

    def _g_resolve_name(self, name):
        _, aux, _, _, _ = yield from self._g_control("resolve a name", lambda s: self._named(
            lib.krcore_prep_resolve_name(s, name.encode())))
        return str(ipaddress.IPv4Address(aux >> 32))

    def resolve_name(self, name):
        """The IPv4 address (a string) of the node that exports `name`."""
        return self._drive(self._g_resolve_name(name))

    def _g_connect_name(self, name, length, owner):
        node = yield from self._g_resolve_name(name)
        vqp = yield from self._g_connect("connect", self._connect_prep(gid_of(node), 0))
        try:
            region = yield from self._g_import_name(vqp, name, length, owner)
        except KrcoreError:
            yield from self._g_disconnect(vqp)
            raise
        return vqp, region

    def connect_name(self, name, length, owner=None):
        """Imports the first `length` bytes of `name` with no CONNECT first: (vqp,
        region), the virtual QP connected to the node that exports it (service 0).
        With `owner` (a uid), only if that user published it (WrongOwner otherwise)."""
        return self._drive(self._g_connect_name(name, length, owner))

    @staticmethod
    def _named(e):
        if e < 0:
            raise KrcoreError("export name", -e, lib.KRCORE_REASON_BAD_NAME)

    @staticmethod
    def _g_run(batch):
        got = yield ("run", [prep for _, prep in batch.ops])
        return [KrcoreError("batch operation", -res, reason) if res < 0 else Completion(res, aux)
                for res, aux, reason, _, _ in got]

    def run(self, batch, timeout=None):
        """Runs `batch`; each operation's result in order: a Completion (an int, the
        bytes moved, with the CQE's `aux`), or the KrcoreError it failed with. `timeout`
        (seconds) bounds each wait."""
        us = 0 if timeout is None else max(1, int(timeout * 1e6))
        return self._drive(self._g_run(batch), us)


class AsyncRing:
    """A `Ring` driven from asyncio, as the Rust library's `AsyncRing` is from tokio.

    The event loop watches the ring's descriptor, which is readable while completions
    are ready, so a waiting coroutine holds no thread. Any number of its coroutines may
    be in flight at once, each getting its own completions. Every 10 ms a waiting
    coroutine submits again without waiting, as a blocking wait steps, so entries the
    module holds for its workers (a first contact with a node) go in. Host names are
    resolved by the event loop.

    Cancelling a coroutine (`asyncio.wait_for`, a task's `cancel`) abandons its
    entries: they still run, and their completions are dropped as they come. Their
    memory stays registered with the ring (and alive) until deregistered: deregister
    a region only once nothing abandoned can still use it. To give up on receives,
    disconnect their virtual QP.
    """

    SLICE = 0.010

    def __init__(self, ring):
        self.ring = ring
        # Completions some coroutine waits for, by tag; tags nobody waits for any more.
        self._done = {}
        self._abandoned = set()
        self._waiters = []
        self._watching = False

    def _reap(self):
        for tag, c in self.ring._reap():
            if tag in self._abandoned:
                self._abandoned.discard(tag)
            else:
                self._done[tag] = c
        self._wake_all()

    def _wake_all(self):
        """Wakes every waiting coroutine (the descriptor became readable, or one of them
        reaped for all)."""
        waiters, self._waiters = self._waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)
        if self._watching:
            asyncio.get_running_loop().remove_reader(self.ring.fileno())
            self._watching = False

    async def _turn(self):
        """Until the descriptor is readable, another coroutine reaped, or a slice passed."""
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        self._waiters.append(woken)
        if not self._watching:
            loop.add_reader(self.ring.fileno(), self._wake_all)
            self._watching = True
        try:
            await asyncio.wait_for(woken, self.SLICE)
        except asyncio.TimeoutError:
            pass

    def _submit(self):
        e = lib.krcore_submit(self.ring._r)
        if e < 0 and e != -_errno.EINTR:
            raise KrcoreError("submit", -e)

    async def _complete_all(self, preps):
        r = self.ring
        first = r._tags(len(preps))
        tags = range(first, first + len(preps))
        pushed = 0
        try:
            while True:
                pushed = r._push(preps, first, pushed)
                self._submit()
                self._reap()
                if pushed == len(preps) and all(t in self._done for t in tags):
                    return [self._done.pop(t) for t in tags]
                await self._turn()
        except BaseException:
            # Given up (cancelled, or the submission failed): what was pushed still
            # completes, and is dropped as it comes.
            for t in tags[:pushed]:
                if self._done.pop(t, None) is None:
                    self._abandoned.add(t)
            raise

    async def _next_of(self, tag):
        queue = self.ring._listens[tag]
        while True:
            self._submit()
            self._reap()
            if queue:
                return queue.pop(0)
            await self._turn()

    async def _drive(self, gen):
        """Runs operation `gen` (see `Ring._drive`), awaiting."""
        try:
            want = next(gen)
            while True:
                kind, arg = want
                if kind == "run":
                    got = await self._complete_all(arg)
                elif kind == "next":
                    got = await self._next_of(arg)
                else:
                    while self.ring._push(*arg) == 0:
                        self._submit()
                        self._reap()
                        await self._turn()
                    got = None
                want = gen.send(got)
        except StopIteration as done:
            return done.value

    async def connect(self, node, service):
        """As `Ring.connect`."""
        gid = await _gid_of_async(node)
        return await self._drive(self.ring._g_connect("connect", Ring._connect_prep(gid, service)))

    async def pair(self, node, port, peer_port):
        """As `Ring.pair`."""
        gid = await _gid_of_async(node)
        return await self._drive(self.ring._g_connect("pair", Ring._pair_prep(gid, port, peer_port)))

    async def disconnect(self, vqp):
        """As `Ring.disconnect`."""
        return await self._drive(self.ring._g_disconnect(vqp))

    async def register(self, size, access):
        """As `Ring.register`."""
        return await self._drive(self.ring._g_register(size, access))

    async def deregister(self, mr):
        """As `Ring.deregister`."""
        return await self._drive(self.ring._g_deregister(mr))

    async def import_mr(self, vqp, export):
        """As `Ring.import_mr`."""
        return await self._drive(self.ring._g_import_mr(vqp, export))

    async def publish(self, mr, name, mode=0o600):
        """As `Ring.publish`."""
        return await self._drive(self.ring._g_publish(mr, name, mode))

    async def import_name(self, vqp, name, length, owner=None):
        """As `Ring.import_name`."""
        return await self._drive(self.ring._g_import_name(vqp, name, length, owner))

    async def resolve_name(self, name):
        """As `Ring.resolve_name`."""
        return await self._drive(self.ring._g_resolve_name(name))

    async def connect_name(self, name, length, owner=None):
        """As `Ring.connect_name`."""
        return await self._drive(self.ring._g_connect_name(name, length, owner))

    async def run(self, batch):
        """As `Ring.run`; bound it with `asyncio.wait_for`."""
        return await self._drive(Ring._g_run(batch))

    async def listen(self, service):
        """As `Ring.listen`."""
        return await self._drive(self.ring._g_listen(service))

    async def accept(self, listener):
        """As `Ring.accept`; bound it with `asyncio.wait_for` (a peer that joins after
        is the next accept's)."""
        return await self._drive(self.ring._g_accept(listener))

    async def unlisten(self, listener):
        """As `Ring.unlisten`."""
        return await self._drive(self.ring._g_unlisten(listener))
