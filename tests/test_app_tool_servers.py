"""The app's MCP servers themselves (issue 36), offscreen with the real
window and real MCP servers (tests/mcp_servers.py): a stdio server started
on first use, its log, ended when removed; the servers dialog's mcpServers
import with secrets kept in the keyring. The chat turns that call tools are
tests/test_app_tools.py."""

from __future__ import annotations

import json

import pytest

from app.tools import servers as config
from tests.test_app_tools import _configure, _weather


def test_servers_start_on_first_use_log_and_stop_when_removed(qtbot, window):
    """A stdio server starts when a chat's Tools menu first needs it, its
    stderr goes to the log the dialog opens, and removing it ends it."""
    import os
    import re

    service = _configure(window, _weather(), _weather("many", "many"),
                         _weather("garbage", "garbage"))
    assert not service.tools and not service.listing  # nothing started yet
    tab = window.current_tab()
    tab.tools_button.set_unavailable(None)  # the tiny model has no tool format: menu only
    tab.tools_button.menu_.aboutToShow.emit()
    qtbot.waitUntil(lambda: not service.listing and bool(service.tools), timeout=60_000)
    assert len([t for t in service.tools if t.server == "many"]) == 128
    assert "500 tools" in service.notes["many"]
    assert any(t.server == "garbage" for t in service.tools)  # a bad line, said in its log
    log = service.log_path("weather").read_text()
    pid = int(re.findall(r"server pid (\d+)", log)[-1])  # (the log is appended to)
    os.kill(pid, 0)  # running
    _configure(window, _weather("many", "many"))
    qtbot.waitUntil(lambda: not service.listing, timeout=60_000)

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return os.waitpid(pid, os.WNOHANG)[0] == pid if _is_child(pid) else False

    qtbot.waitUntil(gone, timeout=30_000)
    assert {t.server for t in service.tools} == {"many"}


def _is_child(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().split()[3] == str(__import__("os").getpid())
    except OSError:
        return False


def test_the_servers_dialog_imports_mcp_json_and_keeps_secrets_in_the_keyring(
        qtbot, window, memory_keyring):
    from app.tools.servers_dialog import ServersDialog

    dialog = window.requests.rounds.open_servers()
    assert isinstance(dialog, ServersDialog)
    dialog.import_text(json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server files"], "env": {"TOKEN": "s3cret"}},
        "notes": {"url": "https://example.org/mcp", "headers": {"Authorization": "Bearer t"}}}}))
    assert [e.name for e in dialog._entries] == ["files", "notes"]
    dialog._save()
    stored = window.store.setting(config.SETTING)
    assert "s3cret" not in json.dumps(stored) and "Bearer t" not in json.dumps(stored)
    assert memory_keyring.saved[("Tandem", "mcp:files:env:TOKEN")] == "s3cret"
    assert memory_keyring.saved[("Tandem", "mcp:notes:header:Authorization")] == "Bearer t"
    specs, missing = config.specs(config.load(window.store))
    assert not missing and {s.name: (s.env, s.headers) for s in specs} == {
        "files": ({"TOKEN": "s3cret"}, {}), "notes": ({}, {"Authorization": "Bearer t"})}
    assert specs[0].args == ("-y", "server files")
    # Shown again, a secret is <kept>; removing the server forgets its secrets.
    dialog = window.requests.rounds.open_servers()
    dialog.list.setCurrentRow(0)
    assert dialog.env.toPlainText() == "TOKEN=<kept>"
    dialog._remove()
    dialog._save()
    assert ("Tandem", "mcp:files:env:TOKEN") not in memory_keyring.saved
    # Renamed, a server's kept secrets move with it; a field that cannot be
    # read (an unbalanced quote) refuses Save, saying so.
    dialog = window.requests.rounds.open_servers()
    dialog.list.setCurrentRow(0)
    dialog.name.setText("mynotes")
    dialog.name.editingFinished.emit()
    dialog._save()
    assert memory_keyring.saved[("Tandem", "mcp:mynotes:header:Authorization")] == "Bearer t"
    assert ("Tandem", "mcp:notes:header:Authorization") not in memory_keyring.saved
    dialog = window.requests.rounds.open_servers()
    dialog._add()
    dialog.command.setText("npx")
    dialog.args.setText('-y "unclosed')
    dialog._save()
    assert dialog.isVisible() and "No closing quotation" in dialog.message.text()
    assert [s.name for s in config.load(window.store).servers] == ["mynotes"]
    dialog.reject()
    # A plain-http URL to another machine is refused, saying why.
    dialog = window.requests.rounds.open_servers()
    dialog.import_text('{"mcpServers": {"x": {"url": "http://192.0.2.1/mcp"}}}')
    assert "plain http" in dialog.message.text()
    dialog.reject()


@pytest.fixture
def memory_keyring():
    from tests.test_local_server import MemoryKeyring, _keyring_fixture

    yield from _keyring_fixture(MemoryKeyring())
