"""One chat: the conversation rendered as Markdown, a composer, Send and Stop.

The tab's versions (edit, regenerate, ‹ ›) are in app/chat/chat_versions.py and
its streaming answer in app/chat/chat_stream.py: parts of ChatTab, kept apart."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QMessageBox, QProgressBar,
                               QPushButton, QSizePolicy, QToolButton, QVBoxLayout, QWidget)

from app.conversation.conversation import Conversation
from app.chat.chat_attach import ChatAttach
from app.chat.chat_settings import ChatSettings
from app.chat.chat_stream import ChatStream
from app.chat.chat_versions import ChatVersions
from app.chat.composer import Composer
from app.conversation.chat_images import without_images
from app.ui.plain_text import plain
from app.chat.transcript import Transcript
from app.tools.approval import ApprovalBar
from app.tools.tools_menu import ChatTools


class ChatTab(ChatAttach, ChatVersions, ChatStream, QWidget):
    """A conversation's view: `conversation` (app/conversation) holds its
    messages, versions and the answer being written; the tab renders it and
    turns clicks into calls on it. Emits `send_requested(messages)` and
    `stop_requested()`; the window submits to the engine and feeds events back."""

    send_requested = Signal(object)
    attach_requested = Signal(list)  # local paths to read and attach
    image_requested = Signal(str, bytes)  # an image pasted or dropped as data: (name, bytes)
    stop_requested = Signal()
    settings_changed = Signal()  # system prompt or sampling settings edited
    model_defaults_requested = Signal()  # "Model defaults": show the model's again
    # ‹ › under a message with versions: show the version with this stored id
    # (the window loads its branch from the database).
    version_requested = Signal(int)
    INTERRUPTED = "⚠ interrupted: the app or the tab closed while it was being written"

    def __init__(self, title: str = "New chat", chat_id: int | None = None,
                 conversation: Conversation | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = title
        self.chat_id = chat_id
        self.conversation = conversation or Conversation()
        self._stale = False
        # The composer before an edit (words, files, images), back on Esc.
        self._draft: tuple[str, list, list] = ("", [], [])
        self.image_store = None  # where a chat's images are kept (the window's ChatStore)
        self.images_refusal: str | None = None  # why the model cannot read images, if it cannot
        header = self._build_header()
        self.transcript = Transcript()
        self.transcript.thumbnails = self.thumbnail
        self.transcript.action.connect(self._on_action)
        self.transcript.open_requested.connect(self._open_link)
        self.transcript.refused.connect(self._refuse_link)
        self.composer = Composer()
        self.composer.setPlaceholderText("Message — Enter to send, Shift+Enter for a new line")
        self.composer.setFixedHeight(80)
        self._build_edit_row()
        self._build_attachments()
        self.footer = plain(QLabel(""))  # it names files and says errors: text, not markup
        self.footer.setObjectName("answerFooter")
        # A long message wraps within its row: it never widens the window
        # (it grew from 1200 to 1572 px after a first answer).
        self.footer.setWordWrap(True)
        self.footer.setMinimumWidth(120)
        self.footer.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        buttons = self._build_buttons()
        self.approval = ApprovalBar()  # a tool call waiting for the user (app/tools)
        self.tool_choices = ChatTools()  # the chat's tools on, always allowed (its params)
        self.tools_button = None  # installed by the window's requests (install_tools)
        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(self.settings_row)
        layout.addWidget(self.transcript, 1)
        layout.addWidget(self.edit_row)
        layout.addWidget(self.approval)
        layout.addWidget(self.attachment_bar)
        layout.addWidget(self.composer)
        layout.addWidget(self.footer)  # its own row: one line beside the buttons was six
        layout.addLayout(buttons)
        self.composer.submitted.connect(self.send)
        self.set_ready(False)
        self.render()

    def _build_header(self) -> QHBoxLayout:
        """Per-chat settings (system prompt and sampling) behind a toggle, and
        the context meter."""
        self.settings_toggle = QToolButton()
        self.settings_toggle.setText("Chat settings")
        self.settings_toggle.setCheckable(True)
        self.settings_toggle.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        self.settings_toggle.setArrowType(Qt.RightArrow)
        self.settings_row = ChatSettings()  # app/chat/chat_settings.py
        self.settings_row.changed.connect(self.settings_changed.emit)
        self.settings_row.model_defaults_requested.connect(self.model_defaults_requested.emit)
        self.system_prompt = self.settings_row.system_prompt
        self.model_defaults_button = self.settings_row.model_defaults_button
        spins = self.settings_row.spins
        self.temperature, self.top_p, self.max_tokens = (
            spins["temperature"], spins["top_p"], spins["max_tokens"])
        self.top_k, self.min_p, self.repetition_penalty = (
            spins["top_k"], spins["min_p"], spins["repetition_penalty"])
        self.settings_row.setVisible(False)
        self.settings_toggle.toggled.connect(self._toggle_settings)
        self.context_meter = QProgressBar()
        self.context_meter.setRange(0, 1)
        self.context_meter.setValue(0)
        self.context_meter.setFormat("context: waiting for the model")
        self.context_meter.setMinimumWidth(240)
        self.context_meter.setToolTip("Tokens of the model's context this chat uses")
        header = QHBoxLayout()
        header.addWidget(self.settings_toggle)
        header.addStretch(1)
        header.addWidget(self.context_meter)
        return header

    def _build_edit_row(self) -> None:
        """Editing a message changes nothing until the edit is sent; this row
        says so and cancels (as Esc does)."""
        self.edit_banner = QLabel("Editing your message: Send makes it a new version (the "
                                  "old one stays, ‹ › switches). Esc cancels.")
        self.edit_banner.setWordWrap(True)
        self.edit_banner.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.cancel_edit_button = QPushButton("Cancel edit")
        self.cancel_edit_button.clicked.connect(self.cancel_edit)
        self.edit_row = QWidget()
        edit_layout = QHBoxLayout(self.edit_row)
        edit_layout.setContentsMargins(0, 0, 0, 0)
        edit_layout.addWidget(self.edit_banner, 1)
        edit_layout.addWidget(self.cancel_edit_button)
        self.edit_row.setVisible(False)

    def _build_buttons(self) -> QHBoxLayout:
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.regenerate_button = QPushButton("Regenerate")
        self.edit_button = QPushButton("Edit last")
        self.regenerate_button.setToolTip("Answer the last message again (or use the "
                                          "Regenerate link under any answer)")
        self.edit_button.setToolTip("Put your last message back in the composer to edit and "
                                    "resend (or use the Edit link under any message)")
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.stop_requested.emit)
        self.stop_button.clicked.connect(self.composer.setFocus)  # keep typing after Stop
        self.regenerate_button.clicked.connect(self._regenerate)
        self.edit_button.clicked.connect(self._edit)
        buttons = QHBoxLayout()
        buttons.addWidget(self.attach_button)
        self._buttons = buttons
        buttons.addStretch(1)
        buttons.addWidget(self.edit_button)
        buttons.addWidget(self.regenerate_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)
        return buttons

    # ---- user actions -----------------------------------------------------
    def send(self) -> None:
        text = self.composer.toPlainText().strip()
        files, images = list(self.attachment_bar.files), list(self.attachment_bar.images)
        if (not text and not files and not images) or not self.send_button.isEnabled() or \
                self.is_streaming:
            return
        if self.attachment_bar.pending:
            self.footer.setText("Still reading the attached files…")
            return
        if images and self.images_refusal:  # said before anything is sent or stored
            self.footer.setText(f"⚠ {self.images_refusal} Remove the images to send.")
            return
        if not self.check_fit():
            return
        self.edit_row.setVisible(False)  # an edit is sent as a new version of its message
        self.composer.clear()
        self.attachment_bar.clear()
        conversation = self.conversation
        if conversation.send(text, files, images):
            self._set_streaming(True)
            self.render()  # the branch changed: shown whole
        else:
            index = len(conversation.messages) - 1
            self.transcript.add_message(index, conversation.messages[index], None)
            self._set_streaming(True)
            self.transcript.show_streaming("")
        self.send_requested.emit(self.prompt_messages())

    def _toggle_settings(self, shown: bool) -> None:
        self.settings_row.setVisible(shown)
        self.settings_toggle.setArrowType(Qt.DownArrow if shown else Qt.RightArrow)

    @property
    def follows_model(self) -> bool:
        """Whether the chat samples as the loaded model's defaults say."""
        return self.settings_row.follows_model

    def settings(self) -> dict:
        """The chat's sampling settings, as shown."""
        return self.settings_row.sampling()

    def stored_settings(self) -> dict:
        """What is stored with the chat: nothing while it follows the model
        (its tool choices aside)."""
        stored = self.settings_row.stored()
        tools = self.tool_choices.as_params()
        return {**stored, "tools": tools} if tools else stored

    def apply_settings(self, system_prompt: str, params: dict) -> None:
        params = dict(params)
        self.tool_choices = ChatTools.from_params(params.pop("tools", None))
        if self.tools_button is not None:
            self.tools_button.set_choices(self.tool_choices)
        self.settings_row.apply(system_prompt, params)

    def install_tools(self, button) -> None:
        """The chat's Tools button (app/tools/tools_menu.py), beside Attach."""
        self.tools_button = button
        button.set_choices(self.tool_choices)
        self._buttons.insertWidget(1, button)

    @property
    def tools_usable(self) -> bool:
        """The loaded model can call tools (tool turns go to it as such)."""
        return self.tools_button is not None and self.tools_button.reason is None

    def set_tools_busy(self, busy: bool) -> None:
        """Between an answer's tool calls and the next round: Stop stops them."""
        self._set_streaming(busy)

    def apply_model_defaults(self, defaults: dict) -> None:
        self.settings_row.apply_model_defaults(defaults)

    def prompt_messages(self) -> list[dict]:
        """The messages to send: the system prompt (if any) and the chat (its
        images named in words when the model reads none)."""
        messages = self.conversation.prompt(self.system_prompt.text().strip(), self.tools_usable)
        return without_images(messages) if self.images_refusal else messages

    def show_context(self, used: int, context_length: int) -> None:
        self.conversation.context_used = used
        self.context_meter.setFormat("context: %v / %m tokens")
        self.context_meter.setRange(0, max(context_length, 1))
        self.context_meter.setValue(min(used, context_length))

    # ---- engine feedback (GUI thread) ---------------------------------------
    @property
    def is_streaming(self) -> bool:
        """An answer is being written or its tool calls run (Stop stops it)."""
        return self.conversation.busy

    def set_ready(self, ready: bool) -> None:
        """Enable sending once a model is loaded."""
        self.send_button.setEnabled(ready and not self.is_streaming)

    # ---- rendering --------------------------------------------------------
    def changeEvent(self, event):  # noqa: N802
        if event.type() == QEvent.PaletteChange and hasattr(self, "transcript"):
            self.render()  # links and code colours are set when rendered
        super().changeEvent(event)

    def showEvent(self, event):  # noqa: N802
        if self._stale and self.conversation.is_streaming:
            self.transcript.show_streaming(self.stream_markdown(), self.stream_drafted())
        self._stale = False
        super().showEvent(event)

    @property
    def code_blocks(self) -> list[str]:
        return self.transcript.code_blocks

    def render(self) -> None:
        """Render the whole conversation (the answer streams in by itself)."""
        self._stale = False
        conversation = self.conversation
        self.transcript.show_messages(conversation.messages,
                                      conversation.shown_footers(self.INTERRUPTED),
                                      self.message_actions, self.version)
        if self.conversation.is_streaming:
            self.transcript.show_streaming(self.stream_markdown(), self.stream_drafted())

    def _on_action(self, kind: str, index: int) -> None:
        messages = self.conversation.messages
        if kind == "think":  # open / fold the thoughts
            if self.conversation.toggle_thinking(index):
                self.render()
        elif kind == "toolfold":  # a long tool result, opened or folded
            if self.conversation.toggle_thinking(index, "tool_open"):
                self.render()
        elif kind == "image":  # a thumbnail: the image, full size
            self.show_image(index)
        elif kind == "copy" and 0 <= index < len(self.code_blocks):
            QGuiApplication.clipboard().setText(self.code_blocks[index])
        elif kind == "copymsg" and 0 <= index < len(messages):
            QGuiApplication.clipboard().setText(messages[index]["content"])
        elif self.is_streaming and kind in ("edit", "regen", "continue", "prev", "next"):
            self.footer.setText("Stop the answer first, then edit, regenerate or switch "
                                "versions.")
        elif kind in ("prev", "next"):
            beside = self.conversation.version_beside(index, 1 if kind == "next" else -1)
            if beside is not None:
                self.version_requested.emit(beside)
        elif kind == "continue":
            self.continue_answer(index)
        elif kind == "edit":
            self.edit_message(index)
        elif kind == "regen":
            self.regenerate_answer(index)

    def _open_link(self, url) -> None:
        """A link in a message: only http(s), and only after the user sees where."""
        address = url.toString()
        answer = QMessageBox.question(
            self, "Open link", f"Open this address in your browser?\n\n{address}",
            QMessageBox.Open | QMessageBox.Cancel, QMessageBox.Cancel)
        if answer == QMessageBox.Open:
            QDesktopServices.openUrl(url)

    def _refuse_link(self, url) -> None:
        self.footer.setText(f"Not opened: only http and https links open "
                            f"({url.scheme() or 'no scheme'}: link).")

    def _set_streaming(self, streaming: bool) -> None:
        if streaming:
            self.footer.setText("")  # the last answer's stats belong to that answer
        self.stop_button.setEnabled(streaming)
        self.send_button.setEnabled(not streaming)
        conversation = self.conversation
        self.regenerate_button.setEnabled(not streaming and conversation.has_answer())
        self.edit_button.setEnabled(not streaming and conversation.last("user") is not None)

