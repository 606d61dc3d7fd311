"""The dependency rule of DESIGN.md: app -> engine -> mlx; engine never imports
Qt, app never imports mlx directly."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_engine_imports_no_qt():
    offenders = {p.name for p in (ROOT / "engine").rglob("*.py")
                 if _imports(p) & {"PySide6", "pyqtgraph", "app"}}
    assert offenders == set()


def test_app_imports_no_mlx():
    offenders = {p.name for p in (ROOT / "app").rglob("*.py")
                 if _imports(p) & {"mlx", "mlx_lm"}}
    assert offenders == set()


def test_scheduling_code_imports_no_mlx():
    """The scheduler, the director, the router and the simulator are plain
    Python (nano-vllm's rule): they never import MLX, so they never see a tensor."""
    import subprocess
    import sys

    modules = ["engine.core.scheduler", "engine.core.director", "engine.core.router",
               "engine.core.policies", "engine.core.costmodel", "engine.core.step",
               "engine.core.memory", "engine.core.prefix_trie",
               "engine.sim", "engine.sim.simulator", "engine.sim.runner"]
    code = (f"import sys; import {', '.join(modules)}; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')); "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_server_imports_neither_mlx_nor_qt():
    """server/ talks to the engine's public API like the app: importing it
    loads no MLX (the engine loads MLX with a model) and no Qt."""
    import subprocess
    import sys

    code = ("import sys; import server.api; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('mlx', 'mlx_lm', 'PySide6', 'pyqtgraph')); print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
