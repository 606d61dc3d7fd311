"""The routing timeline's record: a row per chat (or API client), each
request a track of segments (its phases on its lanes, with why the router
put it there). Qt-free; app/scheduler/timeline_view.py draws it. Times are
`time.monotonic()` seconds, as engine events carry them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_TRACKS = 300


@dataclass(slots=True)
class Segment:
    # "prefill", "decode", "restore" (KV read back from disk, lane "disk"), or
    # "tool" (a chat waiting on a tool call: asked, then run; lane "tool")
    phase: str
    lane: str
    start: float
    end: float | None = None
    reason: str = ""  # why the router put it there
    images: int = 0  # a prefill that encodes images: "prefill (2 images)"


@dataclass(slots=True)
class Track:
    """One request."""

    request_id: str
    label: str
    row: str  # the row it is drawn on: its chat, or its API client
    segments: list[Segment] = field(default_factory=list)
    finished: str | None = None  # finish reason
    note: str = ""  # what the dock adds when it finishes (completion time, estimate)
    drafted: int = 0  # draft tokens verified for it, and of those accepted (issue 32)
    accepted: int = 0

    def close(self, at: float) -> None:
        if self.segments and self.segments[-1].end is None:
            self.segments[-1].end = at

    @property
    def start(self) -> float:
        return self.segments[0].start

    def end(self, now: float) -> float:
        return self.segments[-1].end or now


class Timeline:
    """Segments per request, built from Routed / Migrated / Finished events,
    grouped in rows: one per chat (a chat's requests follow each other)."""

    def __init__(self):
        self.tracks: dict[str, Track] = {}
        self.rows: dict[str, str] = {}  # row key -> label, in order of first request

    def routed(self, request_id: str, label: str, phase: str, lane: str, at: float,
               reason: str = "", row: str | None = None,
               restored: tuple[int, float] = (0, 0.0), images: int = 0) -> None:
        """`restored`: tokens read back from disk before this decision, and
        the seconds that took (drawn as a restore bar ending at `at`)."""
        track = self.tracks.get(request_id)
        if track is None:
            row = row or request_id
            track = self.tracks[request_id] = Track(request_id, label, row)
            while len(self.tracks) > MAX_TRACKS:
                self.tracks.pop(next(iter(self.tracks)))
            self.rows[row] = label  # the chat's latest title; rows keep their order
            live = {t.row for t in self.tracks.values()}
            self.rows = {k: v for k, v in self.rows.items() if k in live}
        if restored[0] and not track.segments:
            track.segments.append(Segment("restore", "disk", at - restored[1], at, reason=(
                f"restored {restored[0]:,} tokens from disk in {restored[1]:.2f} s")))
        if track.segments and track.segments[-1].phase == phase and \
                track.segments[-1].lane == lane and track.segments[-1].end is None:
            return
        track.close(at)
        track.segments.append(Segment(phase, lane, at, reason=reason, images=images))

    def tool_wait(self, row: str, label: str, tool: str, start: float, end: float,
                  reason: str) -> None:
        """A chat waited on a tool call (asking the user, then the call) from
        `start` to `end`: a bar on the chat's row between its answers."""
        key = f"tool:{row}:{start}"
        self.tracks[key] = Track(key, f"{label} · {tool}", row,
                                 [Segment("tool", "tool", start, end, reason)], finished="tool")
        self.rows.setdefault(row, label)
        while len(self.tracks) > MAX_TRACKS:
            self.tracks.pop(next(iter(self.tracks)))

    def migrated(self, request_id: str, to_lane: str, at: float, reason: str = "") -> None:
        track = self.tracks.get(request_id)
        if track is not None:
            track.close(at)
            track.segments.append(Segment("decode", to_lane, at, reason=reason))

    def finished(self, request_id: str, reason: str, at: float, note: str = "",
                 drafted: int = 0, accepted: int = 0) -> None:
        track = self.tracks.get(request_id)
        if track is not None:
            track.close(at)
            track.finished = reason
            track.note = note
            track.drafted, track.accepted = drafted, accepted

    def start_time(self) -> float | None:
        starts = [t.start for t in self.tracks.values() if t.segments]
        return min(starts) if starts else None

    @property
    def live(self) -> bool:
        return any(t.finished is None for t in self.tracks.values())

    def row_tracks(self) -> list[tuple[str, list[Track]]]:
        """(label, its requests) per row, in row order."""
        by_row: dict[str, list[Track]] = {key: [] for key in self.rows}
        for track in self.tracks.values():
            if track.segments and track.row in by_row:
                by_row[track.row].append(track)
        return [(self.rows[key], tracks) for key, tracks in by_row.items()]
