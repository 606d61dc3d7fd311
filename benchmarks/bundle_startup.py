"""Bundle size and cold start: the built bundle vs running from the checkout.

Run (after `make bundle`):
  QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bundle_startup.py [--runs 3]

Each run starts `--self-test --gui` in a fresh process (offscreen Qt, a
throwaway database) and reads the times it prints, counted from the process's
start: window visible, model ready, first token. Bundle and checkout runs
alternate, so both see the same machine. "cold" runs drop the page cache first
(needs root; skipped otherwise), "warm" runs do not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = (ROOT / "dist" / "Tandem.app" / "Contents" / "MacOS" / "Tandem"
          if sys.platform == "darwin" else ROOT / "dist" / "Tandem" / "Tandem")
SOURCE = [sys.executable, "-m", "app"]
KEYS = ("window_visible_s", "model_ready_s", "first_token_s")


def drop_caches() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def one_run(command: list[str], cold: bool) -> dict[str, float] | None:
    if cold and not drop_caches():
        return None
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1")
    started = time.perf_counter()
    proc = subprocess.run([*command, "--self-test", "--gui"], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{command[0]} failed:\n{proc.stdout}\n{proc.stderr}")
    report, _ = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{"):])
    return {**{k: report[k] for k in KEYS}, "exit_s": wall}


def size_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*")
               if p.is_file() and not p.is_symlink()) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not BUNDLE.exists():
        raise SystemExit(f"{BUNDLE} missing: run `make bundle`")
    folder = BUNDLE.parents[2] if sys.platform == "darwin" else BUNDLE.parent
    results: dict[tuple[str, str], list[dict]] = {}
    for temperature in ("cold", "warm"):
        for _ in range(args.runs):
            for name, command in (("bundle", [str(BUNDLE)]), ("checkout", SOURCE)):
                run = one_run(command, temperature == "cold")
                if run is not None:
                    results.setdefault((temperature, name), []).append(run)
    summary = {f"{t} {n}": {k: round(statistics.median(r[k] for r in runs), 2)
                            for k in (*KEYS, "exit_s")}
               for (t, n), runs in results.items()}
    ratios = {}
    for t in ("cold", "warm"):
        if (t, "bundle") in results and (t, "checkout") in results:
            ratios[t] = {k: round(summary[f"{t} bundle"][k] / summary[f"{t} checkout"][k], 2)
                         for k in KEYS}
    print(json.dumps({
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.system()}",
        "date": time.strftime("%Y-%m-%d"),
        "runs_each": args.runs,
        "bundle_mib": round(size_mib(folder)),
        "bundled_model_mib": round(sum(p.stat().st_size for p in folder.rglob("*.gguf"))
                                   / 2**20),
        "median_s_since_process_start": summary,
        "bundle_over_checkout": ratios,
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
