"""`tandem --self-test [--gui]` from the checkout: a pass on the tiny model,
and a bad model failing fast with a clear message (the bundle runs the same
code: tests/test_bundle.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _self_test(*args, timeout=120):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    return subprocess.run([sys.executable, "-m", "app", "--self-test", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_self_test_passes_on_a_model_and_reports_it(tiny_model_dir):
    proc = _self_test("--model", str(tiny_model_dir))
    assert proc.returncode == 0, proc.stderr
    report, _ = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{"):])
    assert report["output_tokens"] > 0 and report["lanes_used"][0].startswith("prefill")
    assert report["gpu"] in ("none", "ok") or report["gpu"].startswith("unusable: ")
    assert "Tandem self-test passed." in proc.stdout
    # What a CPU lane's quantized layers run (issue 51): the kernels or why not.
    assert report["cpu_kernels"].startswith(("Tandem's", "MLX's op or a float32 copy, as measured"))
    assert report["cpu_matmul"] == "not probed: the weights are not quantized"  # float16
    assert report["cpu_attention"].startswith(("Tandem's attention", "MLX's attention"))


def test_gui_self_test_answers_on_a_model(tiny_model_dir):
    proc = _self_test("--gui", "--model", str(tiny_model_dir))
    assert proc.returncode == 0, proc.stderr
    report, _ = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{"):])
    assert report["window_visible_s"] < report["first_token_s"] <= report["answer_s"]


def test_bad_model_fails_fast_with_a_clear_message(tmp_path):
    missing = str(tmp_path / "missing.gguf")
    for args in (("--model", missing), ("--gui", "--model", missing)):
        proc = _self_test(*args, timeout=60)
        assert proc.returncode == 1
        assert "Tandem self-test FAILED" in proc.stderr and "not found" in proc.stderr
        assert "Traceback" not in proc.stderr
