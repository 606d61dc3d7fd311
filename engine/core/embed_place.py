"""Where an embedding request runs (issue 35): plain Python over plain data.

An embedding is prefill only: one pass of an encoder over the texts, no
decode. It goes to a serving lane, preferring one where no decode is running
(on a machine with a GPU and a CPU lane: whichever is not streaming answers,
so chats keep their speed), then the one with the least work queued ahead of
it (decoding rows, prefills and embedding tokens waiting), then the GPU.
The reason is what the Decisions tab shows. There it runs in slices between
the lane's steps (`SlicePace`, `slice_rows`; issue 47)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EmbedLaneView:
    name: str
    kind: str  # "gpu" / "cpu" (the role the router sees)
    decoding: int  # rows in its decode batch
    waiting: int  # requests prefilling or waiting on it
    queued_tokens: int  # embedding tokens already queued on it


def place_embedding(lanes: list[EmbedLaneView], tokens: int) -> tuple[str, str]:
    """(lane name, why) for an embedding request of `tokens` tokens."""
    if not lanes:
        raise ValueError("no lane serves")

    def key(lane: EmbedLaneView):
        return (lane.decoding > 0, lane.decoding + lane.waiting,
                lane.queued_tokens, lane.kind != "gpu", lane.name)

    best = min(lanes, key=key)
    if len(lanes) == 1:
        why = "the only lane"
    elif best.decoding == 0 and any(lane.decoding for lane in lanes):
        busy = ", ".join(lane.name.upper() for lane in lanes if lane.decoding)
        why = f"no decode running there ({busy} streaming answers)"
    elif best.decoding == 0:
        why = "every lane idle: " + ("the GPU" if best.kind == "gpu" else "the least queued")
    else:
        why = f"the least busy lane ({best.decoding} answers streaming)"
    return best.name, f"embedding {tokens:,} tokens: {why}"


@dataclass
class SlicePace:
    """How much embedding work a lane runs between two of its steps (issue
    47): one slice of at most `budget()` padded tokens (a slice holds at
    least one input, whatever its length). While the lane has chat work, a
    slice lasts about as long as its last step, so the streams keep half the
    lane's time; while it has none, about `idle_s`, so a Stop, a cancel or a
    new chat acts soon. Both within (floor, cap) tokens; the rate is learned
    from each slice's time."""

    busy: tuple[int, int] = (128, 2048)  # padded tokens, while chat work runs
    idle: tuple[int, int] = (1024, 8192)  # while none does
    idle_s: float = 0.25
    tps: float | None = None  # padded tokens a second through the encoder, measured

    def budget(self, busy: bool, step_s: float | None) -> int:
        floor, cap = self.busy if busy else self.idle
        target = (step_s or 0.0) if busy else self.idle_s
        if self.tps is None or target <= 0:
            return floor
        return int(min(max(self.tps * target, floor), cap))

    def learn(self, tokens: int, seconds: float) -> None:
        if tokens > 0 and seconds > 0:
            rate = tokens / seconds
            self.tps = rate if self.tps is None else 0.7 * self.tps + 0.3 * rate


def slice_rows(lengths: list[int], budget: int) -> int:
    """How many of the inputs left (`lengths`, shortest first) the next slice
    takes: as many as fit `budget` padded to the longest, at least one."""
    n = 1
    while n < len(lengths) and lengths[n] * (n + 1) <= budget:
        n += 1
    return n
