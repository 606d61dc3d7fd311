"""The stats line `tandem generate` prints on stderr after an answer: how it
ended, its tokens, times and lanes; for a tool loop (`--mcp`), its rounds
added up into one line."""

from __future__ import annotations

from dataclasses import replace

ENDED = {"stop": "finished", "length": "stopped: length", "cancelled": "stopped",
         "error": "failed"}


def stats_line(done, rounds: str = "") -> str:
    """One answer's (an engine `Finished`) stats; `rounds` a phrase put
    after how it ended ("3 rounds, 2 tool calls")."""
    tps = f"{done.tokens_per_s:.1f}" if done.tokens_per_s else "-"
    ttft = f"{done.ttft_s * 1000:.0f} ms" if done.ttft_s is not None else "-"
    lanes = " -> ".join(f"{phase} {lane}" for phase, lane in done.lanes)
    return (f"{ENDED.get(done.reason, done.reason)}{'; ' + rounds if rounds else ''}; "
            f"prompt {done.prompt_tokens} tokens ({done.cached_tokens} cached), "
            f"output {done.output_tokens} tokens, TTFT {ttft}, {tps} tokens/s, "
            f"total {done.e2e_s:.2f} s; {lanes}"
            + (f"; restored {done.restored_tokens} tokens from disk in {done.restore_s:.2f} s"
               if done.restored_tokens else "")
            + (f"; drafts {done.accepted_drafts}/{done.drafted} accepted" if done.drafted
               else "")
            + (f"; no drafts: {done.draft_note}" if done.draft_note else ""))


def matmul_note(engine, done) -> str:
    """'; CPU matmul: Tandem's kernels' where a CPU lane of quantized weights
    ran a phase of this answer, as the engine's memory plan says (issue 51);
    '' elsewhere (GPU lanes, remote lanes, float weights)."""
    plan = getattr(engine, "memory_plan", None)
    said = []
    for _, lane in done.lanes if plan is not None else ():
        try:
            what = plan.matmul(lane)
        except KeyError:  # a remote lane
            continue
        if what and what not in said:
            said.append(what)
    return f"; CPU matmul: {', '.join(said)}" if said else ""


def summed(answers: list):
    """A tool loop's answers (one `Finished` a round) as one: tokens, drafts
    and times added up (a round's prompt counted each round, its cached part
    too), TTFT the first round's, tokens/s over every round's decoding, the
    lanes each once in order, and how it ended the last round's."""
    first, last = answers[0], answers[-1]
    decoded = [(a.output_tokens - 1, a.time_per_output_token_s * (a.output_tokens - 1))
               for a in answers if a.time_per_output_token_s and a.output_tokens > 1]
    steps, seconds = sum(n for n, _ in decoded), sum(s for _, s in decoded)
    restored = [a for a in answers if a.restored_tokens]
    return replace(
        last, prompt_tokens=sum(a.prompt_tokens for a in answers),
        cached_tokens=sum(a.cached_tokens for a in answers),
        output_tokens=sum(a.output_tokens for a in answers), ttft_s=first.ttft_s,
        time_per_output_token_s=seconds / steps if steps and seconds else None,
        e2e_s=sum(a.e2e_s for a in answers),
        lanes=tuple(dict.fromkeys(lane for a in answers for lane in a.lanes)),
        restored_tokens=sum(a.restored_tokens for a in restored),
        restore_s=sum(a.restore_s or 0.0 for a in restored) if restored else None,
        drafted=sum(a.drafted for a in answers),
        accepted_drafts=sum(a.accepted_drafts for a in answers),
        draft_note=next((a.draft_note for a in answers if a.draft_note), None))
