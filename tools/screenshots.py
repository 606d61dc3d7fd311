"""Save PNG screenshots of the main window mid-generation: three tabs streaming
and the Scheduler dock visible. For looking at the app as a user would.

Run: QT_QPA_PLATFORM=offscreen .venv/bin/python tools/screenshots.py [out_dir]

On a machine without a GPU, one CPU lane acts as the GPU lane so the hybrid
view has two lanes to show (the same stand-in the tests use).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PySide6.QtCore import QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

PROMPTS = ["Write a short poem about the sea, with a title.",
           "Explain in a few sentences how a bicycle works.",
           "Give me a Python function that reverses a string, with an example."]


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "screenshots")
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication(sys.argv)
    from app.window.main_window import MainWindow
    from app.store import ChatStore
    from engine import Engine, LaneSpec, gpu_available

    def factory(source):
        lanes = None if gpu_available() else [
            LaneSpec("gpu", "cpu", acts_as="gpu"), LaneSpec("cpu", "cpu")]
        return Engine.load(source, lanes=lanes)

    store = ChatStore(Path(tempfile.mkdtemp()) / "shots.db")
    window = MainWindow("default", engine_factory=factory, store=store)
    window.resize(1500, 900)
    window.show()
    shots = []

    def start():
        tabs = [window.chat_tabs()[0], window.new_chat(), window.new_chat()]
        for tab, prompt in zip(tabs, PROMPTS):
            tab.composer.setPlainText(prompt)
            tab.send()
        for i, delay in enumerate((3000, 8000)):
            QTimer.singleShot(delay, lambda i=i: shot(i))

    def shot(i):
        path = out / f"main-window-{i + 1}.png"
        window.grab().save(str(path))
        shots.append(path)
        if len(shots) == 2:
            window.close()
            app.quit()

    window.engine_ready.connect(start)
    app.exec()
    window.wait_for_engines()  # no MLX work may be left when the process ends
    for path in shots:
        print(path)
    return 0 if len(shots) == 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
