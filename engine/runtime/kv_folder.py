"""The disk tier's folder as it is found, not as the tier wrote it: any
entry may be something else under a segment's name (a FIFO, a symbolic
link, a folder, a device), planted before the tier opens or while it
serves. An entry is read only if it is a regular file: opened without
following a link and without waiting for a writer (O_NOFOLLOW |
O_NONBLOCK), then fstat'ed before a byte is read, so a FIFO never blocks
a thread and a link never reads a file elsewhere. What is not a regular
file is skipped and never removed (the tier did not make it); only
regular files are ever removed."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import struct
import time
from pathlib import Path

from . import kv_file

_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
          | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_LINK_ERRORS = {errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.EISDIR}  # a link (BSDs: EMLINK)


class NotRegular(kv_file.KVFileError):
    """An entry that is not a regular file: skipped, never read or removed."""


def open_regular(path: Path):
    """`path` opened for reading (binary) if it is a regular file; else NotRegular."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError as e:
        if e.errno in _LINK_ERRORS:
            raise NotRegular(f"{path.name} is not a regular file") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(f"{path.name} is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, most: int) -> bytes:
    """The bytes of the regular file `path`; KVFileError when it holds more
    than `most` (never read whole: a file swapped for a huge one)."""
    with open_regular(path) as f:
        if os.fstat(f.fileno()).st_size > most:
            raise kv_file.KVFileError("a file larger than its segment can be")
        return f.read(most + 1)


def read_header(path: Path) -> tuple[dict, int, int, float]:
    """A segment file's JSON header without its payload: (header, the
    payload's offset, the file's size, its mtime). KVFileError (NotRegular
    included) when it is not one; OSError when it cannot be read."""
    magic = kv_file.MAGIC
    with open_regular(path) as f:
        info = os.fstat(f.fileno())
        head = f.read(len(magic) + 4)
        if len(head) < len(magic) + 4 or head[:len(magic)] != magic:
            raise kv_file.KVFileError("not a Tandem KV file")
        (size,) = struct.unpack("<I", head[len(magic):])
        if size > kv_file.MAX_HEADER:
            raise kv_file.KVFileError("truncated or damaged header")
        try:
            header = json.loads(f.read(size))
        except (ValueError, UnicodeDecodeError):
            raise kv_file.KVFileError("damaged header") from None
    if not isinstance(header, dict):
        raise kv_file.KVFileError("damaged header")
    return header, len(magic) + 4 + size, info.st_size, info.st_mtime


_HEX64 = re.compile(r"[0-9a-f]{64}")


def segment_header(path: Path, identity: str, block: int, layout: kv_file.KVLayout):
    """A segment file's header, read without its payload and checked against
    the model (its identity, block size and KV layout) and the file's size:
    (kv_file.Segment, its parent's chain hash, the file's size, mtime), or
    None when it is not one of this tier's segments (its bytes are checked
    when it is used). NotRegular for an entry that is not a regular file,
    FileNotFoundError for one gone meanwhile (another process evicted it)."""
    try:
        header, offset, size, mtime = read_header(path)
        start = header.get("start")
        segment = kv_file.check_header(header, identity, start, offset, size, layout)
    except (NotRegular, FileNotFoundError):
        raise
    except (OSError, kv_file.KVFileError):
        return None
    parent = header.get("parent")
    if not (segment.block == block and start >= 0 and start % block == 0
            and all(isinstance(h, str) and _HEX64.fullmatch(h) for h in segment.blocks)
            and isinstance(parent, str)
            and (parent == "" if start == 0 else _HEX64.fullmatch(parent) is not None)):
        return None
    return segment, parent, size, mtime


def is_regular(path: Path) -> bool:
    """Whether `path` itself (not what a link names) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def is_other(path: Path) -> bool:
    """Whether `path` exists and is not a regular file (a link, a folder, a
    pipe); False for one gone meanwhile (a write in progress renamed)."""
    try:
        return not stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def remove(path: Path) -> None:
    """Remove `path` if it is a regular file (a segment the tier wrote or
    found); anything else, or a failure, leaves it."""
    if is_regular(path):
        try:
            path.unlink()
        except OSError:
            pass


def stale(path: Path, age_s: float = 3600.0) -> bool:
    """A regular file last changed over `age_s` ago (a leftover temporary file)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and time.time() - info.st_mtime > age_s
