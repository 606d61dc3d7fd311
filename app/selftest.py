"""`Tandem --self-test`: prove an installed copy (a bundle above all) works.

Headless: load the bundled default model, generate a few tokens, print what
ran where and how fast, exit 0; on any failure print why and exit 1.
With `--gui` it instead opens the real main window (offscreen under
QT_QPA_PLATFORM=offscreen), sends one message through the composer, waits for
the answer and prints the cold-start times (process start -> window visible
-> first token -> answer), which benchmarks/RESULTS.md records for the bundle.
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from pathlib import Path

PROMPT = "Say hello in one short sentence."
MAX_TOKENS = 16
JSON_CHECK = ('{"type": "object", "properties": {"ok": {"type": "boolean"}}, '
              '"required": ["ok"], "additionalProperties": false}')


def _since_start() -> float:
    """Seconds since this process started (includes a bundle's unpacking)."""
    import psutil

    return time.time() - psutil.Process().create_time()


def _fail(message: str) -> int:
    print(f"Tandem self-test FAILED: {message}", file=sys.stderr, flush=True)
    return 1


def _platform_report() -> dict:
    from engine.models.diagnostics import mlx_version

    from app.ui.version import version

    return {"tandem": version(), "python": platform.python_version(),
            "platform": platform.platform(), "frozen": bool(getattr(sys, "frozen", False)),
            "mlx": mlx_version()}


def _optional_parts(report: dict) -> str | None:
    """What the app loads on first use (in a bundle: collected or not); why
    one fails, or None."""
    try:
        from app.connections import keys
        from app.conversation.attach_files import read_attachment

        report["keyring"] = keys.backend_name()
        import httpx  # noqa: F401 (remote lanes)
        import pypdf  # noqa: F401 (a PDF's text, for attachments)

        sample = Path(tempfile.mkdtemp(prefix="tandem-self-test-")) / "sample.md"
        sample.write_text("# hello\n", encoding="utf-8")
        attached = read_attachment(sample)
        if attached.text != "# hello\n":
            return f"attachments: {attached.error}"
        report["attachments"] = "ok"
    except Exception as e:
        return f"optional parts: {type(e).__name__}: {e}"
    return None


def engine_check(model: str = "default") -> int:
    from engine import (EngineError, Grammar, SamplingParams, cpu_attention, cpu_matmul,
                        loaded_blas)

    report = _platform_report()
    try:
        from engine import Engine
        from engine.models.diagnostics import gpu_check, metallib_problem

        broken = metallib_problem()
        if broken:  # a broken macOS bundle, not a machine without a usable GPU
            return _fail(f"MLX's Metal shader library: {broken}")
        report["gpu"] = gpu_check()  # "unusable: why" runs everything on the CPU
        started = time.perf_counter()
        engine = Engine.load(model)
        report["load_s"] = round(time.perf_counter() - started, 2)
    except EngineError as e:
        return _fail(str(e))
    except Exception as e:  # a broken bundle fails here: say what, not a traceback
        return _fail(f"{type(e).__name__}: {e}")
    try:
        report["model"] = engine.model_info.label
        report["lanes"] = {lane.name: lane.device for lane in engine.lane_info()}
        report["blas"] = loaded_blas or "bundled with mlx"
        report["cpu_kernels"] = cpu_matmul()  # Tandem's kernels, or why not (issue 51)
        report["cpu_attention"] = cpu_attention()  # the attention kernel, measured, or MLX's
        report["cpu_matmul"] = (engine.memory_plan.cpu_matmul_why  # what the CPU lane runs
                                or "not probed: the weights are not quantized")
        handle = engine.submit([{"role": "user", "content": PROMPT}],
                               SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0))
        done = handle.result(timeout=120)
        # Constrained decoding (llguidance's compiled extension, in a bundle).
        shaped = engine.submit([{"role": "user", "content": PROMPT}], SamplingParams(
            max_tokens=32, grammar=Grammar("json_schema", JSON_CHECK))).result(timeout=120)
        if shaped.reason == "stop":
            json.loads(shaped.text)
        report["json_output"] = shaped.reason
    except Exception as e:
        return _fail(f"generation: {type(e).__name__}: {e}")
    finally:
        engine.close()
    why = _optional_parts(report)
    if why:
        return _fail(why)
    report.update(answer=done.text, reason=done.reason, output_tokens=done.output_tokens,
                  ttft_s=round(done.ttft_s or 0.0, 3),
                  tokens_per_s=round(done.tokens_per_s or 0.0, 1),
                  lanes_used=[f"{phase} {lane}" for phase, lane in done.lanes])
    print(json.dumps(report, indent=2), flush=True)
    if done.reason not in ("stop", "length") or done.output_tokens == 0:
        return _fail(f"the model produced no answer (reason: {done.reason})")
    print("Tandem self-test passed.", flush=True)
    return 0


def gui_check(model: str = "default", timeout_s: float = 180.0) -> int:
    """Open the main window on a throwaway database, send one message, wait
    for the answer."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.window.main_window import MainWindow
    from app.ui.paths import prepare_application
    from app.store import ChatStore

    app = QApplication.instance() or QApplication(sys.argv[:1])
    prepare_application(app)
    times: dict[str, float] = {"imports_s": _since_start()}
    db = Path(tempfile.mkdtemp(prefix="tandem-self-test-")) / "self-test.db"
    window = MainWindow(model, store=ChatStore(db))  # starts loading the model
    outcome: dict = {}

    def send():
        times["model_ready_s"] = _since_start()
        tab = window.chat_tabs()[0]
        tab.composer.setPlainText(PROMPT)
        tab.send()
        outcome["tab"] = tab

    def on_tokens(*_):
        times.setdefault("first_token_s", _since_start())

    def on_finished(*_):
        tab = outcome.get("tab")
        if tab is not None and not tab.is_streaming:
            times["answer_s"] = _since_start()
            outcome["answer"] = tab.conversation.messages[-1]["content"]
            QTimer.singleShot(0, app.quit)

    def on_failed(message: str):
        outcome["error"] = message
        app.quit()

    def on_timeout():
        outcome["error"] = f"no answer within {timeout_s:.0f} s"
        app.quit()

    window.engine_ready.connect(send)
    window.model_failed.connect(on_failed)
    window.bridge.tokens.connect(on_tokens)
    window.bridge.finished.connect(lambda *a: QTimer.singleShot(0, on_finished))
    QTimer.singleShot(int(timeout_s * 1000), on_timeout)
    # Shown only now: events (a failed load above all) are delivered from the
    # first processEvents on, and every handler is connected by then.
    window.show()
    app.processEvents()
    times["window_visible_s"] = _since_start()
    app.exec()
    window.close()
    # The engine closes on a worker thread: wait for it, or the interpreter can
    # end while MLX still runs there (the process then aborts at exit).
    window.wait_for_engines()
    return _gui_verdict(outcome, times, app)


def _gui_verdict(outcome: dict, times: dict, app) -> int:
    """The GUI check's result: its times printed, 0 when an answer came."""
    if "error" in outcome:
        return _fail(f"GUI: {outcome['error']}")
    answer = outcome.get("answer", "")
    print(json.dumps({"gui_answer": answer, "window_icon": not app.windowIcon().isNull(),
                      **{k: round(v, 2) for k, v in times.items()}}, indent=2), flush=True)
    if not answer.strip():
        return _fail("GUI: the answer is empty")
    print("Tandem GUI self-test passed.", flush=True)
    return 0


def run(model: str = "default", gui: bool = False) -> int:
    """The GUI check runs alone, so its times are a true cold start."""
    return gui_check(model) if gui else engine_check(model)
