"""The conversation view: messages rendered as Markdown, one document.

Built for long chats and hostile text:
- Each message is rendered on its own (a Markdown fragment inserted into the
  document: app/chat/markdown_fragment.py), so an unclosed code fence or a
  stray rule in one message cannot reshape the others, and a finished
  message is rendered once. While an answer streams, only that answer is
  re-rendered on each flush: the cost follows the answer, not the chat.
- A long chat opens with its newest messages only; older ones are inserted
  above them in slices that each take a few milliseconds, so opening a
  100,000-message chat never freezes the window (app/chat/transcript_slices.py).
- The app's own actions (Edit, Regenerate, Copy code) are links whose address
  carries a random per-view key. Text in a message (a model's answer, a paste)
  cannot know it, so its links can never trigger an action; they are offered
  to the user to open only when they are http or https (`open_requested`).
- Markdown never loads a resource: no remote images, no local files, and raw
  HTML in a message is shown as text. The only pictures are the thumbnails
  of images the user attached (issue 37), put in by the view itself from
  the chat's store, each a link (`image`) that opens it full size.
"""

from __future__ import annotations

import secrets

from PySide6.QtCore import Signal, QUrl
from PySide6.QtGui import (QFont, QImage, QTextBlockFormat, QTextCharFormat, QTextCursor,
                           QTextDocument, QTextFormat, QTextImageFormat)
from PySide6.QtWidgets import QTextBrowser

from app.chat import draft_tint, tool_blocks
from app.conversation import thinking
from app.conversation.attach_files import describe_record, split_message
from app.conversation.chat_images import describe as describe_image, records_of
from app.ui.highlight import CodeHighlighter
from app.ui.theme import is_dark
from app.chat.markdown_fragment import (InertDocument, fragment, json_block,
                                        paragraph_break, paragraph_format)
from app.chat.transcript_slices import Slices, Starts

# A message longer than this shows its start only (a 1 MB paste would take
# seconds to lay out); the whole text is kept, sent and copyable.
SHOWN_CHARS = 50_000
ACTION_SCHEME = "tandem"
SAFE_SCHEMES = ("http", "https")
THUMB_SHOWN = 160  # a thumbnail's longest side in the transcript, in pixels


class Transcript(Slices, QTextBrowser):
    """Emits `action(kind, index)` for the app's own links (kind: edit, regen,
    copy), `open_requested(url)` for an http(s) link in a message, and
    `refused(url)` for any other link."""

    action = Signal(str, int)
    open_requested = Signal(object)
    refused = Signal(object)
    tint_drafts = False  # View > Tint accepted drafts (draft_tint.py), for every view

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self._key = secrets.token_hex(16)
        self.setDocument(InertDocument(self))
        self.document().setDocumentMargin(10)
        # A read-only view never undoes; the undo stack would keep every
        # insertion of a long chat for nothing.
        self.document().setUndoRedoEnabled(False)
        self.highlighter = CodeHighlighter(self.document())
        # Copy links carry their block's index here; slices render out of
        # document order, so an index is where the block was appended.
        self.code_blocks: list[str] = []
        self.images: list[dict] = []  # image links' records, by link number (as code_blocks)
        self.thumbnails = None  # digest -> a thumbnail's PNG (the chat's store), or None
        self.message_starts = Starts()  # message index -> its document position
        self._stream_start: int | None = None  # where the streaming answer begins
        self._stable = 0  # how much of the streaming answer is rendered for good
        self._tail_start = 0  # where its paragraph being written begins
        self.anchorClicked.connect(self._on_anchor)
        self._init_slices()

    # ---- links ---------------------------------------------------------------
    def action_href(self, kind: str, index: int) -> str:
        """The address of one of the app's own links (only this view knows the key)."""
        return f"{ACTION_SCHEME}://{self._key}/{kind}/{index}"

    def _on_anchor(self, url) -> None:
        parts = url.path().strip("/").split("/")
        if (url.scheme() == ACTION_SCHEME and url.host() == self._key and len(parts) == 2
                and parts[1].isdigit()):
            self.action.emit(parts[0], int(parts[1]))
        elif url.scheme().lower() in SAFE_SCHEMES and url.host():
            self.open_requested.emit(url)
        else:
            self.refused.emit(url)

    def loadResource(self, kind, name):  # noqa: N802 (Qt naming)
        return None  # never fetch: not remote images, not local files

    # ---- rendering -----------------------------------------------------------
    @staticmethod
    def _scratch() -> QTextDocument:
        """A document without a layout for a slice to be rendered into (text
        inserted there costs no layout until the slice joins the view)."""
        return InertDocument()

    def add_message(self, index: int, message: dict, footer: str | None,
                    actions: list[tuple[str, str]] | None = None,
                    keep_scroll: bool = True, version: tuple[int, int] | None = None) -> None:
        """Append one finished message with its footer and action links
        ((kind, label); by default Edit under a question, Regenerate under an
        answer), after '‹ 2/3 ›' (links `prev` and `next`) when `version`."""
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        cursor = self._end_cursor()
        self.message_starts.set(index, self._render(cursor, index, message, footer, actions,
                                                    version))
        if keep_scroll and at_bottom:
            bar.setValue(bar.maximum())

    def replace_last(self, index: int, message: dict, footer: str | None,
                     actions: list[tuple[str, str]] | None = None,
                     version: tuple[int, int] | None = None) -> None:
        """Render the last message (`index`) again, in place: a tool call's
        block as its status changes (asked, running, its result)."""
        start = self.message_starts.get(index)
        if start is None or self._stream_start is not None:
            self.add_message(index, message, footer, actions, version=version)
            return
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        cursor = self._end_cursor()
        cursor.setPosition(start, QTextCursor.KeepAnchor)
        cursor.removeSelectedText()
        self._render(cursor, index, message, footer, actions, version, separate=False)
        if at_bottom:
            bar.setValue(bar.maximum())

    def _render(self, cursor: QTextCursor, index: int, message: dict, footer: str | None,
                actions: list[tuple[str, str]] | None,
                version: tuple[int, int] | None, separate: bool = True) -> int:
        """Write message `index` at `cursor` (the end of this view's document,
        or of a slice's); returns where it starts there."""
        if separate:
            self._separate(cursor)
        start = cursor.position()
        if message["role"] == "tool":  # outside text: plain, never Markdown
            tool_blocks.render(self, cursor, index, message, list(actions or []))
            return start
        user = message["role"] == "user"
        content = message["content"]
        files = (message.get("attachments") or []) if user else []
        if files:  # the words are shown; each file is one line (the model reads it all)
            content = split_message(content, files)[0]
        actions = list(actions) if actions is not None else (
            [("edit", "Edit")] if user else [("regen", "Regenerate")])
        if not user and message.get("format") == "json":
            content = json_block(content)
        if len(content) > SHOWN_CHARS:
            hidden = len(content) - SHOWN_CHARS
            content = (f"{content[:SHOWN_CHARS]}\n\n*… {hidden:,} more characters are not "
                       "shown here; the whole message is kept and sent.*")
            if not any(kind == "copymsg" for kind, _ in actions):
                actions.append(("copymsg", "Copy the whole message"))
        called = not user and not content and (message.get("tool") or {}).get("calls")
        body = self._with_copy_links(content) or (
            "*(calls a tool)*" if called else "*(nothing was written)*")
        reasoning = "" if user else message.get("reasoning") or ""
        if reasoning:  # a reasoning model's thoughts: one line that opens them
            self._render_thoughts(cursor, index, message, reasoning, bool(content))
            cursor.insertFragment(fragment(body if content else
                                           "*(no answer: it stopped while thinking)*"))
        else:
            cursor.insertFragment(fragment(f"**{'You' if user else 'Assistant'}**\n\n"
                                           + (body if content or not files else "")))
        self._tint(cursor.document(), start, cursor.position(), message.get("drafted"))
        for f in files:
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            cursor.insertText(f"File: {describe_record(f)}", QTextCharFormat())
        if user:
            self._render_images(cursor, records_of(message))
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        italic = QTextCharFormat()
        italic.setFontItalic(True)
        if version:
            which, count = version
            self._link(cursor, "prev", index, "‹", which > 1, italic)
            cursor.insertText(f" {which}/{count} ", italic)
            self._link(cursor, "next", index, "›", which < count, italic)
            cursor.insertText(" · ", italic)
        if footer:
            cursor.insertText(f"{footer} · ", italic)
        for number, (kind, label) in enumerate(actions):
            if number:
                cursor.insertText(" · ", italic)
            self._link(cursor, kind, index, label)
        cursor.setCharFormat(QTextCharFormat())
        return start

    def _render_images(self, cursor: QTextCursor, records: list[dict]) -> None:
        """A message's images: a row of thumbnails, each a link to the image
        full size; an image the store no longer has is named instead."""
        if not records:
            return
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        for record in records:
            png = self.thumbnails(record["digest"]) if self.thumbnails is not None else None
            image = QImage.fromData(png, "PNG") if png else QImage()
            if image.isNull():
                cursor.insertText(f"[image: {describe_image(record)} · not kept] ",
                                  QTextCharFormat())
                continue
            self.images.append(record)
            name = f"thumb:{record['digest']}"
            for document in {cursor.document(), self.document()}:  # a slice's and the view's
                document.addResource(QTextDocument.ImageResource, QUrl(name), image)
            scale = min(1.0, THUMB_SHOWN / max(image.width(), image.height()))
            fmt = QTextImageFormat()
            fmt.setName(name)
            fmt.setWidth(image.width() * scale)
            fmt.setHeight(image.height() * scale)
            fmt.setAnchor(True)
            fmt.setAnchorHref(self.action_href("image", len(self.images) - 1))
            fmt.setToolTip(describe_image(record))
            cursor.insertImage(fmt)
            cursor.insertText(" ", QTextCharFormat())

    def image_at(self, number: int) -> dict | None:
        """The record of image link `number`."""
        return self.images[number] if 0 <= number < len(self.images) else None

    def _render_thoughts(self, cursor: QTextCursor, index: int, message: dict,
                         reasoning: str, answered: bool) -> None:
        """'▸ Thought for 3 s' (a link that opens them), and when open the
        thoughts themselves: plain text, indented and muted."""
        opened = bool(message.get("thinking_open"))
        cursor.insertFragment(fragment("**Assistant**"))
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        self._link(cursor, "think", index, ("▾ " if opened else "▸ ")
                   + thinking.title(message.get("thinking_s"), answered))
        cursor.setCharFormat(QTextCharFormat())
        if opened:  # thoughts, not the answer
            indent = QTextBlockFormat()
            indent.setLeftMargin(18)
            muted = QTextCharFormat()
            muted.setForeground(self.palette().placeholderText())
            for paragraph in thinking.paragraphs(reasoning):
                cursor.insertBlock(indent, muted)
                cursor.insertText(paragraph, muted)
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())

    def _link(self, cursor: QTextCursor, kind: str, index: int, label: str,
              live: bool = True, plain: QTextCharFormat | None = None) -> None:
        """One of the app's own links (or, not `live`, its label as plain text)."""
        if not live:
            cursor.insertText(label, plain or QTextCharFormat())
            return
        link = QTextCharFormat()
        link.setAnchor(True)
        link.setAnchorHref(self.action_href(kind, index))
        link.setForeground(self.palette().link())
        link.setFontUnderline(True)
        if kind in ("prev", "next"):  # a one-glyph link: make it easy to hit
            link.setFontWeight(QFont.Bold)
            link.setFontPointSize(self.font().pointSizeF() * 1.4)
        cursor.insertText(label, link)

    def _tint(self, document, start: int, end: int, drafted: list[str] | None) -> None:
        if self.tint_drafts and drafted:
            draft_tint.tint(document, start, end, drafted, draft_tint.colour(is_dark()))

    def show_streaming(self, text: str, drafted: list[str] | None = None) -> None:
        """Show (or update) the answer being generated. Finished paragraphs are
        rendered once; each flush re-renders only the paragraph being written,
        so a flush costs the same in a long answer as in a short one.
        `drafted`: its accepted drafts' text, tinted when asked."""
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        cursor = self._end_cursor()
        if self._stream_start is None:
            self._stream_start = cursor.position()
            self._separate(cursor)
            cursor.insertFragment(fragment("**Assistant**"))
            self._stable = 0  # text[:_stable] is rendered for good
            self._tail_start = cursor.position()
        else:
            cursor.setPosition(self._tail_start)
            cursor.movePosition(QTextCursor.End, QTextCursor.KeepAnchor)
            cursor.removeSelectedText()
        split = paragraph_break(text, self._stable)
        if split > self._stable:
            cursor.insertBlock(paragraph_format(), QTextCharFormat())
            cursor.insertFragment(fragment(text[self._stable:split]))
            self._stable = split
            self._tail_start = cursor.position()
        tail = text[self._stable:] if text else "…"
        if tail.strip():
            cursor.insertBlock(paragraph_format(), QTextCharFormat())
            cursor.insertFragment(fragment(tail))
        self._tint(self.document(), self._stream_start, cursor.position(), drafted)
        if at_bottom:
            bar.setValue(bar.maximum())

    def end_streaming(self) -> None:
        """Remove the streaming answer (the finished one is added in its place)."""
        if self._stream_start is None:
            return
        cursor = self._end_cursor()
        cursor.setPosition(self._stream_start)
        cursor.movePosition(QTextCursor.End, QTextCursor.KeepAnchor)
        cursor.removeSelectedText()
        self._stream_start = None

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.End)
        return cursor

    @staticmethod
    def _separate(cursor: QTextCursor) -> None:
        """Start a new message: a rule after the previous one, then a fresh block."""
        if cursor.position() == 0:
            return
        rule = QTextBlockFormat()
        rule.setProperty(QTextFormat.BlockTrailingHorizontalRulerWidth, 1)
        cursor.insertBlock(rule, QTextCharFormat())
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())

    def _with_copy_links(self, text: str) -> str:
        """Append a 'Copy code' link after each complete fenced code block."""
        out, inside, fence, block = [], False, "", []
        for line in text.split("\n"):
            stripped = line.strip()
            if not inside and stripped.startswith(("```", "~~~")):
                inside, fence, block = True, stripped[:3], []
                out.append(line)
                continue
            if inside and stripped.startswith(fence):
                inside = False
                out.append(line)
                self.code_blocks.append("\n".join(block))
                href = self.action_href("copy", len(self.code_blocks) - 1)
                out.append(f"\n[Copy code]({href})\n")
                continue
            if inside:
                block.append(line)
            out.append(line)
        return "\n".join(out)
