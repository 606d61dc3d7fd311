"""`tandem generate`: --model on either side of `generate`, the prompt from
stdin or a file, clear errors for unreadable or non-UTF-8 prompts; and the
OpenBLAS warnings (engine/runtime/blas.py) the CLI relies on."""

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app import cli
from engine import Capabilities, SamplingParams
from engine.models.gendefaults import GenerationDefaults
from engine.runtime import blas

ROOT = Path(__file__).resolve().parents[1]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the OpenBLAS preload is Linux-only")


def _run(args, stdin=None, env=None, timeout=120):
    """`python <args>` from the checkout, offline; bytes in, text out."""
    child_env = {k: v for k, v in os.environ.items() if k != "TANDEM_NO_OPENBLAS"}
    child_env.update(HF_HUB_OFFLINE="1", **(env or {}))
    done = subprocess.run([sys.executable, *args], input=stdin, cwd=ROOT, env=child_env,
                          capture_output=True, timeout=timeout)
    return done.returncode, done.stdout.decode(errors="replace"), \
        done.stderr.decode(errors="replace")


class _CapturingEngine:
    """Stands in for Engine.load: records the messages and the sampling,
    stops before generating. Its model's own defaults are `generation_defaults`."""

    generation_defaults = GenerationDefaults(temperature=0.6, top_p=0.9, top_k=20, min_p=0.02,
                                             repetition_penalty=1.05, source="the test's")
    capabilities = Capabilities(modes=("cpu-only",), remote_lanes=True, renders_locally=True,
                                logprobs=True, grammars=True, tools=False)

    def __init__(self):
        self.messages = None
        self.params = None

    def default_params(self, **overrides):
        from engine import Engine

        return Engine.default_params(self, **overrides)  # the engine's own merge

    def submit(self, messages, params):
        from engine import EngineError

        self.messages, self.params = messages, params
        raise EngineError("stopped by the test")

    def wait_ready(self, timeout=None, every_lane=False):
        return True

    def close(self):
        pass


@pytest.fixture
def captured(monkeypatch):
    import engine

    fake = _CapturingEngine()
    monkeypatch.setattr(engine.Engine, "load", lambda model, **lanes: fake)
    return fake


# 1. --model before or after `generate`

@pytest.mark.parametrize("order", ["before", "after"])
def test_model_is_accepted_before_and_after_generate(order, tmp_path, capsys):
    missing = str(tmp_path / "missing.gguf")
    argv = (["--model", missing, "generate", "hi"] if order == "before"
            else ["generate", "--model", missing, "hi"])
    assert cli.main(argv) == 2
    assert f"tandem: Model file not found: {missing}" in capsys.readouterr().err


def test_model_after_generate_wins(tmp_path, capsys):
    first, second = str(tmp_path / "first.gguf"), str(tmp_path / "second.gguf")
    assert cli.main(["--model", first, "generate", "--model", second, "hi"]) == 2
    assert f"Model file not found: {second}" in capsys.readouterr().err


# 2. the prompt from stdin or a file

def test_dash_reads_the_prompt_from_stdin(captured, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("héllo\nwörld\n".encode())))
    assert cli.main(["generate", "--system", "be brief", "-"]) == 2
    assert "tandem: stopped by the test" in capsys.readouterr().err
    assert captured.messages == [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": "héllo\nwörld\n"}]


def test_file_gives_the_prompt(captured, tmp_path):
    path = tmp_path / "prompt.txt"
    path.write_bytes("Why is the sky blue? ☀\n".encode())
    assert cli.main(["generate", "--file", str(path)]) == 2
    assert captured.messages == [{"role": "user", "content": "Why is the sky blue? ☀\n"}]


@pytest.mark.parametrize("argv", [["generate"], ["generate", "hi", "--file", "p.txt"],
                                  ["generate", "-", "--file", "p.txt"]])
def test_prompt_needs_exactly_one_source(argv, captured, capsys):
    assert cli.main(argv) == 2
    assert ("tandem: give the prompt as an argument, '-' to read stdin, or --file PATH "
            "(exactly one of them)") in capsys.readouterr().err
    assert captured.messages is None


def test_unreadable_file_is_a_clear_error(captured, tmp_path, capsys):
    missing = tmp_path / "missing.txt"
    assert cli.main(["generate", "--file", str(missing)]) == 2
    assert f"tandem: cannot read {missing}: No such file or directory" in capsys.readouterr().err
    assert cli.main(["generate", "--file", str(tmp_path)]) == 2
    assert f"tandem: cannot read {tmp_path}: Is a directory" in capsys.readouterr().err
    assert captured.messages is None


def test_prompt_from_stdin_end_to_end():
    """The real default model, the prompt piped in, --model after `generate`."""
    rc, out, err = _run(["-m", "app", "generate", "--model", "default", "--max-tokens", "3", "-"],
                        stdin=b"Say hello.\n")
    assert rc == 0, err
    assert "stopped: length; prompt" in err and "output 3 tokens" in err
    assert "Traceback" not in err
    assert out.strip()
    # The 4-bit default model's CPU lane: what its matmuls ran (issue 51).
    from engine.runtime import qmm
    said = "; CPU matmul: Tandem's kernels" if qmm.kernels() is not None else "; CPU matmul: "
    assert said in err.splitlines()[-1], err


# 2b. sampling: the model's own defaults, as in the app and the API

def test_an_answer_samples_with_the_models_own_defaults(captured):
    """Not greedy unless asked: greedy decoding loops on open prompts."""
    assert cli.main(["generate", "Tell me a story."]) == 2
    assert captured.params == SamplingParams(max_tokens=256, temperature=0.6, top_p=0.9,
                                             top_k=20, min_p=0.02, repetition_penalty=1.05)
    assert not captured.params.is_greedy


def test_temperature_0_is_greedy_and_each_option_given_overrides_its_field(captured):
    assert cli.main(["generate", "--temperature", "0", "hi"]) == 2
    assert captured.params.is_greedy
    assert captured.params == SamplingParams(max_tokens=256, temperature=0.0, top_p=0.9,
                                             top_k=20, min_p=0.02, repetition_penalty=1.05)
    assert cli.main(["generate", "--temperature", "1.2", "--top-p", "1", "--top-k", "0",
                     "--min-p", "0", "--repetition-penalty", "1", "--seed", "7",
                     "--max-tokens", "9", "hi"]) == 2
    assert captured.params == SamplingParams(max_tokens=9, temperature=1.2, seed=7)


def test_a_sampling_value_out_of_range_is_a_clear_error(captured, capsys):
    assert cli.main(["generate", "--top-p", "1.5", "hi"]) == 2
    assert "tandem: top_p" in capsys.readouterr().err
    assert captured.messages is None


# 3. prompts that are not UTF-8 text

BAD = "tandem: the prompt is not valid UTF-8 text (byte 0xff at position 0)"


def test_invalid_utf8_from_stdin_or_a_file(captured, tmp_path, monkeypatch, capsys):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"\xff\xfe bad")
    assert cli.main(["generate", "--file", str(path)]) == 2
    assert BAD in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe bad")))
    assert cli.main(["generate", "-"]) == 2
    assert BAD in capsys.readouterr().err
    assert captured.messages is None


def test_invalid_utf8_later_in_the_text_reports_its_position(captured, tmp_path, capsys):
    path = tmp_path / "bad.txt"
    path.write_bytes("héllo ".encode() + b"\xc3(")
    assert cli.main(["generate", "--file", str(path)]) == 2
    assert ("tandem: the prompt is not valid UTF-8 text (byte 0xc3 at position 7)"
            in capsys.readouterr().err)


@pytest.mark.skipif(sys.platform == "win32", reason="argv is not bytes on Windows")
def test_invalid_utf8_on_the_command_line():
    """Undecodable argv bytes reach Python as lone surrogates."""
    rc, out, err = _run(["-m", "app", "generate", b"\xff\xfe bad"])
    assert rc == 2 and BAD in err and "Traceback" not in err, err
    rc, out, err = _run(["-m", "app", "generate", "--system", b"ok \xff", "hi"])
    assert rc == 2 and "the system prompt is not valid UTF-8 text (byte 0xff at position 3)" in err


# 4. mlx imported before engine

@linux_only
def test_importing_mlx_before_engine_warns_once():
    rc, out, err = _run(["-c", "import mlx.core, engine, engine.runtime.blas as b; b.preload_openblas()"])
    assert rc == 0, err
    assert "RuntimeWarning" in err and err.count(blas.LATE_WARNING) == 1, err
    assert ("import engine before mlx (engine loads the system OpenBLAS, which must come before "
            "MLX; without it matrix products are about 50x slower)") in blas.LATE_WARNING


@linux_only
@pytest.mark.parametrize("code, env", [("import engine, mlx.core", {}),
                                       ("import mlx.core, engine", {"TANDEM_NO_OPENBLAS": "1"})])
def test_no_warning_in_the_right_order_or_when_disabled(code, env):
    rc, out, err = _run(["-W", "error", "-c", code], env=env)
    assert rc == 0 and "OpenBLAS" not in err, err


# 5. no system OpenBLAS at all

# Makes every OpenBLAS unloadable (or, with FOUND, loadable) before engine
# runs its preload; nothing else in these child processes uses ctypes.CDLL.
HIDE = textwrap.dedent("""
    import ctypes, ctypes.util, sys
    FOUND = {found}
    real_cdll = ctypes.CDLL
    def cdll(name, *args, **kwargs):
        if "openblas" not in str(name):
            return real_cdll(name, *args, **kwargs)
        if FOUND:
            return object()
        raise OSError(f"{{name}}: hidden by the test")
    ctypes.CDLL = cdll
    ctypes.util.find_library = lambda name: None
""")


def _advice_in_child(found, env=None):
    code = HIDE.format(found=found) + "import engine.runtime.blas as b; print(repr(b.openblas_advice()))"
    rc, out, err = _run(["-c", code], env=env)
    assert rc == 0, err
    return out.strip()


@linux_only
def test_advice_when_no_openblas_loads():
    assert _advice_in_child(found=False) == repr(blas.ADVICE)
    assert blas.ADVICE == (
        "The system OpenBLAS was not found, so matrix products use MLX's bundled reference "
        "BLAS and run about 50x slower. Install it for full speed "
        "(Debian/Ubuntu: sudo apt install libopenblas0-pthread).")


@linux_only
def test_no_advice_when_openblas_loads_or_is_disabled():
    assert _advice_in_child(found=True) == "None"
    assert _advice_in_child(found=False, env={"TANDEM_NO_OPENBLAS": "1"}) == "None"


@linux_only
@pytest.mark.parametrize("found", [False, True])
def test_cli_prints_the_advice_once_at_start(found, tmp_path):
    missing = str(tmp_path / "missing.txt")
    code = (HIDE.format(found=found) + "from app.cli import main\n"
            f"raise SystemExit(main(['generate', '--file', {missing!r}]))")
    rc, out, err = _run(["-c", code])
    assert rc == 2 and "tandem: cannot read" in err, err
    assert err.count(f"tandem: {blas.ADVICE}") == (0 if found else 1), err


@pytest.mark.parametrize("command, shown", [
    ("generate", ["--max-tokens", "(default: 256)", "greedy", "(default: the model's own",
                  "--top-k", "--min-p", "--repetition-penalty", "--seed"]),
    ("serve", ["(default: 127.0.0.1)", "(default: 8080)", "--api-key", "Bearer"]),
])
def test_help_says_what_each_option_does_and_its_default(capsys, command, shown):
    with pytest.raises(SystemExit) as done:
        cli._parser().parse_args([command, "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # help wraps lines
    for piece in shown:
        assert piece in text, piece
    assert "(default: None)" not in text and "(default: [])" not in text
    assert "bundled model" in text


def test_a_models_text_cannot_drive_the_terminal():
    """Escape sequences in an answer (a hostile remote, or a model echoing a
    paste) are shown as \\xNN: they cannot clear the screen or retitle it."""
    assert cli.terminal_text("a\x1b[2Jb\n\tc\x07\x9b") == "a\\x1b[2Jb\n\tc\\x07\\x9b"
    assert cli.terminal_text("naïve 東京 🙂") == "naïve 東京 🙂"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_crash_in_native_code_prints_every_threads_stack(tiny_model_dir):
    """`tandem` turns on faulthandler: a process dying of a segmentation fault
    (here sent to a running `tandem serve`) prints its threads' Python
    stacks to stderr, so the report says where it was."""
    import signal

    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--model",
                             str(tiny_model_dir), "--port", "0"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # it listens: the engine's threads are up
        assert "at http://127.0.0.1:" in first, first + proc.stderr.read()
        proc.send_signal(signal.SIGSEGV)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in stderr
    assert "most recent call first" in stderr and stderr.count("Thread 0x") >= 2, stderr


def test_a_request_path_cannot_drive_the_serve_terminal(tiny_model_dir):
    """`tandem serve` logs each request's path: one spelling escape codes
    (any web page can send it; the gate refuses it, the log still shows it)
    is printed escaped, as a model's answer is (issue 47)."""
    import socket

    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--model",
                             str(tiny_model_dir), "--port", "0"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert "at http://127.0.0.1:" in first, first + proc.stderr.read()
        port = int(first.split("http://127.0.0.1:")[1].split("/")[0].split()[0].rstrip(".,"))
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"GET /%1b%5b2J%1b%5d0%3btitle%07 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Connection: close\r\n\r\n")
            while s.recv(4096):
                pass
        line = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert "GET /\\x1b[2J\\x1b]0;title\\x07 404" in line, line
    assert "\x1b" not in line and "\x07" not in line
