"""Where an embedding request runs (issue 35): plain Python over plain data.

An embedding is prefill only: one pass of an encoder over the texts, no
decode. It goes to a serving lane, preferring one where no decode is running
(on a machine with a GPU and a CPU lane: whichever is not streaming answers,
so chats keep their speed), then the one with the least work queued ahead of
it (decoding rows, prefills and embedding tokens waiting), then the GPU.
The reason is what the Decisions tab shows."""

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
