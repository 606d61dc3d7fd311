"""A soak of the whole app on the real engine: many tabs, many turns, with
random stops, closed tabs, mode switches and regenerates. Used by
tests/test_soak.py (small) and benchmarks/soak.py (long).

After each round it checks what a user relies on: every request ended exactly
once, every open chat shows what is stored, the lanes hold no KV, and it
records memory (MLX active minus the prefix cache) and the thread count.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import dataclass, field

from PySide6.QtCore import QDeadlineTimer, QEventLoop, QTimer
from PySide6.QtWidgets import QApplication

WORDS = ("the quick brown fox jumps over a lazy dog while rivers run to the sea and "
         "numbers 0123456789 meet café emoji 🙂 tables chairs light").split()


@dataclass
class SoakStats:
    requests: int = 0
    stops: int = 0
    closes: int = 0
    switches: int = 0
    regenerates: int = 0
    memory_mib: list[float] = field(default_factory=list)  # per round: active - prefix
    threads: list[int] = field(default_factory=list)  # per round


class Ledger:
    """Counts each request's Queued and Finished events (engine threads)."""

    def __init__(self, engine):
        from engine import Finished, Queued

        self.queued: Counter = Counter()
        self.finished: Counter = Counter()
        self._lock = threading.Lock()
        self._kinds = (Queued, Finished)
        engine.subscribe(self._on_event)

    def _on_event(self, event) -> None:
        queued_kind, finished_kind = self._kinds
        with self._lock:
            if isinstance(event, queued_kind):
                self.queued[event.request_id] += 1
            elif isinstance(event, finished_kind):
                self.finished[event.request_id] += 1

    def problems(self) -> list[str]:
        with self._lock:
            ids = set(self.queued) | set(self.finished)
            return [f"{rid}: queued {self.queued[rid]}x, finished {self.finished[rid]}x"
                    for rid in ids if self.queued[rid] != 1 or self.finished[rid] != 1]


def wait_until(condition, timeout: float = 60.0) -> None:
    """Run the GUI thread's events until `condition()` holds, checked after
    each batch: what it waits for arrives as events there (the bridge's
    queued signals: tokens, Finished, each lane's LaneSample about ten times
    a second; a loaded engine's signal), so the loop blocks for the next
    event instead of sleeping, and a timer wakes it at the deadline."""
    app = QApplication.instance()
    deadline = QDeadlineTimer(int(timeout * 1000))
    alarm = QTimer()  # its timeout is an event: it ends the wait for more below
    alarm.setSingleShot(True)
    alarm.start(int(timeout * 1000))
    try:
        while not condition():
            if deadline.hasExpired():
                raise TimeoutError("soak: timed out waiting")
            app.processEvents(QEventLoop.AllEvents | QEventLoop.WaitForMoreEvents)
    finally:
        alarm.stop()


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12)))


def soak_round(window, rng: random.Random, stats: SoakStats, tabs: int = 4,
               turns: int = 3) -> None:
    """One round: `tabs` chats for `turns` turns each, with random trouble."""
    chats = [window.new_chat() for _ in range(tabs)]
    for _ in range(turns):
        for tab in chats:
            tab.max_tokens.setValue(rng.randint(4, 24))
            tab.composer.setPlainText(_text(rng))
            tab.send()
            stats.requests += 1
        for index, tab in enumerate(list(chats)):
            roll = rng.random()
            if roll < 0.2 and tab.is_streaming:
                window.stop(tab)
                stats.stops += 1
            elif roll < 0.35:
                chat_id = tab.chat_id
                window.close_tab(tab)  # mid-stream or not
                stats.closes += 1
                chats[index] = window.open_chat(chat_id)
            if rng.random() < 0.3:
                window.set_mode(rng.choice(["gpu-only", "hybrid"]))
                stats.switches += 1
        wait_until(lambda: not any(t.is_streaming for t in window.chat_tabs()))
        for tab in chats:
            if rng.random() < 0.25 and tab.conversation.messages and tab.conversation.messages[-1]["role"] == "assistant":
                tab.regenerate_answer(len(tab.conversation.messages) - 1)
                stats.regenerates += 1
                stats.requests += 1
        wait_until(lambda: not any(t.is_streaming for t in window.chat_tabs()))
    for tab in chats:
        window.close_tab(tab)


def check_and_measure(window, ledger: Ledger, stats: SoakStats) -> list[str]:
    """What went wrong after a round (empty: nothing), and this round's figures."""
    engine = window.engine
    wait_until(lambda: not ledger.problems() and all(
        lane.is_idle for lane in engine.lanes.values()), timeout=30)
    problems = ledger.problems()
    for tab in window.chat_tabs():
        shown = [(m["role"], m["content"]) for m in tab.conversation.messages]
        stored = [(m.role, m.content) for m in window.store.messages(tab.chat_id)]
        if shown != stored:
            problems.append(f"chat {tab.chat_id}: shown {shown!r} != stored {stored!r}")
    kv = sum(lane.kv_bytes for lane in engine.lanes.values())
    if kv:
        problems.append(f"lanes still hold {kv} bytes of KV")
    memory = engine.memory()
    stats.memory_mib.append((memory["active"] - memory["prefix_cache"]) / 2**20)
    stats.threads.append(threading.active_count())
    return problems
