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
