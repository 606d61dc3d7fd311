"""Light and dark: the window follows the system's colour scheme unless View >
Theme picks one; the transcript, code colours, plots and timeline follow.
Offscreen Qt has no platform scheme (setColorScheme is a request it ignores),
so "the system turns dark" is its QStyleHints.colorSchemeChanged signal, as a
desktop platform sends it."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication

from app.ui.theme import is_dark


@pytest.fixture
def scheme():
    hints = QApplication.instance().styleHints()
    yield hints
    hints.unsetColorScheme()
    app = QApplication.instance()
    app.setPalette(app.style().standardPalette())


def test_the_window_follows_the_system_scheme_and_the_switch(qtbot, window, scheme):
    window.show()
    tab = window.chat_tabs()[0]
    tab.conversation.messages = [{"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "```python\ndef f():\n    return 1\n```"}]
    tab.render()
    assert not is_dark() and window.menus.theme.actions["system"].isChecked()
    scheme.setColorScheme(Qt.ColorScheme.Dark)  # asked of the platform ...
    scheme.colorSchemeChanged.emit(Qt.ColorScheme.Dark)  # ... which says it is dark now
    assert is_dark()
    qtbot.waitUntil(lambda: is_dark(tab.transcript.palette()), timeout=5_000)  # events
    assert is_dark(window.scheduler.timeline_view.palette())
    base = tab.transcript.palette().color(QPalette.Base)
    text = tab.transcript.palette().color(QPalette.Text)
    assert text.lightness() - base.lightness() > 150  # readable
    plots = window.scheduler.plots
    assert plots.backgroundBrush().color().lightness() < 128
    colours = _code_colours(tab)
    assert "#ff7b72" in colours and "#d73a49" not in colours  # the dark code colours
    # The user picks Light: it stays light whatever the system says, and is kept.
    window.menus.theme.actions["light"].trigger()
    assert not is_dark() and window.store.setting("theme") == "light"
    qtbot.waitUntil(lambda: "#d73a49" in _code_colours(tab), timeout=5_000)
    window.menus.theme.actions["dark"].trigger()
    assert is_dark() and window.store.setting("theme") == "dark"
    scheme.colorSchemeChanged.emit(Qt.ColorScheme.Light)  # the system: light, but dark chosen
    assert is_dark()
    window.menus.theme.actions["system"].trigger()
    assert window.store.setting("theme") == "system"
    scheme.colorSchemeChanged.emit(Qt.ColorScheme.Light)
    assert not is_dark()


def _code_colours(tab):
    from PySide6.QtGui import QTextFormat

    doc = tab.transcript.document()
    block = doc.begin()
    while block.isValid() and not block.blockFormat().hasProperty(QTextFormat.BlockCodeFence):
        block = block.next()
    return {r.format.foreground().color().name() for r in block.layout().formats()}
