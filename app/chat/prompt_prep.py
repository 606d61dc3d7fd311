"""Rendering and tokenising a conversation off the GUI thread: a 1 MB paste
takes about a second to tokenise, and the window must not freeze for it."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Signal

from engine import EngineError

from app.conversation.chat_images import with_images


@dataclass(eq=False)
class PromptJob:
    tab: Any
    engine: Any
    messages: list[dict[str, str]]
    prefix: str | None  # an interrupted answer being continued: its text so far
    grammar: Any = None  # the chat's answer format: built here, found cached at submit
    tools: list[dict] | None = None  # offered to the model (a chat's tools on)
    tool_choice: Any = None  # "auto", "required" (a grammar forces a call), ...
    flat: bool = False  # the chat's tool turns sent as plain text (ToolRounds.spelled)
    next_round: bool = False  # the answer going on after its tool calls' results
    images: dict | None = None  # the prompt's images' bytes by digest (decoded on the worker)


class PromptPreparer(QObject):
    """`start` prepares on a worker thread (`engine.prepare`); `ready(job,
    Prepared or EngineError)` arrives on the GUI thread unless the job was
    cancelled (Stop, a closed tab) or replaced in the meantime."""

    ready = Signal(object, object)
    _finished = Signal(object, object)  # from the worker; queued to the GUI thread

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._jobs: dict[int, PromptJob] = {}  # id(tab) -> its pending job
        self._finished.connect(self._on_finished)

    def start(self, tab, engine, messages, prefix: str | None = None,
              grammar=None, tools: list[dict] | None = None, tool_choice=None,
              flat: bool = False, next_round: bool = False,
              images: dict | None = None) -> PromptJob:
        job = PromptJob(tab, engine, messages, prefix, grammar, tools, tool_choice, flat,
                        next_round, images)
        self._jobs[id(tab)] = job
        threading.Thread(target=self._work, args=(job,), name="tokenise", daemon=True).start()
        return job

    def pending(self, tab) -> bool:
        return id(tab) in self._jobs

    def cancel(self, tab) -> bool:
        """Forget `tab`'s job; True if there was one."""
        return self._jobs.pop(id(tab), None) is not None

    def _work(self, job: PromptJob) -> None:
        try:  # the engine renders its template here, or hands the chat to its server
            messages = job.messages
            if any(m.get("images") for m in messages):  # decoded here: it takes a while
                messages = with_images(messages, (job.images or {}).get)
            result: Any = job.engine.prepare(messages, continue_from=job.prefix,
                                             grammar=job.grammar, tools=job.tools or None,
                                             tool_choice=job.tool_choice)
        except EngineError as e:
            result = e
        except ValueError as e:  # an image gone from the store
            result = EngineError(str(e), "bad-argument")
        except Exception as e:  # a tokenizer bug must not kill the thread silently
            result = EngineError(f"Cannot prepare the prompt: {e}", "bad-argument")
        self._finished.emit(job, result)

    def _on_finished(self, job: PromptJob, result) -> None:
        if self._jobs.get(id(job.tab)) is not job:
            return  # stopped, closed or sent again since
        del self._jobs[id(job.tab)]
        self.ready.emit(job, result)
