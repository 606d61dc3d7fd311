"""The disk tier under the RAM prefix cache (issue 33): KV of token prefixes
kept in files (kv_file.py) in one folder per model identity, so a chat
resumes warm after a restart.

- Segments tile a prefix from position 0: each holds positions
  [start, end) (block-aligned), and is known by the chain hash of the
  tokens up to its end (`chain_hashes`: one hash per block, each over the
  previous hash and the block's ids, so hashing a prefix costs its length
  once). The in-memory `index` (chain hash at a segment's end -> its file)
  answers `match` in plain Python, without touching the disk: the core can
  ask under the director's lock, and reading is a separate phase (`read`).
- Writes happen on one background thread through a bounded queue (`save`
  never blocks a lane: when the queue is full the request is dropped and
  counted); a prefix is cut into segments of at most `segment_tokens`
  after what the disk has already; each file is written atomically.
  `close(timeout)` drains the queue within a bounded time.
- Never trust blindly: `read` checks every file (kv_file.check) before MLX
  sees it; a damaged, truncated, foreign or other-version file is removed,
  noted, and the match ends before it. A full disk stops saving with one
  note. A byte budget evicts the least recently used segments (and those
  that chain from them) first."""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import kv_file

SEGMENT_TOKENS = 1024  # at most this many positions per file: a 3k answer is ~3 files
QUEUE = 8  # saves waiting for the writer; more are dropped (and counted)


def chain_hashes(tokens: list[int], block: int) -> list[str]:
    """One hash per whole block of `tokens`: block i's hash covers blocks
    0..i (each over the previous hash and the block's ids)."""
    out, h = [], b""
    ids = np.asarray(tokens[:len(tokens) - len(tokens) % block], dtype="<i4")
    for i in range(0, len(ids), block):
        h = hashlib.sha256(h + ids[i:i + block].tobytes()).digest()
        out.append(h.hex())
    return out


@dataclass(slots=True)
class SegmentRef:
    """One file of the tier: positions [start, end), after `parent` (the
    chain hash at `start`; "" from position 0)."""
    path: Path
    start: int
    end: int
    parent: str
    nbytes: int
    used: float = field(default_factory=time.time)  # wall clock: files' times are


@dataclass(slots=True, frozen=True)
class DiskMatch:
    """The longest prefix on disk: its length and the files that hold it, in order."""
    num_tokens: int
    segments: tuple[SegmentRef, ...]


class DiskTier:
    """One model's KV files in `root` / identity-hash. Thread-safe."""

    def __init__(self, root: str | Path, identity: str, block_size: int,
                 budget_bytes: int, segment_tokens: int = SEGMENT_TOKENS):
        self.identity, self.block_size = identity, block_size
        self.folder = Path(root) / hashlib.sha256(identity.encode()).hexdigest()[:24]
        self.budget_bytes, self.segment_tokens = budget_bytes, segment_tokens
        self.index: dict[str, SegmentRef] = {}  # chain hash at a segment's end -> it
        self.notes: list[str] = []  # for people: what was skipped, removed or stopped
        self.dropped = 0  # saves dropped because the writer was behind
        self.written_bytes = 0
        self.saving = True  # False after a full disk
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue(QUEUE)
        self._writer: threading.Thread | None = None
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._scan()

    # ---- what is on disk ------------------------------------------------------------
    def _scan(self) -> None:
        """The index from the files' names (end hash, start, end, parent) and
        sizes; contents are checked when read. Stray temporary files go."""
        for path in self.folder.iterdir():
            if path.name.startswith(".kv-"):
                path.unlink(missing_ok=True)
                continue
            ref = _parse_name(path)
            if ref is None:
                continue
            self.index[path.name.split("_")[0]] = ref

    def match(self, tokens: list[int], limit: int | None = None) -> DiskMatch:
        """The longest prefix of `tokens[:limit]` the disk holds, as whole
        segments chained from position 0 (plain Python, no disk access)."""
        tokens = tokens[:limit] if limit is not None else tokens
        hashes = chain_hashes(tokens, self.block_size)
        b, found, at, parent = self.block_size, [], 0, ""
        with self._lock:
            while True:
                best = None
                for i in range(len(hashes) - 1, at // b - 1, -1):  # the furthest first
                    ref = self.index.get(hashes[i])
                    if ref is not None and ref.start == at and ref.parent == parent:
                        best = ref
                        break
                if best is None:
                    break
                best.used = time.time()
                found.append(best)
                at, parent = best.end, hashes[best.end // b - 1]
        return DiskMatch(at, tuple(found))

    def read(self, match: DiskMatch, tokens: list[int]) -> tuple[int, list]:
        """The matched segments' KV, checked: (positions read, [(keys, values)]
        per layer, each (1, heads, n, head_dim)). A file that fails its
        check is removed and noted; the KV read ends before it."""
        import mlx.core as mx

        parts, at = [], 0
        for ref in match.segments:
            try:
                layers = kv_file.decode(ref.path.read_bytes(), self.identity, tokens[:ref.end])
            except (OSError, kv_file.KVFileError) as e:
                self._forget(ref, f"Removed a saved KV file that could not be used ({e}).")
                break
            parts.append(layers)
            at = ref.end
        if not parts:
            return 0, []
        layers = [(mx.concatenate([p[i][0] for p in parts], axis=2),
                   mx.concatenate([p[i][1] for p in parts], axis=2))
                  for i in range(len(parts[0]))]
        return at, layers

    def _forget(self, ref: SegmentRef, note: str | None = None) -> None:
        with self._lock:
            for key, other in list(self.index.items()):
                if other is ref:
                    del self.index[key]
        ref.path.unlink(missing_ok=True)
        if note:
            self.notes.append(note)

    # ---- saving ---------------------------------------------------------------------
    def save(self, tokens: list[int], layers) -> bool:
        """Queue `tokens`' KV (`layers`: [(keys, values)] per layer, evaluated,
        at least len(tokens) positions) for the writer; False when it was
        dropped (the writer is behind, or saving stopped)."""
        if not self.saving:
            return False
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="kv-disk-writer",
                                            daemon=True)
            self._writer.start()
        try:
            self._queue.put_nowait((list(tokens), layers))
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._write(*item)
            except Exception as e:  # a writer that dies saves nothing more: say so once
                self.notes.append(f"Saving KV to disk stopped: {type(e).__name__}: {e}")
                self.saving = False
            finally:
                self._queue.task_done()

    def _write(self, tokens: list[int], layers) -> None:
        b = self.block_size
        end = len(tokens) - len(tokens) % b
        have = self.match(tokens[:end])
        hashes = chain_hashes(tokens[:end], b)
        at = have.num_tokens
        while at < end and self.saving:
            stop = min(end, at + self.segment_tokens)
            part = [(k[:, :, at:stop], v[:, :, at:stop]) for k, v in layers]
            data = kv_file.encode(self.identity, tokens[:stop], at, part)
            parent = hashes[at // b - 1] if at else ""
            name = f"{hashes[stop // b - 1]}_{at}_{stop}_{parent or 'root'}.kv"
            try:
                kv_file.write(self.folder / name, data)
            except OSError as e:
                self.saving = False
                self.notes.append(f"Saving KV to disk stopped: {e.strerror or e}.")
                return
            ref = SegmentRef(self.folder / name, at, stop, parent, len(data))
            with self._lock:
                self.index[hashes[stop // b - 1]] = ref
            self.written_bytes += len(data)
            at = stop
        self._evict()

    def _evict(self) -> None:
        """Least recently used segments go until the tier fits its budget;
        a segment's descendants go with it (they cannot be reached)."""
        with self._lock:
            total = sum(r.nbytes for r in self.index.values())
            if total <= self.budget_bytes:
                return
            victims = sorted(self.index.values(), key=lambda r: r.used)
        for ref in victims:
            if total <= self.budget_bytes:
                break
            for gone in self._subtree(ref):
                total -= gone.nbytes
                self._forget(gone)

    def _subtree(self, ref: SegmentRef) -> list[SegmentRef]:
        with self._lock:
            if ref not in self.index.values():
                return []
            key = next(k for k, r in self.index.items() if r is ref)
            out, todo = [ref], [key]
            while todo:
                parent = todo.pop()
                for k, r in self.index.items():
                    if r.parent == parent and r not in out:
                        out.append(r)
                        todo.append(k)
            return out

    def close(self, timeout: float = 10.0) -> bool:
        """Finish the queued saves within `timeout` seconds; True if all were."""
        if self._writer is None:
            return True
        deadline = time.monotonic() + timeout
        try:
            self._queue.put(None, timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Full:
            return False
        self._writer.join(max(deadline - time.monotonic(), 0.0))
        done = not self._writer.is_alive()
        self._writer = None if done else self._writer
        return done

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(r.nbytes for r in self.index.values())


def _parse_name(path: Path) -> SegmentRef | None:
    """A segment's file name: <end hash>_<start>_<end>_<parent hash | root>.kv."""
    parts = path.name[:-3].split("_") if path.name.endswith(".kv") else []
    if len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    start, end = int(parts[1]), int(parts[2])
    if not 0 <= start < end:
        return None
    try:
        size = path.stat().st_size
    except OSError:
        return None
    return SegmentRef(path, start, end, "" if parts[3] == "root" else parts[3], size,
                      os.path.getmtime(path))
