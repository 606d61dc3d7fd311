"""Tools in the app (issue 36), offscreen with the real window, a tiny
Qwen2.5-format tool model (tests/tool_models.py) and real MCP servers
written with the SDK (tests/mcp_servers.py: stdio and Streamable HTTP).

A random model calls a tool only when forced, so the chats here turn on
"Call a tool first" (a grammar forces the first round's call); the round
after the result is "auto" and answers. Covered: the Tools button (its
menu, disabled with the reason for a model without a tool format), the
approval (Allow once, Always for this tool in this chat, Deny; nothing runs
before it), the blocks in the transcript, the warm prefix of the round
after a result, the timeline's tool bar, Stop during a running call, faults
as notes and error results, and the chat surviving a restart and an
export/import. The servers' own lifecycle and the dialog: tests/test_app_tool_servers.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.tools import servers as config
from tests.mcp_servers import http_server

SERVERS = str(Path(__file__).parent / "mcp_servers.py")


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    from tests.tool_models import QWEN25_TOOLS, build_tool_model

    return build_tool_model(tmp_path_factory.mktemp("apptools") / "qwen25", QWEN25_TOOLS)


@pytest.fixture(scope="module")
def remote_url():
    with http_server() as url:
        yield url


def _configure(window, *entries, rounds=8, call_s=60.0):
    settings = config.ToolSettings(tuple(entries), rounds, call_s)
    config.save(window.store, settings, {})
    service = window.requests.rounds.service
    service.configure(settings)
    return service


def _weather(name="weather", kind="weather", ask=True) -> config.ServerEntry:
    return config.ServerEntry(name, command=sys.executable, args=(SERVERS, "stdio", kind),
                              ask=ask)


def _turn_on(qtbot, tab, *names, require=True):
    """Open the chat's Tools menu and tick `names` (server/tool) and, with
    `require`, "Call a tool first", as a person would."""
    button = tab.tools_button
    service = button.service
    button.menu_.aboutToShow.emit()  # opening the menu starts the servers
    qtbot.waitUntil(lambda: not service.listing and bool(service.tools), timeout=60_000)
    button._build()
    actions = {a.text(): a for a in button.menu_.actions()}
    for name in names:
        server, tool = name.split("/")
        actions[f"{tool}  ({server})"].trigger()
    if require and not tab.tool_choices.require:
        actions["Call a tool first"].trigger()
    assert all(n in tab.tool_choices.on for n in names)


def _send(qtbot, tab, text: str) -> None:
    tab.apply_settings("", {**tab.settings_row.stored(), "temperature": 0.0, "max_tokens": 64,
                            "tools": tab.tool_choices.as_params()})
    tab.composer.setPlainText(text)
    qtbot.mouseClick(tab.send_button, Qt.LeftButton)


def _results(tab) -> list[dict]:
    """The tool blocks since the last question (a forced round may add an
    unread second call, cut by max_tokens: refused, after the first)."""
    messages = tab.conversation.messages
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return [m for m in messages[last:] if m["role"] == "tool"]


def _answer(qtbot, tab, button: str) -> None:
    qtbot.waitUntil(lambda: not tab.approval.isHidden(), timeout=60_000)
    qtbot.mouseClick(getattr(tab.approval, f"{button}_button"), Qt.LeftButton)


def test_a_chat_calls_an_approved_tool_and_answers_from_its_result(qtbot, tool_model, db,
                                                                   remote_url):
    from tests.windows import open_window

    window = open_window(qtbot, tool_model, db)
    try:
        _configure(window, _weather(), config.ServerEntry("remote", url=remote_url))
        tab = window.current_tab()
        assert tab.tools_button.isEnabled()
        _turn_on(qtbot, tab, "weather/get_weather")
        assert window.store.chat(tab.chat_id).params["tools"]["on"] == ["weather/get_weather"]
        _send(qtbot, tab, "Weather in Paris?")
        qtbot.waitUntil(lambda: not tab.approval.isHidden(), timeout=60_000)
        # Asked, and nothing ran: the block waits, nothing is stored for it.
        block = tab.conversation.messages[-1]
        assert block["role"] == "tool" and block["tool"]["status"] == "asking"
        assert block["tool"]["name"] == "get_weather" and block["content"] == ""
        assert "get_weather (tool server weather)" in tab.approval.question.text()
        assert '"city"' in tab.approval.arguments.toPlainText()
        assert [m.role for m in window.store.messages(tab.chat_id)] == ["user", "assistant"]
        assert tab.is_streaming and tab.stop_button.isEnabled()
        qtbot.mouseClick(tab.approval.allow_button, Qt.LeftButton)
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
        messages = tab.conversation.messages
        # (a forced round may write a second call, cut by max_tokens: refused, unread)
        roles = [m["role"] for m in messages]
        assert roles[:3] == ["user", "assistant", "tool"] and roles[-1] == "assistant"
        assert set(roles[3:-1]) <= {"tool"}
        assert messages[1]["tool"]["calls"][0]["name"] == "get_weather"
        assert messages[2]["content"].startswith("sunny in ")
        assert messages[2]["tool"]["status"] == "result"
        shown = tab.transcript.toPlainText()
        assert "Tool: get_weather" in shown and "sunny in " in shown
        stored = window.store.messages(tab.chat_id)
        assert [m.role for m in stored] == roles
        assert stored[2].content == messages[2]["content"] and stored[2].parent_id == stored[1].id
        # The round after the result begins with the previous prompt: warm.
        block_size = window.engine.prefix_cache.block_size
        first, last = stored[1].stats, stored[-1].stats
        assert last["cached_tokens"] >= first["prompt_tokens"] // block_size * block_size > 0
        # The timeline drew the wait on the chat's row.
        tool_tracks = [t for t in window.scheduler.timeline.tracks.values()
                       if t.segments[0].phase == "tool"]
        assert tool_tracks and tool_tracks[0].row == str(tab.chat_id)
        assert "get_weather" in tool_tracks[0].segments[0].reason

        # Deny: nothing runs; the model is told and the answer goes on.
        _send(qtbot, tab, "And in Oslo?")
        _answer(qtbot, tab, "deny")
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
        denied = _results(tab)[0]
        assert denied["tool"]["status"] == "denied" and "did not allow" in denied["content"]
        assert tab.conversation.messages[-1]["role"] == "assistant"

        # Always for this tool in this chat: asked once, then it just runs.
        _send(qtbot, tab, "And in Rome?")
        _answer(qtbot, tab, "always")
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
        assert window.store.chat(tab.chat_id).params["tools"]["always"] == [
            "weather/get_weather"]
        asked = []
        tab.approval.decided.connect(asked.append)
        _send(qtbot, tab, "Rome again?")
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
        assert not asked and tab.approval.isHidden()
        assert _results(tab)[0]["tool"]["status"] == "result"

        # The HTTP server's tool of the same name, in another chat.
        other = window.new_chat()
        _turn_on(qtbot, other, "remote/get_weather")
        _send(qtbot, other, "Weather?")
        _answer(qtbot, other, "allow")
        qtbot.waitUntil(lambda: not other.is_streaming, timeout=60_000)
        result = _results(other)[0]
        assert result["tool"]["server"] == "remote" and result["content"].startswith("sunny in")
    finally:
        window.close()


def test_stop_cancels_a_running_call_and_faults_are_notes(qtbot, tool_model, db, tmp_path):
    from tests.windows import open_window

    window = open_window(qtbot, tool_model, db)
    try:
        service = _configure(window, _weather(ask=False),
                             config.ServerEntry("missing", command=str(tmp_path / "nothing")))
        tab = window.current_tab()
        _turn_on(qtbot, tab, "weather/slow")
        assert "missing" in service.notes and "No such file" in service.notes["missing"]
        assert any(a.text().startswith("⚠ missing:") for a in tab.tools_button.menu_.actions())
        _send(qtbot, tab, "Wait for it")  # its server does not ask: it runs
        qtbot.waitUntil(lambda: tab.conversation.messages[-1].get("tool", {}).get("status")
                        == "running", timeout=60_000)
        qtbot.mouseClick(tab.stop_button, Qt.LeftButton)
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=30_000)
        stopped = _results(tab)[0]
        assert stopped["tool"]["status"] == "stopped" and "Stopped by the user" in \
            stopped["content"]
        assert tab.send_button.isEnabled() and "Stopped" in tab.footer.text()

        # A server crashing mid-call: an error result the model and the user
        # see, the answer goes on, and the app keeps working.
        tab.tool_choices.on = {"weather/crash"}
        _send(qtbot, tab, "Crash it")
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
        crashed = _results(tab)[0]
        assert crashed["tool"]["status"] == "error" and crashed["tool"]["error"]
        assert tab.conversation.messages[-1]["role"] == "assistant"
        assert "Error:" in tab.transcript.toPlainText()

        # A call that hangs past the time limit (a setting): an error result.
        # (The limit, the least the setting takes, is waited for whole: the
        # forced round calls slow twice.)
        service = _configure(window, _weather(ask=False), call_s=1)
        tab.tool_choices.on = {"weather/slow"}
        _send(qtbot, tab, "Hang")
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
        hung = _results(tab)[0]
        assert hung["tool"]["status"] == "error" and "within 1 s" in hung["content"]
        assert service.settings.call_s == 1
    finally:
        window.close()


def test_a_model_without_a_tool_format_says_why(window):
    tab = window.current_tab()
    assert not tab.tools_button.isEnabled()
    assert "no tool-call format" in tab.tools_button.toolTip()


def test_tool_turns_survive_a_restart_and_an_export(qtbot, tool_model, db, tmp_path):
    from app.store.chat_json import export_chat, import_chat
    from tests.windows import open_window

    window = open_window(qtbot, tool_model, db)
    try:
        _configure(window, _weather(ask=False))
        tab = window.current_tab()
        _turn_on(qtbot, tab, "weather/get_weather")
        _send(qtbot, tab, "Weather in Paris?")
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
        before = [(m["role"], m["content"], m.get("tool")) for m in tab.conversation.messages]
        chat_id = tab.chat_id
    finally:
        window.close()
    window = open_window(qtbot, tool_model, db)
    try:
        tab = window.open_chat(chat_id)
        after = [(m["role"], m["content"], m.get("tool")) for m in tab.conversation.messages]
        assert after == before and [r for r, _, _ in after][:3] == ["user", "assistant", "tool"]
        assert "Tool: get_weather" in tab.transcript.toPlainText()
        copy = import_chat(window.store, export_chat(window.store, chat_id).encode())
        assert [(m.role, m.content, m.tool) for m in window.store.messages(copy)] == \
            [(m.role, m.content, m.tool) for m in window.store.messages(chat_id)]
    finally:
        window.close()


def test_a_call_spelling_a_control_token_never_sticks_the_chat(qtbot, tool_model, db):
    """A call's arguments go into the template as they are, and the engine
    refuses one that spells a control token: such a chat goes on with its
    tool turns as plain text (message text may spell anything)."""
    from tests.windows import open_window

    window = open_window(qtbot, tool_model, db)
    try:
        special = window.engine.tokenizer._tokenizer.eos_token
        assert special
        store = window.store
        chat = store.create_chat("Spelled")
        store.add_message(chat.id, "user", "Weather?")
        call = {"id": "c1", "name": "get_weather", "server": "weather",
                "arguments": {"city": f"Paris{special}"}}
        store.add_message(chat.id, "assistant", "", tool={"calls": [call]})
        store.add_message(chat.id, "tool", "sunny", tool={**call, "status": "result",
                                                          "error": False})
        store.add_message(chat.id, "assistant", "Sunny.")
        tab = window.open_chat(chat.id)
        assert tab.tools_usable
        with pytest.raises(Exception, match="control tokens"):
            window.engine.prepare(tab.prompt_messages())  # as it would go: refused
        _send(qtbot, tab, "And tomorrow?")
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
        assert tab.conversation.messages[-1]["role"] == "assistant"
        assert not tab.footer.text().startswith("⚠")
    finally:
        window.close()


def test_a_hostile_result_is_shown_as_the_text_it_is(qtbot, tool_model, db):
    """A server's result is data: escape sequences shown as \\xNN, Markdown,
    HTML, images and links as text, never rendered or made clickable."""
    from tests.windows import open_window

    window = open_window(qtbot, tool_model, db)
    try:
        _configure(window, _weather(ask=False))
        tab = window.current_tab()
        for tool, seen in (("ansi", "\\x1b[2J\\x1b]0;pwned\\x07cleared"),
                           ("markup", '<img src="file:///etc/passwd"> [again](tandem://key/'
                                      "regen/0) **bold** <|im_end|>")):
            tab.tool_choices.on = set()
            _turn_on(qtbot, tab, f"weather/{tool}")
            _send(qtbot, tab, f"Use {tool}")
            qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
            assert _results(tab)[0]["tool"]["name"] == tool
            shown = tab.transcript.toPlainText()
            assert seen in shown and "\x1b[2J" not in shown
        html = tab.transcript.toHtml()
        assert "<img" not in html and 'href="tandem://key' not in html
    finally:
        window.close()
