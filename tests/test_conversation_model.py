"""The conversation model (app/conversation) without Qt: a chat's send, edit,
regenerate, version switching (‹ ›) and a streamed answer, driven on a real
tiny model and a real SQLite store, in a process where PySide6 is never
imported (the child asserts it). The chat tab only renders this model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.conversation.conversation import Conversation

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent('''
    import json, sys
    from pathlib import Path

    from app.conversation.conversation import Conversation
    from app.conversation.history import load_history
    from app.conversation.saving import save_answer, save_progress, save_question
    from app.store import ChatStore
    from engine import Engine, Finished, LaneSpec, SamplingParams
    from engine.models.loader import load_model

    model_dir, db = sys.argv[1], sys.argv[2]
    engine = Engine(load_model(model_dir), lanes=[LaneSpec("cpu", "cpu",
                                                           weight_format="float32")])
    store = ChatStore(db)
    chat = store.create_chat("a chat").id
    conv = Conversation()
    seen = {"progress": []}

    def answer(conv, max_tokens=12):
        """Prepare, submit and stream the answer into `conv`, saved as it goes."""
        prepared = engine.prepare(conv.prompt("Be brief."), continue_from=conv.continue_from)
        handle = engine.submit(prepared, SamplingParams(temperature=0.0, max_tokens=max_tokens))
        conv.request_id = handle.request_id
        save_question(store, chat, conv)
        conv.set_versions(store.versions(chat))
        answer_id, pieces = conv.answer_message_id, 0
        for event in handle:
            if isinstance(event, Finished):
                index = conv.finish(event)
                save_answer(store, answer_id, conv, event)
                return index, event
            if getattr(event, "text", ""):
                conv.add_text(event.text)
                pieces += 1
                if pieces == 3:  # the window saves progress every second
                    save_progress(store, conv)
                    seen["progress"].append(store.messages(chat)[-1].content)

    # Send: a question, then its streamed answer, stored with its stats line.
    assert conv.send("hello world", []) is False and conv.is_streaming
    index, done = answer(conv)
    first = conv.messages[index]["content"]
    seen["first"] = first
    seen["footer"] = conv.footers[index]
    seen["streamed_tokens"] = done.output_tokens
    seen["stored"] = [(m.role, m.content, m.complete) for m in store.messages(chat)]

    # Regenerate the answer: a second version of it beside the first.
    assert conv.regenerate(1) and len(conv.messages) == 1
    answer(conv)
    seen["answer_versions"] = conv.version(1)

    # Edit the question: nothing changes until it is sent, then a new version.
    assert conv.begin_edit(0)["content"] == "hello world"
    assert [m["content"] for m in conv.messages][0] == "hello world"
    assert conv.send("hello again", []) is True  # branched: the view renders it whole
    answer(conv)
    seen["after_edit"] = [m["content"] for m in conv.messages]
    seen["question_versions"] = conv.version(0)

    # ‹: the first question's branch comes back from the store, with its
    # newest answer and that answer's stats line.
    older = conv.version_beside(0, -1)
    store.show_version(older)
    history = load_history(store, chat)
    assert conv.show_history(history.messages, history.footers, history.versions,
                             history.context_used)
    seen["switched"] = [m["content"] for m in conv.messages]
    seen["switched_versions"] = [conv.version(0), conv.version(1)]
    seen["switched_footer"] = conv.footers.get(1, "")
    seen["context_used"] = conv.context_used
    # A fresh load (a restart) shows the same branch.
    again = load_history(store, chat)
    seen["reloaded"] = [m["content"] for m in again.messages]

    # An edit that cannot start puts the branch and the question back.
    conv.begin_edit(0)
    conv.send("never sent", [])
    put_back = conv.fail()
    seen["failed_edit"] = [put_back["content"], conv.editing,
                           [m["content"] for m in conv.messages]]
    conv.end_edit()

    engine.close()
    store.close()
    seen["qt"] = sorted(m for m in sys.modules if m.split(".")[0] in ("PySide6", "shiboken6"))
    print(json.dumps(seen))
''')


@pytest.fixture(scope="module")
def driven(tiny_model_dir, tmp_path_factory):
    db = tmp_path_factory.mktemp("conversation") / "chats.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", CHILD, str(tiny_model_dir), str(db)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_model_runs_without_qt(driven):
    assert driven["qt"] == []


def test_a_streamed_answer_is_kept_with_its_stats(driven):
    assert driven["first"] and driven["streamed_tokens"] > 0
    assert f"{driven['streamed_tokens']} tokens" in driven["footer"]
    assert "CPU" in driven["footer"]
    assert driven["stored"] == [["user", "hello world", True],
                                ["assistant", driven["first"], True]]
    # Saved while streaming: a prefix of the finished answer.
    assert driven["progress"] and driven["first"].startswith(driven["progress"][0])


def test_regenerate_and_edit_make_versions(driven):
    assert driven["answer_versions"] == [2, 2]
    assert driven["after_edit"][0] == "hello again" and len(driven["after_edit"]) == 2
    assert driven["question_versions"] == [2, 2]


def test_switching_versions_shows_the_stored_branch(driven):
    assert driven["switched"][0] == "hello world"
    assert driven["switched"][1] == driven["first"]  # greedy: the regenerate said the same
    assert driven["switched_versions"] == [[1, 2], [2, 2]]
    assert "tokens" in driven["switched_footer"] and driven["context_used"] > 0
    assert driven["reloaded"] == driven["switched"]


def test_an_edit_that_cannot_start_is_put_back(driven):
    text, editing, messages = driven["failed_edit"]
    assert text == "never sent" and editing == 0
    assert messages == driven["switched"]


class _Done:
    """A finished request's fields, as the engine's Finished has them."""

    def __init__(self, reason="stop", error=None):
        self.reason, self.error = reason, error
        self.lanes = [("prefill", "cpu"), ("decode", "cpu")]
        self.output_tokens, self.tokens_per_s, self.ttft_s = 3, 10.0, 0.1
        self.cached_tokens, self.prompt_tokens, self.prefix_note = 0, 5, None
        self.drafted = self.accepted_drafts = 0


def test_thoughts_fold_when_the_answer_begins():
    clock = iter([10.0, 12.5]).__next__
    conv = Conversation(clock=clock)
    conv.send("why?", [])
    assert conv.add_reasoning("Let me think.") and conv.answer.thinking_s is None
    assert conv.add_text("Because.") is True  # the thoughts fold now
    assert conv.answer.thinking_s == 2.5
    assert conv.add_text(" More.") is False
    index = conv.finish(_Done())
    message = conv.messages[index]
    assert message["reasoning"] == "Let me think." and message["content"] == "Because. More."
    assert not conv.is_streaming and conv.request_id is None


def test_continue_goes_on_from_an_interrupted_answer():
    conv = Conversation([{"role": "user", "content": "q", "id": 1},
                         {"role": "assistant", "content": "partial", "id": 2,
                          "interrupted": True},
                         ])
    assert conv.shown_footers("cut")[1] == "cut"
    assert Conversation.actions(conv.messages[1])[0] == ("continue", "Continue")
    assert conv.continue_answer(1) is None
    assert conv.continue_from == "partial" and conv.answer.text == "partial"
    assert conv.answer_message_id == 2 and conv.messages[-1]["role"] == "user"
    conv.fail()  # it could not start: the interrupted answer stays as it was
    assert conv.messages[-1] == {"role": "assistant", "content": "partial", "id": 2,
                                 "interrupted": True, "reasoning": "", "thinking_s": None}
    conv.messages.append({"role": "user", "content": "next", "id": 3})
    assert conv.continue_answer(1) == ("Only the last answer can be continued; "
                                       "regenerate this one.")


def test_an_error_before_any_text_leaves_no_empty_answer():
    conv = Conversation()
    conv.send("q", [])
    assert conv.finish(_Done("error", "the lane failed")) is None
    assert [m["role"] for m in conv.messages] == ["user"] and not conv.is_streaming


def test_the_stats_line_says_what_drafts_did():
    from app.conversation.stats import format_footer

    done = _Done()
    assert "drafted" not in format_footer(done)
    done.drafted, done.accepted_drafts = 30, 9
    assert "drafted 30, accepted 9" in format_footer(done)


def _tool_chat() -> Conversation:
    calls = [{"id": "c1", "name": "get_weather", "server": "w", "arguments": {"city": "Oslo"}},
             {"id": "c2", "name": "get_time", "server": "w", "arguments": {}}]
    conversation = Conversation([{"role": "user", "content": "Weather and time?"},
                                 {"role": "assistant", "content": "Checking."}])
    conversation.record_calls(1, calls)
    for done, (call, text) in enumerate(zip(calls, ("sunny", "noon"))):
        index = conversation.add_tool_turn(call)
        sent = conversation.prompt(tools=True)
        assert sum(m["role"] == "tool" for m in sent) == done  # asked: not sent yet
        conversation.set_tool_result(index, text, "result", False)
    conversation.next_round()
    return conversation


def test_tool_turns_go_to_a_tool_model_as_calls_and_results():
    conversation = _tool_chat()
    assert conversation.busy and conversation.resend_without_user
    prompt = conversation.prompt("Be brief.", tools=True)
    assert [m["role"] for m in prompt] == ["system", "user", "assistant", "tool", "tool"]
    assert prompt[2]["tool_calls"][0] == {"id": "c1", "type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "Oslo"}}}
    assert [(m["tool_call_id"], m["content"]) for m in prompt[3:]] == [("c1", "sunny"),
                                                                        ("c2", "noon")]


def test_tool_turns_go_to_a_model_without_tools_as_alternating_text():
    """A model with no tool format (or tools off): what was called and what
    came back, as text, the roles still alternating."""
    conversation = _tool_chat()
    conversation.messages.append({"role": "user", "content": "Thanks. Tomorrow?"})
    prompt = conversation.prompt(tools=False)
    assert [m["role"] for m in prompt] == ["user", "assistant", "user"]
    assert prompt[1]["content"] == ('Checking.\n[Called get_weather({"city": "Oslo"})]\n'
                                    "[Called get_time({})]")
    assert prompt[2]["content"] == ("[Result of get_weather]\nsunny\n\n[Result of get_time]\n"
                                    "noon\n\nThanks. Tomorrow?")
    assert all(set(m) == {"role", "content"} for m in prompt)


def test_a_call_left_without_a_result_is_answered_in_the_prompt():
    """The app quit (or the tab closed) while a call waited: the next prompt
    still answers every call, so templates that require it render."""
    conversation = Conversation([{"role": "user", "content": "Weather?"},
                                 {"role": "assistant", "content": ""}])
    conversation.record_calls(1, [{"id": "c1", "name": "get_weather", "arguments": {}}])
    conversation.end_tools()
    conversation.messages.append({"role": "user", "content": "Never mind."})
    prompt = conversation.prompt(tools=True)
    assert [m["role"] for m in prompt] == ["user", "assistant", "tool", "user"]
    assert prompt[2]["tool_call_id"] == "c1" and "did not run" in prompt[2]["content"]
