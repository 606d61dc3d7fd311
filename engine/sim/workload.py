"""A multi-tab chat workload: tabs of multi-turn conversations with a shared
system prompt, user think time, new tabs arriving and occasional long pastes."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Turn:
    user_tokens: int
    answer_tokens: int
    think_s: float  # pause before this turn is sent (after the previous answer)


@dataclass(slots=True, frozen=True)
class Tab:
    tab_id: str
    start_s: float
    turns: tuple[Turn, ...]


def chat_workload(n_tabs: int, seed: int = 0, think_mean_s: float = 6.0,
                  arrival_window_s: float = 20.0, turns: tuple[int, int] = (3, 6),
                  paste_probability: float = 0.12, paste_tokens: int = 900,
                  answer_tokens: tuple[int, int] = (80, 260)) -> list[Tab]:
    """Deterministic for a seed. Long pastes are prompts of `paste_tokens`."""
    rng = random.Random(seed)
    tabs = []
    for i in range(n_tabs):
        tab_turns = []
        for _ in range(rng.randint(*turns)):
            user = paste_tokens if rng.random() < paste_probability else rng.randint(15, 120)
            tab_turns.append(Turn(user, rng.randint(*answer_tokens),
                                  rng.expovariate(1.0 / think_mean_s)))
        tabs.append(Tab(f"tab{i}", rng.uniform(0, arrival_window_s), tuple(tab_turns)))
    return tabs
