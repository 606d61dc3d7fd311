"""The tools a chat offers fit the loaded model (issue 47, defect 14), in the
window offscreen with the tiny Qwen2.5-format tool model (a 4,096-token
context) and real MCP servers (tests/mcp_servers.py): a tool whose
description spells one of the model's control tokens is left out, said,
and the chat's other tools still run; tools past half the context are left
out, said, and the prompt fits."""

from __future__ import annotations

from tests.test_app_tools import _configure, _results, _send, _turn_on, _weather, tool_model  # noqa: F401


def _measured(qtbot, window, service, count: int) -> None:
    """Until the listed tools are measured for the loaded model (a worker)."""
    qtbot.waitUntil(lambda: service.measured_for is window.engine
                    and len(service.measured) >= count, timeout=60_000)


def test_a_tool_the_model_refuses_is_left_out_and_the_chat_goes_on(qtbot, tool_model, db):
    from tests.windows import open_window

    window = open_window(qtbot, tool_model, db)
    try:
        service = _configure(window, _weather(kind="spelled", ask=False))
        tab = window.current_tab()
        _turn_on(qtbot, tab, "weather/get_weather", "weather/spelled")
        _measured(qtbot, window, service, len(service.tools))
        assert "control tokens" in service.measured[("weather", "spelled")]
        _send(qtbot, tab, "Weather in Paris?")
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
        result = _results(tab)[0]
        assert result["tool"]["name"] == "get_weather" and result["content"].startswith("sunny")
        assert tab.conversation.messages[-1]["role"] == "assistant"
        [note] = tab.tools_button.left_out
        assert note.startswith("tool 'spelled' of weather left out") and "control" in note
        tab.tools_button._build()
        assert any(a.text().startswith("⚠ tool 'spelled'")
                   for a in tab.tools_button.menu_.actions())
    finally:
        window.close()


def test_the_tools_a_chat_offers_fit_the_context(qtbot, tool_model, db):
    from tests.windows import open_window

    window = open_window(qtbot, tool_model, db)
    try:
        service = _configure(window, _weather("many", kind="many", ask=False))
        tab = window.current_tab()
        _turn_on(qtbot, tab, "many/tool_0")
        tab.tool_choices.on = {f"many/{t.name}" for t in service.tools}  # all 128 on
        _measured(qtbot, window, service, len(service.tools))
        _send(qtbot, tab, "Use a tool")
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
        assert _results(tab)[0]["content"] == "ok"  # (a tool called: the prompt fitted)
        [note] = tab.tools_button.left_out
        assert "of 128 tools left out" in note and "4,096-token context" in note
    finally:
        window.close()
