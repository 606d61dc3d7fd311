"""What MLX runs on (engine/models/diagnostics.py), the platform faked: a
Mac whose GPU cannot run kernels (a hosted runner's) runs everything on the
CPU and says so; a bundle without its Metal shader library is a broken
build; and, where a GPU runs kernels, a GPU lane answers as the CPU lane."""

from __future__ import annotations

import sys

import mlx.core as mx
import pytest

from engine import default_lanes  # imported before any test fakes the platform
from engine.models import diagnostics


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(diagnostics, "_usable", None)
    yield
    diagnostics._usable = None


def test_a_mac_gpu_that_cannot_run_kernels_sends_everything_to_the_cpu(fresh, monkeypatch,
                                                                        capsys):
    chosen = []

    def broken_kernels():
        raise RuntimeError("no Metal device")

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(mx, "is_available", lambda device: True)
    monkeypatch.setattr(mx, "default_device", lambda: mx.gpu)
    monkeypatch.setattr(mx, "set_default_device", chosen.append)
    monkeypatch.setattr(diagnostics, "_run_kernels", broken_kernels)
    usable, why = diagnostics.gpu_usable()
    assert not usable and "cannot run kernels on it (no Metal device)" in why
    assert chosen == [mx.cpu]
    assert "running on the CPU" in capsys.readouterr().err
    assert diagnostics.gpu_check().startswith("unusable: MLX reports a GPU")
    assert [lane.device for lane in default_lanes()] == ["cpu"]


def test_a_mac_gpu_that_runs_kernels_gets_a_gpu_lane(fresh, monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(mx, "is_available", lambda device: True)
    monkeypatch.setattr(diagnostics, "_run_kernels", lambda: None)
    assert diagnostics.gpu_usable() == (True, "")
    assert [lane.device for lane in default_lanes()] == ["gpu", "cpu"]


def test_a_bundle_without_its_metallib_is_a_broken_build(monkeypatch, tmp_path):
    lib = tmp_path / "mlx" / "lib"
    lib.mkdir(parents=True)
    (lib / "libmlx.dylib").write_bytes(b"")
    (lib / "mlx.metallib").write_bytes(b"")
    top = tmp_path / "libmlx.dylib"  # PyInstaller's copy at the top of the bundle
    top.write_bytes(b"")
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert str(tmp_path) in diagnostics.metallib_problem()
    (tmp_path / "mlx.metallib").write_bytes(b"")
    assert diagnostics.metallib_problem() is None
    monkeypatch.setattr(sys, "platform", "linux")
    assert diagnostics.metallib_problem() is None


@pytest.mark.gpu
def test_a_gpu_lane_answers_as_the_cpu_lane(make_engine):
    """Where a GPU runs kernels (a Mac, a CUDA machine): greedy answers agree."""
    from engine import LaneSpec, SamplingParams

    texts = []
    for device in ("gpu", "cpu"):
        engine = make_engine(lanes=[LaneSpec(device, device, "float32")])
        done = engine.generate([{"role": "user", "content": "Count to five."}],
                               SamplingParams(max_tokens=12, temperature=0.0), timeout=120)
        texts.append(done.text)
    assert texts[0] == texts[1]
