"""The llama.cpp anchor for Tandem's CPU lane (issue 51): llama.cpp's own
benchmarks, built from the llama.cpp that llama-cpp-python vendors in its
PyPI source release (not a project dependency), against Tandem's CPU lane on
the same GGUF, the same threads, alternated round by round.

- one stream's decode: `llama-bench -p 0 -n TOKENS -t THREADS` against a
  fresh Tandem engine of one CPU lane (its default path: the probe's choice),
  greedy, drafts off (benchmarks/cpu_lane_paths.py's measurement);
- 16 streams: `llama-batched-bench -npl 16` (16 parallel sequences, their
  aggregate generation speed) against 16 requests at once;
- prefill: `llama-bench -p PROMPT -n 0` against a ~600-token prompt's TTFT.

Run: .venv/bin/python benchmarks/llama_cpp_anchor.py [--rounds 3] [--model GGUF]
     [--shape 1.5b]

`--model` runs both on that GGUF; `--shape 1.5b` first writes one with a
1.5B model's layer shapes (hidden 1536, 28 layers, MLP 8960, 12 query and 2
key-value heads; a 32,000-token vocabulary), random K-quant blocks mixed as
llama.cpp's Q4_K_M (benchmarks/gguf_load_memory.py's builder, with a ChatML
template), tensor by tensor with the gguf package, into build/llama_cpp/.
The first run builds build/llama_cpp/ (pip download of the sdist, cmake; a few
minutes); later runs reuse it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "llama_cpp"
VERSION = "0.3.36"  # llama-cpp-python's release: the llama.cpp it vendors
TOOLS = ("llama-bench", "llama-batched-bench")


def build() -> Path:
    """The folder holding llama-bench and llama-batched-bench, built once."""
    bin_dir = BUILD / "out" / "bin"
    if all((bin_dir / t).exists() for t in TOOLS):
        return bin_dir
    BUILD.mkdir(parents=True, exist_ok=True)
    sdist = BUILD / f"llama_cpp_python-{VERSION}.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", f"llama-cpp-python=={VERSION}", "-d",
                        str(BUILD)], check=True)
    source = BUILD / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    if not source.exists():
        with tarfile.open(sdist) as tar:
            tar.extractall(BUILD, filter="data")
    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or "cmake"
    subprocess.run([cmake, "-S", str(source), "-B", str(BUILD / "out"), "-G", "Ninja",
                    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
                    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON"], check=True)
    subprocess.run([cmake, "--build", str(BUILD / "out"), "-j", str(os.cpu_count() or 2),
                    "--target", *TOOLS], check=True)
    return bin_dir


def llama_cpp(bin_dir: Path, model: str, threads: int, tokens: int, prompt: int) -> dict:
    def bench(*args) -> float:
        out = subprocess.run([str(bin_dir / "llama-bench"), "-m", model, "-t", str(threads),
                              "-r", "3", "-o", "json", *args], capture_output=True, text=True,
                             check=True, timeout=1800).stdout
        return float(json.loads(out)[0]["avg_ts"])

    batched = subprocess.run(
        [str(bin_dir / "llama-batched-bench"), "-m", model, "-t", str(threads), "-tb",
         str(threads), "-c", "8192", "-b", "2048", "-ub", "512", "-npp", "32", "-ntg",
         str(tokens), "-npl", "16", "--output-format", "jsonl"],
        capture_output=True, text=True, check=True, timeout=1800).stdout
    record = json.loads([line for line in batched.splitlines() if line.startswith("{")][-1])
    return {"decode_1": bench("-p", "0", "-n", str(tokens)),
            "decode_16": float(record["speed_tg"]),
            "prefill": bench("-p", str(prompt), "-n", "0")}


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SHAPES = {"1.5b": dict(hidden=1536, layers=28, intermediate=8960, heads=12, kv_heads=2,
                       vocab=32000)}


def shaped_model(name: str) -> Path:
    """The GGUF of a model shape, written once (random weights: speed only)."""
    path = BUILD / f"shape-{name}.gguf"
    if not path.exists():
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from gguf_load_memory import build as build_gguf

        BUILD.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        build_gguf(partial, **SHAPES[name], chat_template=CHATML)
        partial.rename(path)
    return path


def tandem(tokens: int, model: str = "default") -> dict:
    """A fresh process and engine (benchmarks/cpu_lane_paths.py's `one`)."""
    env = {k: v for k, v in os.environ.items() if k != "TANDEM_CPU_MATMUL"}
    env["HF_HUB_OFFLINE"] = "1"
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu_lane_paths.py"),
                          "--one", "tandem", "--tokens", str(tokens), "--model", model],
                         env=env,
                         capture_output=True, text=True, timeout=1800, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--prompt", type=int, default=600)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--model", default=None, help="a GGUF (default: the bundled model)")
    parser.add_argument("--shape", choices=sorted(SHAPES), help="a GGUF of this shape, written")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from engine.models.loader import default_model_path

    model = args.model or (str(shaped_model(args.shape)) if args.shape else None)
    tandem_model = model or "default"
    model = model or str(default_model_path())
    bin_dir = build()
    rows = []
    for round_ in range(args.rounds):
        first_llama = round_ % 2 == 0
        got = {}
        for who in (("llama.cpp", "tandem") if first_llama else ("tandem", "llama.cpp")):
            got[who] = (llama_cpp(bin_dir, model, args.threads, args.tokens, args.prompt)
                        if who == "llama.cpp" else tandem(args.tokens, tandem_model))
        ratio = {k: round(got["tandem"][k] / got["llama.cpp"][k], 2)
                 for k in ("decode_1", "decode_16", "prefill")}
        row = {"round": round_, **got, "tandem_vs_llama_cpp": ratio}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"machine": f"{platform.machine()} {platform.node()}",
                      "threads": args.threads, "model": Path(model).name,
                      "date": time.strftime("%Y-%m-%d %H:%M"),
                      "median_tandem_vs_llama_cpp": {k: statistics.median(
                          r["tandem_vs_llama_cpp"][k] for r in rows)
                          for k in ("decode_1", "decode_16", "prefill")}}, indent=1))


if __name__ == "__main__":
    main()
