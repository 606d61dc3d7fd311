"""The architecture as an enforced contract (docs/ARCHITECTURE.md).

Every import in engine/, app/ and server/ counts: at module level, inside
functions, and under `if TYPE_CHECKING`. Rooms import only downwards:
    engine.core  <-  engine.models  <-  engine.runtime  <-  engine (engine.py, handle.py)
    engine.sim and engine.remote import engine.core only; app and server use the
    engine from outside.
MLX stays in models and runtime (and the top), Qt stays in app, and no module
imports itself back through others (no cycles)."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "app", "server", "toolhost")
MLX, QT = {"mlx", "mlx_lm"}, {"PySide6", "pyqtgraph"}


def _module(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _graph() -> dict[str, set[str]]:
    """Module -> every module or package it imports (absolute names)."""
    graph = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name, is_package = _module(path)
            here = name if is_package else name.rpartition(".")[0]
            imported = set()
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    imported.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom):
                    base = here
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    source = (node.module or "") if not node.level else \
                        ".".join(p for p in (base, node.module) if p)
                    imported.add(source)
                    # `from pkg import module` imports the module itself
                    imported.update(f"{source}.{alias.name}" for alias in node.names)
            graph[name] = imported
    return graph


GRAPH = _graph()


def _internal(name: str) -> str | None:
    """The project module `name` is, or None (a library, or a name in a module)."""
    while name:
        if name in GRAPH:
            return name
        name = name.rpartition(".")[0]
    return None


APP_ROOMS = ("ui", "conversation", "store", "models", "connections", "scheduler", "tools",
             "chat", "window")


def _room(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "app" and len(parts) > 1 and parts[1] in APP_ROOMS:
        return f"app.{parts[1]}"
    if parts[0] != "engine":
        return parts[0]  # server, and app's top: cli, gui, selftest
    if len(parts) > 1 and parts[1] in ("core", "models", "runtime", "sim", "remote"):
        return f"engine.{parts[1]}"
    return "engine"  # the public API: engine/__init__, engine.engine, engine.handle


# What each room may import from the project's other rooms.
ALLOWED = {
    "engine.core": set(),
    "engine.models": {"engine.core"},
    "engine.runtime": {"engine.core", "engine.models"},
    "engine.sim": {"engine.core"},
    "engine.remote": {"engine.core"},  # HTTP to remote lanes: no MLX, no models
    "engine": {"engine.core", "engine.models", "engine.runtime", "engine.remote"},
    "server": {"engine"},  # the public names only
    "toolhost": {"engine"},  # MCP servers' tools: the engine's public names only
    # app's rooms, lowest first: each imports only rooms below it (and the
    # engine's public API); rooms beside each other talk by Qt signals that
    # the window connects.
    "app.ui": {"engine.models"},  # look and basics: theme, plain text, paths
    "app.conversation": {"engine"},  # a chat as plain data: no Qt
    "app.store": {"app.ui", "app.conversation"},  # SQLite
    "app.models": {"app.ui", "app.store", "engine", "engine.models"},
    "app.connections": {"app.ui", "app.store", "engine", "server"},
    "app.scheduler": {"app.ui", "engine"},
    # MCP servers for chats: their settings (keyring), the host, a chat's Tools button.
    "app.tools": {"app.ui", "app.store", "app.connections", "toolhost"},
    "app.chat": {"app.ui", "app.conversation", "app.store", "app.tools", "engine", "toolhost"},
    "app.window": {"app.ui", "app.conversation", "app.store", "app.models",
                   "app.connections", "app.scheduler", "app.tools", "app.chat", "engine"},
    "app": {f"app.{room}" for room in APP_ROOMS} | {"engine", "engine.models", "server",
                                                    "toolhost"},
}
FORBIDDEN_LIBRARIES = {
    "engine.core": MLX | QT, "engine.sim": MLX | QT, "engine.remote": MLX | QT,
    "engine.models": QT,
    "engine.runtime": QT, "engine": QT, "server": MLX | QT, "toolhost": MLX | QT,
    **{f"app.{room}": MLX for room in APP_ROOMS}, "app": MLX,
    "app.conversation": MLX | QT,
}


def _offences() -> list[str]:
    offences = []
    for module, imported in sorted(GRAPH.items()):
        room = _room(module)
        for name in sorted(imported):
            target = _internal(name)
            if target is not None:
                other = _room(target)
                if other != room and other not in ALLOWED[room]:
                    offences.append(f"{module} imports {target} ({room} -> {other})")
            elif name.split(".")[0] in FORBIDDEN_LIBRARIES[room]:
                offences.append(f"{module} imports {name}")
    return offences


def test_every_room_imports_only_what_it_may():
    assert _offences() == []


def test_no_import_cycles():
    edges = {m: {t for n in imported if (t := _internal(n)) and t != m}
             for m, imported in GRAPH.items()}
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_scheduling_code_imports_no_mlx_when_run():
    """The same rule at run time: importing the core and the simulator loads
    no MLX (nano-vllm's rule: the scheduler never sees a tensor)."""
    modules = sorted(m for m in GRAPH if _room(m) in ("engine.core", "engine.sim"))
    code = (f"import sys; import {', '.join(modules)}; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')); "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_server_imports_neither_mlx_nor_qt_when_run():
    """server/ talks to the engine's public API like the app: importing it
    loads no MLX (the engine loads MLX with a model) and no Qt."""
    code = ("import sys; import server.api; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('mlx', 'mlx_lm', 'PySide6', 'pyqtgraph')); print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_contract_sees_a_broken_rule(tmp_path):
    """The walker finds relative, lazy and TYPE_CHECKING imports (so the
    tests above can fail)."""
    global GRAPH
    saved = GRAPH
    try:
        GRAPH = dict(saved)
        GRAPH["engine.core.fake"] = {"engine.runtime.lane", "mlx.core"}
        GRAPH["engine.runtime.lane"] = saved["engine.runtime.lane"] | {"engine.core.fake"}
        GRAPH["engine.core.fake"] |= {"engine.core.fake2"}
        GRAPH["engine.core.fake2"] = {"engine.core.fake"}
        for test in (test_every_room_imports_only_what_it_may, test_no_import_cycles):
            try:
                test()
            except AssertionError:
                continue
            raise AssertionError(f"{test.__name__} missed a broken rule")
    finally:
        GRAPH = saved
    lazy = ast.parse("def f():\n    from ..runtime import lane\n")
    assert any(isinstance(n, ast.ImportFrom) and n.level == 2 for n in ast.walk(lazy))


def test_a_sideways_import_between_app_rooms_is_seen():
    """Each planted import breaks one app rule on its own: rooms beside each
    other, a room reaching up, Qt in the conversation model, the engine's
    insides from the app."""
    global GRAPH
    saved = GRAPH
    planted = {
        "app.chat.fake": "app.scheduler.hybrid_ledger",  # sideways: chat -> scheduler
        "app.models.fake": "app.window.status_bar",  # up: models -> window
        "app.connections.fake": "app.models.engine_session",  # sideways
        "app.conversation.fake": "PySide6.QtCore",  # the model stays Qt-free
        "app.scheduler.fake": "engine.runtime.lane",  # the engine's insides
    }
    try:
        for module, target in planted.items():
            GRAPH = dict(saved)
            GRAPH[module] = {target}
            found = [o for o in _offences() if o.startswith(f"{module} ")]
            assert len(found) == 1 and target.split(".")[0] in found[0], (module, found)
    finally:
        GRAPH = saved


def test_app_has_few_modules_at_its_top():
    """A feature's home is a room (docs/ARCHITECTURE.md), not app/'s top."""
    top = sorted(p.name for p in (ROOT / "app").glob("*.py"))
    assert len(top) <= 8, top
    rooms = sorted(p.name for p in (ROOT / "app").iterdir()
                   if p.is_dir() and (p / "__init__.py").exists())
    assert rooms == sorted(APP_ROOMS)


def _calls_and_assignments(package: str):
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            yield path.relative_to(ROOT).as_posix(), node


def test_nothing_plants_attributes_on_the_main_window():
    """Menus, the status bar, the theme and the engine are objects the window
    holds (main_window wires them), not attributes others set on it."""
    planted = []
    for where, node in _calls_and_assignments("app"):
        if where == "app/window/main_window.py":
            continue
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and ast.unparse(t.value) in (
                        "window", "self.window", "self._window", "w"):
                    planted.append(f"{where}:{node.lineno} {ast.unparse(t)}")
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "setattr" and \
                node.args and "window" in ast.unparse(node.args[0]):
            planted.append(f"{where}:{node.lineno} setattr")
    assert planted == []


ENGINES = {"Engine", "RemoteModelEngine", "EngineAPI"}


def test_only_the_engine_tells_engines_apart():
    """app/ and server/ ask an engine what it can do (`capabilities`), never
    which class it is."""
    telling = []
    for package in ("app", "server"):
        for where, node in _calls_and_assignments(package):
            text = ast.unparse(node) if isinstance(node, (ast.Compare, ast.Call,
                                                          ast.Attribute)) else ""
            if isinstance(node, ast.Attribute) and node.attr == "is_remote_model":
                telling.append(f"{where}:{node.lineno} {text}")
            elif isinstance(node, ast.Compare) and text.endswith("tokenizer is None"):
                telling.append(f"{where}:{node.lineno} {text}")
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance" and \
                    ENGINES & {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}:
                telling.append(f"{where}:{node.lineno} {text}")
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr" and \
                    len(node.args) > 1 and "remote" in ast.unparse(node.args[1]):
                telling.append(f"{where}:{node.lineno} {text}")
    assert telling == []


def test_the_main_window_stays_a_wiring_of_parts():
    """New window features get modules of their own (docs/ARCHITECTURE.md):
    app/window/main_window.py only wires tabs, docks, menus and the status bar."""
    lines = len((ROOT / "app" / "window" / "main_window.py").read_text().splitlines())
    assert lines < 300, f"app/window/main_window.py has {lines} lines"
