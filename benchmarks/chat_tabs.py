"""Play a multi-tab chat workload (engine/sim/workload.py) against a real
engine: one thread per tab, turns sent after their think time, each answer
capped. Shared by the real-lane benchmarks."""

from __future__ import annotations

import threading
import time

from engine import SamplingParams

WORDS = ("the river carries light past quiet towns while engineers measure every "
         "step of the batch and the cache keeps what was said").split()


def user_text(n_tokens: int, seed: int) -> str:
    return " ".join(WORDS[(seed + i) % len(WORDS)] for i in range(max(n_tokens, 3)))


def play(engine, tabs, max_answer: int) -> tuple[list, float]:
    """Run every tab's turns; returns (Finished of every answer, wall seconds)."""
    finished, lock = [], threading.Lock()

    def converse(tab):
        time.sleep(tab.start_s)
        messages = [{"role": "system", "content": "You are a helpful assistant."}]
        for k, turn in enumerate(tab.turns):
            time.sleep(turn.think_s * (k > 0))
            messages.append({"role": "user", "content": user_text(turn.user_tokens, k)})
            done = engine.submit(messages, SamplingParams(
                max_tokens=min(turn.answer_tokens, max_answer)), tab_id=tab.tab_id).result()
            with lock:
                finished.append(done)
            messages.append({"role": "assistant", "content": done.text})

    started = time.perf_counter()
    threads = [threading.Thread(target=converse, args=(t,)) for t in tabs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return finished, time.perf_counter() - started
