"""The package's plain Python types, which its Rust part (`krcore._krcore`) builds
results and errors from: reasons, opcodes and rights as enums, the errors, a
completion, an exported region's descriptor."""
import collections
import enum
import os

from . import _krcore

Reason = enum.IntEnum("Reason", _krcore.REASONS)
Reason.__doc__ = "Why the kernel refused or failed an operation (Rust's `Reason`)."
Opcode = enum.IntEnum("Opcode", _krcore.OPCODES)
Opcode.__doc__ = "An operation code (abi's `opcode::Opcode`)."
Access = enum.IntFlag("Access", _krcore.ACCESS)
Access.__doc__ = "Rights a memory region is registered with (Rust's `MrAccess`)."


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


class KrcoreTimeout(KrcoreError, TimeoutError):
    """A bounded wait ran out (ETIME): a KrcoreError that `except TimeoutError`
    catches, as a socket's timeout is."""


class Completion(int):
    """A successful operation's result: its `res` (an int: bytes moved, or a handle) and
    its `aux` (a RECV's immediate data), as the CQE had them."""

    def __new__(cls, res, aux):
        c = super().__new__(cls, res)
        c.aux = aux
        return c

    def __repr__(self):
        return f"Completion(res={int(self)}, aux={self.aux:#x})"


MrDescriptor = collections.namedtuple("MrDescriptor", ["descriptor", "addr", "len"])
MrDescriptor.__doc__ = """An exported region as its owner hands it to a peer, in the order
and with the names of Rust's `MrDescriptor` (`d._asdict()` is its JSON): the
kernel-issued descriptor, the start address, the length. A peer may import a sub-range
by narrowing `addr` and `len` (`d._replace(len=64)`)."""
