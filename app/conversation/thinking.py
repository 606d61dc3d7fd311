"""How a reasoning model's thinking shows in a chat: while it thinks, its
thoughts stream under "Thinking…"; once the answer starts they fold into one
line, "▸ Thought for 4.2 s", that opens them again (indented, muted)."""

from __future__ import annotations


def title(seconds: float | None, answered: bool) -> str:
    if not answered and seconds is None:
        return "Thinking…"
    return f"Thought for {seconds:.1f} s" if seconds is not None else "Thought"


def live(reasoning: str, answer: str, seconds: float | None) -> str:
    """The streaming answer's Markdown: the thoughts until the answer starts."""
    if not answer:
        return f"*{title(None, False)}*\n\n{reasoning.strip(chr(10))}"
    return f"*▸ {title(seconds, True)}*\n\n{answer}"


def paragraphs(reasoning: str) -> list[str]:
    """The thoughts' paragraphs, as plain text (shown indented and muted)."""
    return [p.strip() for p in reasoning.split("\n\n") if p.strip()]
