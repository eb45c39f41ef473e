"""The few frames of the mds protocol the memory benchmarks send by hand, postcard-encoded.

Kept beside the scripts that import it (`sys.path` is the bench directory): a raw client is
what those benchmarks are about, so they cannot use the client library.
"""
import os
import struct


def varint(n):
    """An unsigned LEB128 varint, postcard's integer encoding."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def frame(payload):
    """A frame: the payload's length as 4 big-endian bytes, then the payload."""
    return struct.pack(">I", len(payload)) + payload


# Credentials uid 0, gid 0, no supplementary groups.
CRED = varint(0) + varint(0) + varint(0)


def request(xid, op, acked_xid=0):
    """A Request: its xid, the encoded operation, the acknowledged watermark, root's
    credentials and no replay."""
    return frame(varint(xid) + op + varint(acked_xid) + CRED + b"\0")


def connect(version, identity=None):
    """CONNECT (xid 1) at protocol `version` for `identity` (random when None); from
    version 11 on, with reads moving atimes relatime-style (`Atime` 0), from version 12 on
    answered as the server's `--ack` says (`AckAsked` 0)."""
    if identity is None:
        identity = int.from_bytes(os.urandom(7), "big") + 1
    atime = varint(0) if version >= 11 else b""
    ack = varint(0) if version >= 12 else b""
    return request(1, varint(0) + varint(version) + varint(identity) + atime + ack)


def getattr_(xid, ino, acked_xid=0):
    """GETATTR of `ino`."""
    return request(xid, varint(5) + varint(ino), acked_xid)


def readdir(xid, ino, max_bytes=1024):
    """READDIR of `ino` from its first entry, pages of at most `max_bytes`."""
    return request(xid, varint(7) + varint(ino) + b"\0" + varint(max_bytes))


def open_(xid, ino, handle, acked_xid=0, version=8):
    """OPEN of `ino` to read under `handle` (not a reopen), as protocol `version` encodes it:
    OpenFlags has four flags until version 7 and five (`exec` last) from version 8."""
    # read; not write, truncate, append (or exec)
    flags = b"\1\0\0\0" if version < 8 else b"\1\0\0\0\0"
    return request(xid, varint(22) + varint(ino) + varint(handle) + flags + b"\0", acked_xid)
