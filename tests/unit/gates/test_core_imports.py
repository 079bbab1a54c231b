"""The core worker's modules import each other without a circle.

Every module of `ember._private` counts, in every room (subpackage), each by its dotted name
under `ember._private` (`owner.task_queue`; a room's `__init__` by the room's name). Every import
between them counts: at module level, inside a function (a lazy import still ties two modules
together) and under `if TYPE_CHECKING:` (a type named there is a dependency all the same; a
consumer names what it needs of the core with a `typing.Protocol` of its own instead). The graph
must have no cycle, no room may grow past ~15 modules, and the pure state machines import no gRPC
and no other core module that does I/O.
"""
from __future__ import annotations

import ast
import functools
import pathlib

import ember._private

PRIVATE = pathlib.Path(ember._private.__file__).parent
PKG = "ember._private"
MAX_ROOM_MODULES = 15
# The modules that build a CoreWorker and hand it to the parts that run on it.
COMPOSITION_ROOTS = {"worker", "execution.worker_main"}
# Pure cores: events in, decisions out. They import nothing that talks to a socket.
PURE = {"owner.memory_store", "owner.reference_table", "owner.lineage", "owner.task_queue",
        "owner.task_queue_types", "owner.task_durations", "owner.actor_queue", "execution.result_pipeline"}
IO_MODULES = {"grpc", "grpc.aio", "asyncio"}
# What the pure cores may import besides each other: values and parsing, no I/O.
PURE_HELPERS = {"objects.object_ref", "objects.serialization", "runtime_env"}


@functools.cache
def _parse(path: pathlib.Path) -> ast.Module:
    """A core file's syntax tree, parsed once per run (the tests below only read it)."""
    return ast.parse(path.read_text())


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _files() -> dict[str, pathlib.Path]:
    """Every module of the core by its dotted name under `ember._private` (a package by its own)."""
    out = {}
    for path in sorted(PRIVATE.rglob("*.py")):
        parts = path.relative_to(PRIVATE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            out[".".join(parts)] = path
    return out


def _package(module: str, path: pathlib.Path) -> str:
    """The package a module's relative imports start from (`ember._private...`)."""
    full = f"{PKG}.{module}"
    return full if path.name == "__init__.py" else full.rpartition(".")[0]


def _imports(tree: ast.AST, package: str = PKG, modules: set[str] | None = None, *,
             typing: bool = True) -> set[str]:
    """Fully qualified names this module imports (without `typing`, outside TYPE_CHECKING
    blocks); relative imports resolve from `package`, the importing module's package. With
    `modules`, `from a import b` is `a.b` when that is one of them (a module), else `a` (a name
    of a's)."""
    return {name for name, _ in _import_lines(tree, package, modules, typing=typing)}


def _import_lines(tree: ast.AST, package: str = PKG, modules: set[str] | None = None, *,
                  typing: bool = True) -> set[tuple[str, int]]:
    """_imports' names, each with the line that imports it."""
    out: set[tuple[str, int]] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if not typing and isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                out.update((a.name, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package if child.level == 1 else package.rsplit(".", child.level - 1)[0]
                    mod = f"{base}.{child.module}" if child.module else base
                else:
                    mod = child.module or ""
                line = child.lineno
                if modules is None:
                    out.add((mod, line))
                    out.update((f"{mod}.{a.name}", line) for a in child.names)
                else:
                    out.update((f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod, line)
                               for a in child.names)
            visit(child)

    visit(tree)
    return out


def _edges() -> dict[tuple[str, str], list[int]]:
    """Every import of one core module by another, with the importing lines; `from room import
    name` ties to the module `room.name` when there is one, else to the room's `__init__`."""
    files = _files()
    modules = {f"{PKG}.{m}" for m in files}
    edges: dict[tuple[str, str], list[int]] = {}
    for m, path in files.items():
        for name, line in _import_lines(_parse(path), _package(m, path), modules):
            target = name[len(PKG) + 1:]
            if name in modules and target != m:
                edges.setdefault((m, target), []).append(line)
    return {e: sorted(lines) for e, lines in edges.items()}


def _graph() -> dict[str, set[str]]:
    """Each core module's imports of other core modules (_edges)."""
    graph: dict[str, set[str]] = {m: set() for m in _files()}
    for a, b in _edges():
        graph[a].add(b)
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


def test_every_import_counts() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .x import Y\n"
                     "def f():\n    from .z import W\n")
    assert _imports(tree) == {"typing", "typing.TYPE_CHECKING", f"{PKG}.x", f"{PKG}.x.Y", f"{PKG}.z",
                              f"{PKG}.z.W"}
    assert _imports(tree, typing=False) == {"typing", "typing.TYPE_CHECKING", f"{PKG}.z", f"{PKG}.z.W"}
    tree = ast.parse("from ..objects import plasma\nfrom . import lineage\n")
    assert _imports(tree, f"{PKG}.owner") == {f"{PKG}.objects", f"{PKG}.objects.plasma", f"{PKG}.owner",
                                             f"{PKG}.owner.lineage"}


def test_core_modules_import_no_circle() -> None:
    edges = _edges()
    found = []
    for comp in _cycles(_graph()):
        inside = set(comp)
        found.append(f"circle of {len(comp)} modules: " + "; ".join(
            f"{a} -> {b} (line {', '.join(map(str, lines))})"
            for (a, b), lines in sorted(edges.items()) if a in inside and b in inside))
    assert not found, "\n".join(found)


def test_only_the_composition_roots_import_the_core_worker() -> None:
    # Everything else holds the core through a Protocol of its own (what it uses of it).
    importers = {m for m, deps in _graph().items() if "core_worker" in deps}
    assert importers <= COMPOSITION_ROOTS, sorted(importers - COMPOSITION_ROOTS)


def test_rooms_stay_small() -> None:
    sizes = {str(d.relative_to(PRIVATE)): len(list(d.glob("*.py")))
             for d in {p.parent for p in PRIVATE.rglob("*.py")}}
    assert len(sizes) > 5, sizes  # the rooms were found
    big = {d: n for d, n in sizes.items() if n > MAX_ROOM_MODULES}
    assert not big, f"rooms of more than {MAX_ROOM_MODULES} modules: {big}"


def test_pure_cores_do_no_io() -> None:
    graph = _graph()
    files = _files()
    assert PURE <= set(graph), sorted(PURE - set(graph))
    for m in sorted(PURE):
        names = _imports(_parse(files[m]), _package(m, files[m]), typing=False)
        assert not names & IO_MODULES, f"{m} imports {sorted(names & IO_MODULES)}"
        assert graph[m] <= PURE | PURE_HELPERS, f"{m} imports {sorted(graph[m])}"


def _private_names(tree: ast.AST) -> set[str]:
    """`_name`s a module defines on its own objects: self._x assignments, _methods, slots; not
    the names its `__all__` exports (the internal KV door's are Ray's `_internal_kv_*`)."""
    out: set[str] = set()
    exported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            exported.update(e.value for e in ast.walk(node.value)
                            if isinstance(e, ast.Constant) and isinstance(e.value, str))
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            out.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
            out.update(e.value for e in ast.walk(node.value)
                       if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return {n for n in out if n.startswith("_") and not n.startswith("__")} - exported


def _core_files() -> dict[str, ast.AST]:
    files: dict[str, ast.AST] = {m: _parse(p) for m, p in _files().items()}
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
    files["a"] = ast.parse("__all__ = ['_x']\ndef _x():\n    pass\n")  # exported: Ray's name
    assert _reaches(files) == []


def test_no_core_module_reaches_into_another_s_private_attributes() -> None:
    assert _reaches(_core_files()) == []
