"""`tandem generate` and `tandem serve` ended at every stage of their work
(issue 49): loading (a lane warming up), prefilling, saving KV, restoring,
the answer whole but not yet read, and idle; serve by SIGINT and by SIGTERM, generate by Ctrl+C (SIGINT) or by
its own end. The engine's test hook (engine/runtime/pauses.py) holds the
stage's thread until the signal has been sent, then lets it go on, so the
process ends while that thread works. Each ends with its documented code
(app/cli_exit.py: serve 0; generate 130 when Ctrl+C cut its answer,
else 0), never by a signal or a crash, and the disk tier reads back whole
afterwards: every file decodes, no half-written file is left, and a next
run restores what was saved."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import openai
import pytest

ROOT = Path(__file__).resolve().parents[1]
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)
WAIT_S = 120  # at most, for a stage to be reached or a process to end (a loaded machine)
BLOCK = 16  # the engine's prefix block size (Engine's default)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes")


class Tandem:
    """`python -m app ARGS`, its thread held at `stage` if given (the test
    hook reads one byte from a pipe passed down); its output as it comes."""

    def __init__(self, args: list[str], stage: str | None = None):
        read, self._release = os.pipe()
        env = {k: v for k, v in os.environ.items() if k != "TANDEM_NO_OPENBLAS"}
        env["HF_HUB_OFFLINE"] = "1"
        if stage:
            env.update(TANDEM_PAUSE_AT=stage, TANDEM_PAUSE_FD=str(read))
        self.proc = subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, errors="replace", pass_fds=(read,))
        os.close(read)
        self.out: list[str] = []
        self.err: list[str] = []
        self._seen = threading.Condition()
        self._readers = [threading.Thread(target=self._read, args=pair, daemon=True)
                         for pair in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self._readers:
            reader.start()

    def _read(self, stream, lines: list[str]) -> None:
        for line in stream:
            with self._seen:
                lines.append(line)
                self._seen.notify_all()
        with self._seen:
            lines.append("")  # its end
            self._seen.notify_all()

    def wait_for(self, text: str) -> str:
        """The first line (stdout or stderr) holding `text`, once it comes."""
        def found():
            return next((line for line in self.out + self.err if text in line), None)

        with self._seen:
            self._seen.wait_for(lambda: found() or ("" in self.out and "" in self.err),
                                WAIT_S)
            line = found()
        assert line, f"{text!r} never came:\n{''.join(self.err)}"
        return line

    def end(self, sig: int | None = None) -> int:
        """Send `sig` (if any), then let the held thread go on (once the
        process has handled the signal: engine/runtime/pauses.py); its exit code."""
        if sig is not None:
            self.proc.send_signal(sig)
        os.write(self._release, b"s" if sig is not None else b"x")
        try:
            code = self.proc.wait(WAIT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            os.close(self._release)
        for reader in self._readers:
            reader.join(WAIT_S)
        self.proc.stdout.close()
        self.proc.stderr.close()
        stderr = "".join(self.err)
        assert "Fatal Python error" not in stderr and "Traceback" not in stderr, stderr
        return code

    @property
    def stderr(self) -> str:
        return "".join(self.err)


def _tier_files(folder: Path, loaded) -> int:
    """Every KV file under `folder` decodes whole against the model (what
    DiskTier.read checks before MLX sees it), and no half-written temporary
    is left; how many there are."""
    from engine.models.identity import model_identity
    from engine.runtime import kv_file, kv_folder
    from engine.runtime.disk_tier import DiskTier

    tier = DiskTier(folder, model_identity(loaded), BLOCK, 1 << 30,
                    layout=kv_file.layout_of(loaded.model))
    assert not tier.notes, tier.notes  # nothing found unreadable (and removed)
    for ref in tier.segments.values():
        data = kv_folder.read_regular(ref.path, tier.layout.most_bytes(ref.end - ref.start))
        kv_file.decode(data, tier.identity, ref.start, list(ref.blocks), tier.layout)
    assert not list(folder.rglob(".kv-*")), "a half-written file was left"
    return len(tier.segments)


# ---- tandem generate ----------------------------------------------------------------

def _generate(model_dir: Path, folder: Path, prompt: str, stage: str | None = None) -> Tandem:
    return Tandem(["generate", "--model", str(model_dir), "--temperature", "0",
                   "--max-tokens", "8", "--kv-cache-dir", str(folder), prompt], stage)


def test_tandem_generate_ends_cleanly_at_every_stage(tiny_model_dir, tiny_loaded, tmp_path):
    folder = tmp_path / "kv"
    first, second = LONG, LONG + " and then the dog slept"
    # Ctrl+C while a lane warms up, or while a lane prefills: 130, and the
    # answer so far with its stats.
    for stage in ("loading", "prefilling"):
        run = _generate(tiny_model_dir, folder, first, stage)
        run.wait_for(f"paused at {stage}")
        assert run.end(signal.SIGINT) == 130, (stage, run.stderr)
        _tier_files(folder, tiny_loaded)  # (the prompt prefilled may be saved)
    assert "stopped; prompt 124 tokens" in run.stderr  # its stats: cancelled
    # Its own end, every thread idle: 0, and the answer's KV is saved.
    run = _generate(tiny_model_dir, folder, first)
    assert run.end() == 0
    saved = _tier_files(folder, tiny_loaded)
    assert saved > 0
    # Ctrl+C while the restorer reads that KV back: the answer is cancelled.
    run = _generate(tiny_model_dir, folder, first, "restoring")
    run.wait_for("paused at restoring")
    assert run.end(signal.SIGINT) == 130 and "stopped; prompt" in run.stderr
    assert _tier_files(folder, tiny_loaded) == saved
    # The answer is whole and its KV being saved as the process ends (Ctrl+C
    # then is held): the save is written whole, 0, and a next run restores it.
    run = _generate(tiny_model_dir, folder, second, "saving-kv")
    run.wait_for("paused at saving-kv")
    assert run.end(signal.SIGINT) == 0, run.stderr
    assert "stopped: length" in run.stderr and _tier_files(folder, tiny_loaded) > saved
    run = _generate(tiny_model_dir, folder, second)
    assert run.end() == 0 and "tokens from disk in" in run.stderr
    # Ctrl+C after the answer ended, before its reader was told (the last
    # events on their way): it is whole, so 0 and the answer printed.
    run = _generate(tiny_model_dir, folder, second, "finishing")
    run.wait_for("paused at finishing")
    assert run.end(signal.SIGINT) == 0, run.stderr
    assert "stopped: length" in run.stderr and "output 8 tokens" in run.stderr
    assert "".join(run.out).strip()


# ---- tandem serve -------------------------------------------------------------------

def _serve(model_dir: Path, folder: Path, stage: str | None = None) -> Tandem:
    return Tandem(["serve", "--model", str(model_dir), "--port", "0",
                   "--kv-cache-dir", str(folder)], stage)


class _Ask:
    """A chat request to `url` on a thread of its own: the answer or the error."""

    def __init__(self, served: tuple[str, str], prompt: str):
        self.done: dict = {}
        self._thread = threading.Thread(target=self._run, args=(*served, prompt), daemon=True)
        self._thread.start()

    def _run(self, url: str, model: str, prompt: str) -> None:
        try:
            with openai.OpenAI(base_url=url, api_key="x", max_retries=0,
                               timeout=WAIT_S) as client:
                self.done["answer"] = client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": prompt}],
                    max_tokens=8, temperature=0)
        except Exception as e:  # the test says what went wrong
            self.done["error"] = e

    def answer(self):
        self._thread.join(WAIT_S)
        assert "answer" in self.done, self.done
        return self.done["answer"]


def _listening(run: Tandem) -> tuple[str, str]:
    """Its base URL and the model id it serves, once it listens."""
    line = run.wait_for("Tandem serves")
    return re.search(r"at (http://\S+/v1)", line).group(1), re.search(r"'([^']+)'", line).group(1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_tandem_serve_ends_cleanly_at_every_stage(tiny_model_dir, tiny_loaded, tmp_path, sig):
    """Each stage stopped by `sig`: exit 0, "Tandem serve stopped.", a
    request under way still answered, and the disk tier whole."""
    folder = tmp_path / "kv"
    first, second = LONG, LONG + " and then the dog slept"

    def stopped(run: Tandem) -> None:
        assert run.end(sig) == 0, run.stderr
        assert run.out[-2:] == ["Tandem serve stopped.\n", ""], run.out

    run = _serve(tiny_model_dir, folder, "loading")
    run.wait_for("paused at loading")
    stopped(run)
    run = _serve(tiny_model_dir, folder)  # idle: listening, nothing asked
    _listening(run)
    stopped(run)
    assert _tier_files(folder, tiny_loaded) == 0
    # A request prefilling: answered, then the server stops; its KV is saved.
    run = _serve(tiny_model_dir, folder, "prefilling")
    ask = _Ask(_listening(run), first)
    run.wait_for("paused at prefilling")
    stopped(run)
    cold = ask.answer()
    saved = _tier_files(folder, tiny_loaded)
    assert saved > 0
    # An answer's KV being saved: written whole before the process ends.
    run = _serve(tiny_model_dir, folder, "saving-kv")
    ask = _Ask(_listening(run), second)
    run.wait_for("paused at saving-kv")
    ask.answer()
    stopped(run)
    assert _tier_files(folder, tiny_loaded) > saved
    # The first prompt's KV being read back: answered from it, the same.
    run = _serve(tiny_model_dir, folder, "restoring")
    ask = _Ask(_listening(run), first)
    run.wait_for("paused at restoring")
    stopped(run)
    warm = ask.answer()
    assert warm.usage.prompt_tokens_details.cached_tokens > 0
    assert warm.choices[0].message.content == cold.choices[0].message.content
    assert _tier_files(folder, tiny_loaded) > saved
