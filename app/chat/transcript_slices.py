"""A long chat rendered in slices: its newest messages at once, older ones
inserted above them a few milliseconds at a time, so the window keeps
answering while a 100,000-message chat opens. A part of Transcript
(app/chat/transcript.py), kept apart for size.

Why this shape (measured, benchmarks/RESULTS.md, 2026-12-05):
- A message costs ~0.5 ms to render (Markdown, then layout): a 100k chat
  rendered at once froze the window for over a minute.
- Appending is cheap, but an insertion above costs Qt's layout a pass over
  every block below it (~7 µs a rendered message), once per edit. So a slice
  is rendered into a scratch document that has no layout and joins the view
  in one edit, and only the newest AUTO_MESSAGES come by themselves; older
  ones come a page at a time when asked ("Show earlier", scrolling to the
  top) or when scroll_to_message needs them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from PySide6.QtCore import QPoint, QRect, Qt, QTimer
from PySide6.QtGui import QTextCursor, QTextDocumentFragment
from PySide6.QtWidgets import QAbstractSlider, QLabel


class Starts(Mapping):
    """Message index -> where it starts in the document. A slice inserted
    above moves every message below it by the same amount: that is one
    number (`shift`) here, not 100,000 updated entries."""

    def __init__(self) -> None:
        self._raw: dict[int, int] = {}
        self.shift = 0

    def __getitem__(self, index: int) -> int:
        return self._raw[index] + self.shift

    def __iter__(self) -> Iterator[int]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def set(self, index: int, position: int) -> None:
        self._raw[index] = position - self.shift

    def clear(self) -> None:
        self._raw.clear()
        self.shift = 0


class Slices:
    # Rendered before show_messages returns: what a window shows, bounded by
    # count and by text (the work grows with both), never by a clock.
    SYNC_MESSAGES = 40
    SYNC_CHARS = 40_000
    SLICE_BUDGET_S = 0.005  # what one slice aims to cost the event loop
    SLICE_MIN, SLICE_MAX = 4, 64
    # Rendered without being asked; a page more each time the user asks.
    AUTO_MESSAGES = 1_000
    PAGE = 500
    BAR_HEIGHT = 24

    def _init_slices(self) -> None:
        self._shown: list[dict] = []  # the conversation shown (the tab's own list)
        self._footers: dict[int, str] = {}
        self._actions = self._versions = None
        self._first = 0  # the oldest message rendered
        self._floor = 0  # slices go down to this message by themselves
        # (message, its y in the view): scroll there once that message is rendered.
        self._pending_scroll: tuple[int, int] | None = None
        # What slices cost, learned as they run: rendering, a message; inserting, a slice.
        self._render_s, self._insert_s = 0.0005, 0.0
        self._slicer = QTimer(self)  # interval 0: the next slice after pending events
        self._slicer.setInterval(0)
        self._slicer.timeout.connect(self._slice)
        self.earlier = QLabel(self)  # above the view: how much is not rendered yet
        self.earlier.setTextFormat(Qt.RichText)  # our own text and link only
        self.earlier.setContentsMargins(10, 0, 10, 0)
        self.earlier.linkActivated.connect(lambda _: self.show_earlier())
        self.earlier.hide()
        bar = self.verticalScrollBar()
        bar.actionTriggered.connect(self._on_scroll_action)
        # At the end, the view follows the end: through slices inserted above,
        # a layout that finishes later, a resize, an answer being written.
        self._follow = True
        bar.valueChanged.connect(self._on_scroll_value)
        bar.rangeChanged.connect(lambda low, high: self._follow and bar.setValue(high))

    @property
    def first_rendered(self) -> int:
        """The oldest message in the document (0: all of them)."""
        return self._first

    @property
    def slicing(self) -> bool:
        """Whether older messages are still being inserted."""
        return self._slicer.isActive()

    def show_messages(self, messages: list[dict], footers: dict[int, str],
                      actions=None, versions=None) -> None:
        """Show the conversation (opening a chat, edit, regenerate): its newest
        messages now, older ones in slices. Cancels any slicing in progress.
        `actions(index, message)`: the (kind, label) links under a message;
        `versions(index)`: (which, of how many) versions it is, or None."""
        bar = self.verticalScrollBar()
        # Scrolled up: come back to the message at the top once it is rendered again.
        keep = None if bar.value() >= bar.maximum() - 4 else self._top_message()
        self._slicer.stop()
        self.document().clear()
        self.code_blocks = []
        self.images = []
        self.message_starts.clear()
        self._stream_start = None
        self._shown, self._footers = messages, footers
        self._actions, self._versions = actions, versions
        count = len(messages)
        first, chars = count, 0
        while first > 0 and count - first < self.SYNC_MESSAGES and (
                chars < self.SYNC_CHARS or first == count):
            first -= 1
            chars += len(messages[first].get("content") or "")
        self._first, self._floor = count, max(0, count - self.AUTO_MESSAGES)
        self._pending_scroll = keep
        if keep is not None:
            self._floor = min(self._floor, keep[0])
        self._insert_slice(first)
        bar.setValue(bar.maximum())
        self._after_slice()

    def show_earlier(self) -> None:
        """Render a page of older messages (the bar's link, or scrolling to the top)."""
        if self._first > 0:
            self._floor = max(0, min(self._floor, self._first) - self.PAGE)
            self._after_slice()

    def scroll_to_message(self, index: int) -> bool:
        """Scroll so that message `index` starts at the top of the view; one
        not rendered yet is rendered first (in slices), then scrolled to.
        False when there is no such message."""
        if index in self.message_starts:
            self._scroll_to(index, 0)
            return True
        if not 0 <= index < self._first:
            return False
        self._floor = min(self._floor, index)
        self._pending_scroll = (index, 0)
        self._after_slice()
        return True

    # ---- slicing -------------------------------------------------------------
    def _slice(self) -> None:
        """One slice: as many messages as fit the budget beside the last
        insertion's cost (the layout's pass over what is below, which grows
        with the document); at least SLICE_MIN, so that a deep page is not
        paid for by one pass a message."""
        if self._first <= self._floor:
            self._slicer.stop()
            return
        room = self.SLICE_BUDGET_S - self._insert_s
        count = max(self.SLICE_MIN, min(self.SLICE_MAX, int(room / self._render_s)))
        self._insert_slice(max(self._floor, self._first - count))
        self._after_slice()

    def _after_slice(self) -> None:
        if self._pending_scroll is not None and self._pending_scroll[0] in self.message_starts:
            self._scroll_to(*self._pending_scroll)
            self._pending_scroll = None
        self._show_bar()
        if self._first > self._floor:
            self._slicer.start()
        else:
            self._slicer.stop()

    def _insert_slice(self, start: int) -> None:
        """Render messages [start, first rendered) above those in the view, in
        one edit, keeping what the user sees where it is."""
        end = self._first
        if start >= end:
            return
        began = time.perf_counter()
        scratch = self._scratch()
        cursor = QTextCursor(scratch)
        starts = []
        for index in range(start, end):
            message = self._shown[index]
            starts.append(self._render(
                cursor, index, message, self._footers.get(index),
                self._actions(index, message) if self._actions else None,
                self._versions(index) if self._versions else None))
        document = self.document()
        below = not document.isEmpty()
        if below:  # the rule between this slice and the message below it
            self._separate(cursor)
        length = scratch.characterCount() - 1
        rendered = time.perf_counter()
        bar = self.verticalScrollBar()
        value, at_bottom = bar.value(), bar.value() >= bar.maximum() - 4
        layout = document.documentLayout()
        top = layout.blockBoundingRect(document.begin()).top()
        view = QTextCursor(document)
        view.beginEditBlock()  # one layout pass for the whole slice
        view.insertFragment(QTextDocumentFragment(scratch))
        view.endEditBlock()
        done = time.perf_counter()
        self._render_s = max(1e-5, (self._render_s + (rendered - began) / (end - start)) / 2)
        self._insert_s = (self._insert_s + done - rendered) / 2
        self.message_starts.shift += length
        for index, position in zip(range(start, end), starts):
            self.message_starts.set(index, position)
        if self._stream_start is not None:
            self._stream_start += length
            self._tail_start += length
        self._first = start
        if at_bottom:
            bar.setValue(bar.maximum())
        elif below:  # what was at the top moved down by the slice's height
            moved = layout.blockBoundingRect(document.findBlock(length)).top() - top
            bar.setValue(value + round(moved))

    def _scroll_to(self, index: int, offset: int) -> None:
        cursor = QTextCursor(self.document())
        cursor.setPosition(self.message_starts[index])
        bar = self.verticalScrollBar()
        bar.setValue(bar.value() + self.cursorRect(cursor).top() - offset)

    def _top_message(self) -> tuple[int, int] | None:
        """The message at the top of the view and where it starts in it."""
        if not self.message_starts:
            return None
        position = self.cursorForPosition(QPoint(0, 0)).position()
        low, high = self._first, self._first + len(self.message_starts) - 1
        while low < high:  # the last message that starts at or above `position`
            middle = (low + high + 1) // 2
            if self.message_starts.get(middle, position + 1) <= position:
                low = middle
            else:
                high = middle - 1
        cursor = QTextCursor(self.document())
        cursor.setPosition(self.message_starts.get(low, 0))
        return low, self.cursorRect(cursor).top()

    # ---- the bar above the view ----------------------------------------------
    def _show_bar(self) -> None:
        shown = self._first > 0
        if shown:
            loading = "loading… · " if self._first > self._floor else ""
            self.earlier.setText(f"{self._first:,} earlier messages · {loading}"
                                 f"<a href='earlier'>Show earlier</a>")
        if shown == self.earlier.isHidden():  # its own state, whether the view is shown or not
            self.earlier.setVisible(shown)
            self.setViewportMargins(0, self.BAR_HEIGHT if shown else 0, 0, 0)
            self._place_bar()

    def _place_bar(self) -> None:
        rect = self.contentsRect()
        self.earlier.setGeometry(QRect(rect.left(), rect.top(), rect.width(), self.BAR_HEIGHT))

    def resizeEvent(self, event):  # noqa: N802 (Qt naming)
        super().resizeEvent(event)
        self._place_bar()

    def _on_scroll_value(self, value: int) -> None:
        self._follow = value >= self.verticalScrollBar().maximum() - 4

    def _on_scroll_action(self, action: int) -> None:
        """Scrolling up past the oldest rendered message asks for older ones."""
        bar = self.verticalScrollBar()
        if (action != QAbstractSlider.SliderNoAction and bar.sliderPosition() <= bar.minimum()
                and self._first > 0 and self._first <= self._floor):
            self.show_earlier()
