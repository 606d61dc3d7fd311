"""Does reloading a model leak? The app's window loads the model, answers one
message, and loads the same model again, `--reloads` times; after each load
it prints the process's resident memory (RSS), MLX's active memory and the
lane threads that exist. Each run is a fresh process, once as Tandem runs and
once with TANDEM_NO_MALLOC_TRIM=1 (freed memory kept by glibc, as before
engine/runtime/allocator.py): the ratio of the two, measured in the same run,
is the result.

    .venv/bin/python benchmarks/reload_memory.py [--model default] [--reloads 3]

A leak shows as MLX active memory or lane threads growing per reload; glibc
keeping freed memory shows as RSS growing while MLX active memory stays flat.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(model: str, reloads: int) -> None:
    sys.path.insert(0, ROOT)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import gc
    import time

    import engine  # noqa: F401  (OpenBLAS before MLX)
    import mlx.core as mx
    import psutil
    from PySide6.QtWidgets import QApplication

    from app.window.main_window import MainWindow
    from app.store import ChatStore
    from engine.runtime import lanethreads

    app = QApplication([])
    w = MainWindow(model, store=ChatStore(os.path.join(tempfile.mkdtemp(), "r.db")))

    def pump(seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end:
            app.processEvents()
            time.sleep(0.01)

    old = None
    for i in range(reloads + 1):
        while w.engine is None or w.engine is old:
            pump(0.1)
        tab = w.chat_tabs()[0]
        tab.composer.setPlainText("hello there")
        tab.send()
        while tab.is_streaming:
            pump(0.1)
        pump(2)  # the previous engine's closing thread ends
        gc.collect()
        print(f"ROW {i} {psutil.Process().memory_info().rss / 2**20:.0f} "
              f"{mx.get_active_memory() / 2**20:.0f} {lanethreads.count()}", flush=True)
        old = w.engine
        if i < reloads:
            w.load_model(model)
    w.close()
    w.wait_for_engines(60)


def run(model: str, reloads: int, trim: bool) -> list[tuple[int, float, float, int]]:
    env = dict(os.environ)
    if not trim:
        env["TANDEM_NO_MALLOC_TRIM"] = "1"
    out = subprocess.run([sys.executable, __file__, "--child", "--model", model,
                          "--reloads", str(reloads)], env=env, capture_output=True, text=True,
                         timeout=900)
    rows = [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("ROW")]
    if len(rows) != reloads + 1:
        sys.exit(f"the child failed:\n{out.stdout}\n{out.stderr[-3000:]}")
    return [(int(i), float(rss), float(active), int(threads)) for i, rss, active, threads in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--reloads", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.model, args.reloads)
        return
    results = {}
    for trim in (True, False):
        rows = results[trim] = run(args.model, args.reloads, trim)
        print("as Tandem runs" if trim else "freed memory kept (TANDEM_NO_MALLOC_TRIM=1)")
        for i, rss, active, threads in rows:
            print(f"  load {i}: RSS {rss:.0f} MiB, MLX active {active:.0f} MiB, "
                  f"lane threads {threads}")
    now, kept = results[True][-1][1], results[False][-1][1]
    print(f"RSS after {args.reloads} reloads: {now:.0f} vs {kept:.0f} MiB = {now / kept:.2f}x; "
          f"growth since the first load {now - results[True][0][1]:+.0f} vs "
          f"{kept - results[False][0][1]:+.0f} MiB")


if __name__ == "__main__":
    main()
