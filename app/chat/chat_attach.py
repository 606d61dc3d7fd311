"""A chat tab's attachments: files and images chosen with Attach…, dropped
on the chat or pasted into the composer (read off the GUI thread by the
window's requests), the check that they fit in the context, whether the
model reads images (said before anything is sent), and the chat's images:
thumbnails and the full-size view. Part of ChatTab, kept apart."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QPushButton

from app.chat.attachment_bar import AttachmentBar
from app.chat.composer import Composer
from app.conversation.chat_images import MAX_MESSAGE_IMAGES, ImageFile


class ChatAttach:
    """Mixed into ChatTab: uses its composer, footer, conversation, transcript
    and its `attach_requested` / `image_requested` signals."""

    def _build_attachments(self) -> None:
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setToolTip("Attach images, text, code, Markdown or PDF files (or "
                                      "drop them on the chat, or paste a screenshot)")
        self.attach_button.clicked.connect(self._choose_files)
        self.attachment_bar = AttachmentBar()
        self.attachment_bar.changed.connect(self.check_fit)
        self.composer.files_dropped.connect(self.attach_requested.emit)
        self.composer.image_pasted.connect(lambda png: self._take_image("pasted image.png", png))
        self.setAcceptDrops(True)

    def _choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(
            self, "Attach files", str(Path.home()),
            "Images, text, code, Markdown and PDF (*.png *.jpg *.jpeg *.webp *.gif *.txt *.md "
            "*.markdown *.py *.js *.ts *.json *.yaml *.yml *.toml *.csv *.html *.css *.c *.h "
            "*.cpp *.rs *.go *.java *.sh *.sql *.pdf);;Images (*.png *.jpg *.jpeg *.webp *.gif);;"
            "All files (*)")
        if paths:
            self.attach_requested.emit(paths)

    def dragEnterEvent(self, event):  # noqa: N802
        if Composer._files(event.mimeData()) or event.mimeData().hasImage():
            event.acceptProposedAction()

    def dropEvent(self, event):  # noqa: N802
        files = Composer._files(event.mimeData())
        png = None if files else Composer.image_png(event.mimeData())
        if files or png is not None:
            event.acceptProposedAction()
        if files:
            self.attach_requested.emit(files)
        elif png is not None:  # an image dragged from a page: its pixels, no file
            self._take_image("dropped image.png", png)

    def _take_image(self, name: str, png: bytes) -> None:
        self.image_requested.emit(name, png)

    def attached(self, attachment) -> None:
        """A file or image read for this chat: attached, or why it cannot be."""
        bar = self.attachment_bar
        bar.pending = max(bar.pending - 1, 0)
        if attachment.error:
            self.footer.setText(f"⚠ {attachment.name} was not attached: {attachment.error}")
        elif not isinstance(attachment, ImageFile):
            bar.add(attachment)
        elif len(bar.images) >= MAX_MESSAGE_IMAGES:
            self.footer.setText(f"⚠ {attachment.name} was not attached: a message takes at "
                                f"most {MAX_MESSAGE_IMAGES} images.")
        else:
            bar.add_image(attachment)
            if self.images_refusal:  # said now, not only at Send
                self.footer.setText(f"⚠ {self.images_refusal}")

    def use_engine(self, engine) -> None:
        """The window's engine (None: no model yet): Send, the context meter
        and whether images can be sent follow it."""
        self.set_ready(engine is not None)
        if engine is not None:
            self.set_image_reader(engine.capabilities.images, engine.model_info.label)
            self.show_context(self.conversation.context_used, engine.context_length)

    def set_image_reader(self, reads: bool, label: str) -> None:
        """The loaded model reads images, or not (said when one is attached)."""
        self.images_refusal = None if reads else (
            f"{label} cannot read images: it is a text model. Load a vision model "
            "(SmolVLM, Qwen2.5-VL, …) to send images.")

    def set_image_store(self, store) -> None:
        """Where this chat's images are kept: thumbnails and full size come from it."""
        self.image_store = store
        if any(m.get("images") for m in self.conversation.messages):
            self.render()  # now with its thumbnails

    def thumbnail(self, digest: str) -> bytes | None:
        """An image's thumbnail: the question being sent has its own (it is
        stored once its request starts), the chat's earlier ones are kept."""
        fresh = next((i.thumb for i in self.conversation.sending_images
                      if i.digest == digest and i.thumb), None)
        if fresh is None and self.image_store is not None:
            return self.image_store.thumbnail(digest)
        return fresh

    def show_image(self, number: int) -> None:
        """An image in the transcript, full size (app/chat/image_viewer.py)."""
        record = self.transcript.image_at(number)
        if record is not None and self.image_store is not None:
            from app.chat.image_viewer import ImageViewer

            self._viewer = ImageViewer(record, self.image_store.image_data(record["digest"]),
                                       self)
            self._viewer.show()

    def check_fit(self) -> bool:
        """Whether the attached files fit in what the chat has left of the
        model's context; if not, they are marked and the footer says so."""
        context = self.context_meter.maximum() if self.context_meter.maximum() > 1 else 0
        files = self.attachment_bar.tokens
        used = self.conversation.context_used
        fits = not context or not files or used + files < context
        self.attachment_bar.mark_over(not fits)
        if not fits:
            self.footer.setText(
                f"⚠ The attached files are ~{files:,} tokens: this chat already uses "
                f"{used:,} of the model's {context:,}. Remove a file or start "
                f"a new chat.")
        return fits
