"""The core worker's modules import each other without a circle.

Every import between `ember._private` modules counts, at module level or inside a function
(a lazy import still ties two modules together); only imports under `if TYPE_CHECKING:` are
free. The graph must have no cycle, and the pure state machines import no gRPC and no other
core module that does I/O.
"""
from __future__ import annotations

import ast
import functools
import pathlib

import ember._private

PRIVATE = pathlib.Path(ember._private.__file__).parent
PKG = "ember._private"
# Pure cores: events in, decisions out. They import nothing that talks to a socket.
PURE = {"memory_store", "reference_table", "lineage", "task_queue", "task_queue_types",
        "task_durations", "actor_queue", "result_pipeline"}
IO_MODULES = {"grpc", "grpc.aio", "asyncio"}


@functools.cache
def _parse(path: pathlib.Path) -> ast.Module:
    """A core file's syntax tree, parsed once per run (the tests below only read it)."""
    return ast.parse(path.read_text())


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str) -> set[str]:
    """Fully qualified names this module imports (outside TYPE_CHECKING blocks)."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = PKG if child.level == 1 else PKG.rsplit(".", child.level - 1)[0]
                    mod = f"{base}.{child.module}" if child.module else base
                else:
                    mod = child.module or ""
                out.add(mod)
                out.update(f"{mod}.{a.name}" for a in child.names)
            visit(child)

    visit(tree)
    return out


def _graph() -> dict[str, set[str]]:
    mods = {p.stem for p in PRIVATE.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for m in mods:
        names = _imports(_parse(PRIVATE / f"{m}.py"), m)
        graph[m] = {n[len(PKG) + 1:].split(".")[0] for n in names
                    if n.startswith(PKG + ".")} & mods - {m}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_type_checking_imports_are_free() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .x import Y\n"
                     "def f():\n    from .z import W\n")
    assert _imports(tree, "m") == {"typing", "typing.TYPE_CHECKING", f"{PKG}.z", f"{PKG}.z.W"}


def test_core_modules_import_no_circle() -> None:
    assert _cycles(_graph()) == []


def test_pure_cores_do_no_io() -> None:
    graph = _graph()
    for m in sorted(PURE & set(graph)):
        names = _imports(_parse(PRIVATE / f"{m}.py"), m)
        assert not names & IO_MODULES, f"{m} imports {sorted(names & IO_MODULES)}"
        assert graph[m] <= PURE | {"object_ref", "serialization"}, f"{m} imports {sorted(graph[m])}"


def _private_names(tree: ast.AST) -> set[str]:
    """`_name`s a module defines on its own objects: self._x assignments, _methods, slots."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            out.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
            out.update(e.value for e in ast.walk(node.value)
                       if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return {n for n in out if n.startswith("_") and not n.startswith("__")}


def _core_files() -> dict[str, ast.AST]:
    files: dict[str, ast.AST] = {p.stem: _parse(p) for p in PRIVATE.glob("*.py") if p.stem != "__init__"}
    files["actor"] = _parse(PRIVATE.parent / "actor.py")
    return files


def _reaches(files: dict[str, ast.AST]) -> list[str]:
    """`obj._name` where _name belongs to another core module's objects."""
    own = {m: _private_names(t) for m, t in files.items()}
    found = []
    for m, tree in files.items():
        others = set().union(*(names for o, names in own.items() if o != m)) - own[m]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in others and not (
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{m}.py:{node.lineno} .{node.attr}")
    return found


def test_reach_finder_finds_a_reach() -> None:
    files = {"a": ast.parse("class A:\n    def __init__(self):\n        self._x = 1\n"),
             "b": ast.parse("def f(a):\n    return a._x\n")}
    assert _reaches(files) == ["b.py:2 ._x"]


def test_no_core_module_reaches_into_another_s_private_attributes() -> None:
    assert _reaches(_core_files()) == []
