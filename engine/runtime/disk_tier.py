"""The disk tier under the RAM prefix cache (issue 33): KV of token prefixes
kept in files (kv_file.py) in one folder per model identity, so a chat
resumes warm after a restart.

- Segments tile a prefix from position 0: each holds positions
  [start, end) (block-aligned) after a parent segment (the one holding
  the block that ends at `start`). Every block is known by its chain hash
  (`chain_hashes`: one hash per block, each over the previous hash and the
  block's ids, so it names the whole prefix up to there, and hashing a
  prefix costs its length once). The in-memory `index` (a block's chain
  hash -> its segment) answers `match` in plain Python, without touching
  the disk: the core can ask under the director's lock, and reading is a
  separate phase (`read`). A match may end inside a segment: its first
  blocks are used (a conversation resent without its last answer).
- Writes happen on one background thread through a queue (kv_writer.py:
  `save` never blocks a lane: when `QUEUE` saves wait already, it is
  dropped and counted), at a lower priority than the lanes; a prefix
  is cut into segments of at most `segment_tokens` after what the disk has
  already; each file is written atomically.
  `close(timeout)` drains the queue within a bounded time. Each save
  records its owner (kv_owners.py); `forget(owner)` (a chat deleted),
  queued behind that chat's saves, removes what no one else uses.
- Nothing read from disk is trusted: an entry is opened only if it is a
  regular file (kv_folder.py: a FIFO, link or folder under a segment's name
  is skipped with one note, never opened or removed); the scan checks each
  header against the model (its identity and KV layout: layers, KV heads,
  head sizes) and `read` checks the whole file again (kv_file: checksum,
  shapes, values finite and not all zeros) before MLX sees it; a damaged,
  truncated, foreign, other-version or other-shape file is removed, noted,
  and the match ends before it. A full disk stops saving with one note.
  A byte budget evicts the least recently used segments (and those that
  chain from them) first."""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import kv_file, kv_folder, pauses
from .kv_owners import Owners
from .kv_writer import DiskWriter

SEGMENT_TOKENS = 1024  # at most this many positions per file: a 3k answer is ~3 files


def chain_hashes(tokens: list[int], block: int) -> list[str]:
    """One hash per whole block of `tokens`: block i's hash covers blocks
    0..i (each over the previous hash and the block's ids)."""
    out, h = [], b""
    ids = np.asarray(tokens[:len(tokens) - len(tokens) % block], dtype="<i4")
    for i in range(0, len(ids), block):
        h = hashlib.sha256(h + ids[i:i + block].tobytes()).digest()
        out.append(h.hex())
    return out


@dataclass(slots=True, eq=False)
class SegmentRef:
    """One file of the tier: positions [start, end), its blocks' chain
    hashes, after `parent` (the chain hash at `start`; "" from position 0)."""
    path: Path
    start: int
    end: int
    blocks: tuple[str, ...]
    parent: str
    nbytes: int
    used: float = field(default_factory=time.time)  # wall clock: files' times are


@dataclass(slots=True, frozen=True)
class DiskMatch:
    """The longest prefix on disk: its length and, in order, each file with
    the position up to which it is used; `hashes`: the asked tokens' chain
    hashes (computed once: `read` checks the files against them, a save
    names its new segments by them)."""
    num_tokens: int
    segments: tuple[tuple[SegmentRef, int], ...]
    hashes: tuple[str, ...] = ()


class DiskTier:
    """One model's KV files in `root` / identity-hash, each checked against
    the model's KV `layout` (kv_file.layout_of). Thread-safe."""

    def __init__(self, root: str | Path, identity: str, block_size: int,
                 budget_bytes: int, segment_tokens: int = SEGMENT_TOKENS, *,
                 layout: kv_file.KVLayout):
        self.identity, self.block_size, self.layout = identity, block_size, layout
        self.folder = Path(root) / hashlib.sha256(identity.encode()).hexdigest()[:24]
        self.owners = Owners(root)
        self.budget_bytes, self.segment_tokens = budget_bytes, segment_tokens
        self.index: dict[str, SegmentRef] = {}  # a block's chain hash -> a segment holding it
        self.segments: dict[Path, SegmentRef] = {}  # every file of the tier
        self.notes: list[str] = []  # for people: what was skipped, removed or stopped
        self._skipped: set[str] = set()  # entries that are not regular files (said once)
        self.written_bytes = 0
        self.saving = True  # False after a full disk
        self._lock = threading.Lock()
        self._writer = DiskWriter(self._write, self._release, self._stopped)
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._seen = -1  # the folder's mtime when last scanned
        self._scan()

    # ---- what is on disk ------------------------------------------------------------
    def refresh(self) -> None:
        """Another process sharing the folder (`tandem serve` beside the app)
        wrote or removed files since the last look: the index follows. One
        stat when nothing changed."""
        try:
            mtime = self.folder.stat().st_mtime_ns
        except OSError:
            return
        if mtime != self._seen:
            self._scan(keep_temporary=True)

    def _scan(self, keep_temporary: bool = False) -> None:
        """The index from the files' headers (their bytes are checked when
        read). Stray temporary files an hour old go (a younger one may be
        another process's write in progress); a file whose header cannot be
        read is removed with a note."""
        try:
            self._seen = self.folder.stat().st_mtime_ns
            paths = list(self.folder.iterdir())
        except OSError:
            return
        present = set(paths)
        with self._lock:
            gone = [ref for path, ref in self.segments.items() if path not in present]
        for ref in gone:  # removed by another process
            self._forget(ref)
        for path in paths:
            if path in self.segments:
                continue
            if path.name.startswith(".kv-"):
                if not keep_temporary and kv_folder.stale(path):
                    kv_folder.remove(path)
                elif kv_folder.is_other(path):  # (one renamed meanwhile is no news)
                    self._skip(path)
                continue
            if not path.name.endswith(".kv") or path.name in self._skipped:
                continue
            try:
                found = kv_folder.segment_header(path, self.identity, self.block_size,
                                                 self.layout)
            except kv_folder.NotRegular:
                self._skip(path)
                continue
            except FileNotFoundError:  # gone since the listing: nothing to say
                continue
            if found is None:
                kv_folder.remove(path)
                self.notes.append(f"Removed a saved KV file that could not be read ({path.name}).")
                continue
            segment, parent, size, mtime = found
            self._add(SegmentRef(path, segment.start, segment.start + segment.count,
                                 segment.blocks, parent, size, mtime))

    def _skip(self, path: Path) -> None:
        """An entry that is not a regular file: never opened, never removed
        (the tier did not make it), said once."""
        if path.name not in self._skipped:
            self._skipped.add(path.name)
            self.notes.append(f"Skipped {path.name} in the KV folder: not a regular file.")

    def _add(self, ref: SegmentRef) -> None:
        with self._lock:
            self.segments[ref.path] = ref
            for h in ref.blocks:
                self.index[h] = ref

    def match(self, tokens: list[int], limit: int | None = None,
              touch: bool = True) -> DiskMatch:
        """The longest prefix of `tokens[:limit]` the disk holds, as the
        segments chained from position 0 (plain Python, no disk access);
        `touch`: its segments count as just used (LRU)."""
        tokens = tokens[:limit] if limit is not None else tokens
        hashes = chain_hashes(tokens, self.block_size)
        b = self.block_size
        with self._lock:
            for last in range(len(hashes) - 1, -1, -1):  # the furthest block first
                if hashes[last] in self.index:
                    chain = self._chain(hashes, last)
                    if chain is not None:
                        for ref, _ in chain if touch else ():
                            ref.used = time.time()
                        return DiskMatch((last + 1) * b, chain, tuple(hashes))
        return DiskMatch(0, (), tuple(hashes))

    def _chain(self, hashes: list[str], last: int):
        """The segments holding blocks 0..last, in order with the position each
        is used to; None when an ancestor is missing."""
        b, chain = self.block_size, []
        ref, until = self.index[hashes[last]], (last + 1) * b
        while True:
            chain.append((ref, until))
            if ref.start == 0:
                return tuple(reversed(chain))
            if ref.start // b - 1 >= len(hashes) or hashes[ref.start // b - 1] != ref.parent:
                return None
            parent = self.index.get(ref.parent)
            if parent is None:
                return None
            ref, until = parent, ref.start

    def read(self, match: DiskMatch) -> tuple[int, list]:
        """The matched segments' KV, checked: (positions read, [(keys, values)]
        per layer, each (1, heads, n, head_dim)). A file that fails its
        check is removed and noted; the KV read ends before it."""
        import mlx.core as mx

        hashes = match.hashes
        b, parts, at = self.block_size, [], 0
        for ref, until in match.segments:
            try:
                data = kv_folder.read_regular(ref.path,
                                              self.layout.most_bytes(ref.end - ref.start))
                layers = kv_file.decode(data, self.identity, ref.start,
                                        hashes[ref.start // b:until // b], self.layout)
            except (OSError, kv_file.KVFileError) as e:
                self.discard(ref)  # what chains from it cannot be used either
                if isinstance(e, kv_folder.NotRegular):  # swapped in since the scan: left
                    self._skip(ref.path)
                else:
                    self.notes.append(f"Removed a saved KV file that could not be used ({e}).")
                break
            parts.append(layers)
            at = until
        if not parts:
            return 0, []
        layers = [(mx.concatenate([p[i][0] for p in parts], axis=2),
                   mx.concatenate([p[i][1] for p in parts], axis=2))
                  for i in range(len(parts[0]))]
        return at, layers

    def discard(self, ref: SegmentRef) -> None:
        """`ref` and the segments chained from it leave the index and the
        disk (a file that failed its checks, or KV a step failed on)."""
        gone = self._subtree(ref)
        for each in gone:
            self._forget(each)
        self.owners.drop([g.path for g in gone])

    def drop(self, tokens: list[int]) -> None:
        """The files holding `tokens`' prefix (and those chained after them)
        are removed: a step failed on that KV."""
        match = self.match(tokens, touch=False)
        if match.segments:
            self.discard(match.segments[0][0])
            self.notes.append("Removed saved KV that a step could not use.")

    def _forget(self, ref: SegmentRef, note: str | None = None) -> None:
        """`ref` leaves the index and the disk; a block another segment also
        holds (two saves of one prefix) stays findable through that one."""
        with self._lock:
            self.segments.pop(ref.path, None)
            others = list(self.segments.values())
            for h in ref.blocks:
                if self.index.get(h) is ref:
                    del self.index[h]
                    holder = next((r for r in others if h in r.blocks), None)
                    if holder is not None:
                        self.index[h] = holder
        kv_folder.remove(ref.path)
        if note:
            self.notes.append(note)

    # ---- saving ---------------------------------------------------------------------
    def save(self, tokens: list[int], layers, owner: str = "") -> bool:
        """Queue `tokens`' KV for the writer (kv_writer.py): `layers` is
        [(keys, values)] per layer, evaluated, at least len(tokens) positions,
        or an object whose `layers(start, end)` gives them for a span
        (prefix.BlockKV: the RAM cache's blocks, stitched on the writer's
        thread). False when it was dropped (the writer is behind, or saving
        stopped). `owner`: the chat (or API client) whose prefix it is."""
        return self.saving and self._writer.save(list(tokens), layers, owner)

    def forget(self, owner: str) -> None:
        """`owner` (a deleted chat) uses nothing any more: after the saves
        queued before this, the segments no one else uses are removed."""
        self._writer.forget(owner)

    @property
    def dropped(self) -> int:
        """Saves dropped because the writer was behind."""
        return self._writer.dropped

    def _stopped(self, e: Exception) -> None:
        """The writer died: nothing more is saved; said once."""
        self.notes.append(f"Saving KV to disk stopped: {type(e).__name__}: {e}")
        self.saving = False

    def _write(self, tokens: list[int], layers, owner: str = "") -> None:
        b = self.block_size
        end = len(tokens) - len(tokens) % b
        have = self.match(tokens[:end])
        hashes, at = have.hashes, have.num_tokens
        used = [ref.path for ref, _ in have.segments]
        while at < end and self.saving and not self._writer.hurry:
            pauses.at("saving-kv")
            stop = min(end, at + self.segment_tokens)
            part = (layers.layers(at, stop) if hasattr(layers, "layers")
                    else [(k[:, :, at:stop], v[:, :, at:stop]) for k, v in layers])
            blocks, parent = hashes[at // b:stop // b], hashes[at // b - 1] if at else ""
            data = kv_file.encode(self.identity, at, b, blocks, part, parent)
            name = f"{blocks[-1][:40]}_{at}_{stop}.kv"
            try:
                kv_file.write(self.folder / name, data)
            except OSError as e:
                self.saving = False
                self.notes.append(f"Saving KV to disk stopped: {e.strerror or e}.")
                return
            self._add(SegmentRef(self.folder / name, at, stop, tuple(blocks), parent,
                                 len(data)))
            self.written_bytes += len(data)
            used.append(self.folder / name)
            at = stop
        if used:
            self.owners.add(used, owner)
        self._evict()

    def _release(self, owner: str) -> None:
        for path in self.owners.release(owner):
            ref = self.segments.get(path)
            if ref is None:  # another model's folder (or gone): just the file
                kv_folder.remove(path)
                continue
            self.discard(ref)  # what chained from it could not be reached

    def _evict(self) -> None:
        """Least recently used segments go until the tier fits its budget;
        a segment's descendants go with it (they cannot be reached)."""
        with self._lock:
            refs = self._refs()
            total = sum(r.nbytes for r in refs)
            if total <= self.budget_bytes:
                return
            victims = sorted(refs, key=lambda r: r.used)
        gone_ids: set[int] = set()
        paths = []
        for ref in victims:
            if total <= self.budget_bytes:
                break
            if id(ref) in gone_ids:
                continue
            for gone in self._subtree(ref):
                gone_ids.add(id(gone))
                total -= gone.nbytes
                paths.append(gone.path)
                self._forget(gone)
        if paths:
            self.owners.drop(paths)

    def _refs(self) -> list[SegmentRef]:
        return list(self.segments.values())

    def _subtree(self, ref: SegmentRef) -> list[SegmentRef]:
        """`ref` and the segments that chain from it."""
        with self._lock:
            refs, out, todo = self._refs(), [ref], [ref]
            while todo:
                mine = set(todo.pop().blocks)
                for other in refs:
                    if other.parent in mine and other not in out:
                        out.append(other)
                        todo.append(other)
            return out

    def close(self, timeout: float = 10.0) -> bool:
        """Finish the queued saves within `timeout` seconds; True if all were.
        Past it, the writer stops after the file it writes (whole or absent),
        waited for as long again: no thread is left saving as the process ends."""
        return self._writer.close(timeout)

    def clear(self) -> int:
        """Remove every saved segment; returns the bytes freed."""
        with self._lock:
            refs = self._refs()
            self.index.clear()
            self.segments.clear()
        for ref in refs:
            kv_folder.remove(ref.path)
        self.owners.drop([r.path for r in refs])
        return sum(r.nbytes for r in refs)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(r.nbytes for r in self._refs())
