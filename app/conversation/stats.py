"""An answer's stats line: where it ran, how fast, how much was cached."""

from __future__ import annotations


def format_footer(done) -> str:
    """'prefill CPU -> decode CPU · 42 tokens · 15.1 tok/s · TTFT 220 ms · 32 cached'."""
    if done.reason == "error":
        return f"⚠ {done.error or 'generation failed'}"
    lanes = " → ".join(f"{phase} {lane.upper()}" for phase, lane in done.lanes) or "not started"
    bits = [lanes, f"{done.output_tokens} tokens"]
    if done.tokens_per_s:
        bits.append(f"{done.tokens_per_s:.1f} tok/s")
    if done.ttft_s is not None:
        bits.append(f"TTFT {done.ttft_s * 1000:.0f} ms")
    if getattr(done, "prefix_note", None):  # the model's caches cannot be reused as prefixes
        bits.append(f"{done.prompt_tokens} prompt tokens (no prefix cache for this model)")
    else:
        bits.append(f"{done.cached_tokens}/{done.prompt_tokens} prompt tokens cached")
    if getattr(done, "restored_tokens", 0):  # read back from disk (a chat resumed warm)
        bits.append(f"restored {done.restored_tokens:,} tokens from disk in "
                    f"{done.restore_s or 0:.2f} s")
    if getattr(done, "drafted", 0):
        bits.append(f"drafted {done.drafted}, accepted {done.accepted_drafts}")
    if done.reason == "cancelled":
        bits.append("stopped")
    elif done.reason == "length":
        bits.append("hit the length limit")
    return " · ".join(bits)
