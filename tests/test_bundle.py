"""The built bundle works on its own: `make test-bundle` (after `make bundle`).

It runs from an empty folder, offline, with no access to the checkout's Python
packages, as a user's double-click would: the self-test loads the bundled
default model and generates; the GUI answers a message offscreen.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.bundle, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
if sys.platform == "darwin":
    EXE = ROOT / "dist" / "Tandem.app" / "Contents" / "MacOS" / "Tandem"
else:
    EXE = ROOT / "dist" / "Tandem" / "Tandem"


@pytest.fixture(scope="module")
def bundle_env(tmp_path_factory):
    if not EXE.exists():
        pytest.fail(f"{EXE} is missing: run `make bundle` first (make test-bundle does)")
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "TANDEM_"))}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"),
               XDG_CONFIG_HOME=str(home / "config"), HF_HUB_OFFLINE="1",
               QT_QPA_PLATFORM="offscreen", TANDEM_DB=str(home / "tandem.db"))
    return env, home


def _run(args, env, cwd):
    proc = subprocess.run([str(EXE), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    start = proc.stdout.index("{")
    report, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
    return report, proc.stdout


def test_bundle_ships_the_model_and_licences():
    internal = EXE.parent / "_internal" if sys.platform != "darwin" else \
        EXE.parents[1] / "Resources"
    assert (internal / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").stat().st_size > 50e6
    licences = internal / "resources" / "licenses"
    assert "Apache License" in (licences / "SmolLM2-135M-Instruct.txt").read_text()
    assert "Apache License" in (licences / "LICENSE").read_text()
    if sys.platform.startswith("linux"):
        desktop = (EXE.parent / "tandem.desktop").read_text()
        assert "Name=Tandem" in desktop and "Exec=" in desktop


def test_self_test_loads_the_bundled_model_and_generates(bundle_env):
    env, home = bundle_env
    report, stdout = _run(["--self-test"], env, home)
    assert report["frozen"] is True
    assert report["tandem"] == _pyproject_version()  # Info.plist and About use the same
    assert report["model"].startswith("SmolLM2-135M-Instruct")
    assert report["output_tokens"] > 0 and report["answer"].strip()
    assert "Tandem self-test passed." in stdout
    if sys.platform.startswith("linux"):
        assert "_internal" in report["blas"]  # the bundle's own OpenBLAS
    # The bundle ships Tandem's CPU kernels where this checkout built them (issue 51):
    # loaded and trusted there, the CPU lane on the quantized weights, its attention too.
    status = ROOT / "engine" / "runtime" / "_tandem_kernels.status"
    if status.exists() and status.read_text().startswith("built"):
        assert report["cpu_kernels"].startswith("Tandem's"), report["cpu_kernels"]
        assert "on the quantized weights" in report["cpu_matmul"], report["cpu_matmul"]
        assert "kernels are not used" not in report["cpu_attention"], report["cpu_attention"]


def test_bundled_gui_answers_a_message(bundle_env):
    env, home = bundle_env
    report, stdout = _run(["--self-test", "--gui"], env, home)
    assert report["gui_answer"].strip()
    assert report["window_icon"] is True
    assert report["window_visible_s"] < report["first_token_s"] <= report["answer_s"]
    assert "Tandem GUI self-test passed." in stdout


def test_a_broken_model_fails_with_a_clear_message(bundle_env, tmp_path):
    env, home = bundle_env
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    proc = subprocess.run([str(EXE), "--self-test", "--model", str(bad)], env=env, cwd=home,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "Tandem self-test FAILED" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux desktop entry")
def test_desktop_entry_installs_with_absolute_paths(tmp_path):
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path))
    subprocess.run([str(EXE.parent / "install-desktop-entry.sh")], env=env, check=True,
                   capture_output=True)
    entry = (tmp_path / "applications" / "tandem.desktop").read_text()
    assert f'Exec="{EXE}" %U' in entry
    icon = entry.split("Icon=", 1)[1].splitlines()[0]
    assert Path(icon).is_absolute() and Path(icon).exists()


def _serve(env, home, *args):
    """`Tandem serve --port 0 ARGS` from the bundle: (the process, its port,
    its stderr's file), once the line it prints when it listens is read."""
    import re
    import threading

    errors = home / "serve-stderr.txt"
    with open(errors, "w") as stderr_file:
        proc = subprocess.Popen([str(EXE), "serve", "--port", "0", *args], env=env, cwd=home,
                                stdout=subprocess.PIPE, stderr=stderr_file, text=True)
    found, listening = {}, threading.Event()

    def read():  # the port, then drain its output (access lines) so that it never blocks
        for line in proc.stdout:
            match = re.search(r"at http://127\.0\.0\.1:(\d+)/v1", line)
            if match and not listening.is_set():
                found["port"] = int(match.group(1))
                listening.set()
        listening.set()  # it ended without listening: its stderr says why

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not (listening.wait(180) and "port" in found):
        _stop(proc, reader)
        pytest.fail(errors.read_text())
    proc.reader = reader
    return proc, found["port"], errors


def _stop(proc, reader=None) -> None:
    proc.terminate()
    proc.wait(30)
    reader = reader or getattr(proc, "reader", None)
    if reader is not None:
        reader.join(10)
    proc.stdout.close()


def _chat(port: int, content) -> dict:
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", method="POST",
        headers={"Content-Type": "application/json"},
        data=json.dumps({"messages": [{"role": "user", "content": content}],
                         "max_tokens": 4}).encode())
    return json.loads(urllib.request.urlopen(request, timeout=120).read())


def test_bundled_server_answers_the_api(bundle_env):
    """`Tandem serve` from the bundle (uvicorn and starlette frozen with it),
    on the port it picks (`--port 0`), from the line it prints once it listens."""
    import urllib.request

    env, home = bundle_env
    proc, port, errors = _serve(env, home)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10).read()
        assert json.loads(body)["status"] == "ok"
        assert _chat(port, "hi")["usage"]["completion_tokens"] >= 1
    finally:
        _stop(proc)
    assert "Traceback" not in errors.read_text()


@pytest.mark.parametrize("family", ["smolvlm", "qwen2_5_vl"])
def test_bundled_server_reads_an_image(bundle_env, tmp_path, family):
    """Vision in the bundle: a tiny random model of each family (mlx-vlm's
    classes, transformers' PIL-backed processors, Pillow) loads from a folder
    and reads a PNG sent as a data: URL."""
    import base64
    import io

    from PIL import Image

    from tests.vision_models import build_qwen25_vl, build_smolvlm

    env, home = bundle_env
    build = build_smolvlm if family == "smolvlm" else build_qwen25_vl
    model = build(tmp_path / family)
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(out, "PNG")
    url = "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
    proc, port, errors = _serve(env, home, "--model", str(model))
    try:
        answer = _chat(port, [{"type": "image_url", "image_url": {"url": url}},
                              {"type": "text", "text": "What is it?"}])
        assert answer["usage"]["completion_tokens"] >= 1
        assert answer["usage"]["prompt_tokens"] > 4  # the image's tokens among them
    finally:
        _stop(proc)
    assert "Traceback" not in errors.read_text()


def _pyproject_version() -> str:
    import tomllib

    with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]
