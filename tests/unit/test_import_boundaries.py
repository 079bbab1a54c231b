"""Import boundaries of the kit and the services.

- Each service's server module (and its `python -m` entry) imports no `ember` module: services
  share only `ember_common` (checked in a fresh interpreter per service, so nothing else loaded
  it first).
- The kit imports neither `ember` nor a service.
- No import circles inside the kit or inside a service package (lazy imports in functions
  included), read from the source with `ast`.
"""
from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Each service's process entry (`python -m ember_x` runs __main__, which imports server).
SERVICES = {"ember_gcs": ["ember_gcs.__main__", "ember_gcs.server"],
            "ember_raylet": ["ember_raylet.__main__", "ember_raylet.server"],
            "ember_objmgr": ["ember_objmgr.__main__", "ember_objmgr.server"]}
PACKAGES = {"ember_common": ROOT / "common" / "ember_common",
            "ember_gcs": ROOT / "services" / "gcs" / "ember_gcs",
            "ember_raylet": ROOT / "services" / "raylet" / "ember_raylet",
            "ember_objmgr": ROOT / "services" / "objmgr" / "ember_objmgr"}
FORBIDDEN_IN_KIT = ("ember", "ember_gcs", "ember_raylet", "ember_objmgr", "ember_serve_proxy")
KIT_MODULES = sorted(f"ember_common.{p.stem}" for p in PACKAGES["ember_common"].glob("*.py")
                     if p.stem != "__init__")


def _top(name: str) -> str:
    return name.split(".", 1)[0]


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    """sys.modules of fresh interpreters (started together) that imported only a service's
    entry modules, or only the kit."""
    jobs = {**{svc: mods[:1] for svc, mods in SERVICES.items()}, "ember_common": KIT_MODULES}
    procs = {}
    for name, modules in jobs.items():
        code = ("import importlib, json, sys\n"
                f"for m in {modules!r}:\n"
                "    importlib.import_module(m)\n"
                "print(json.dumps(sorted(sys.modules)))\n")
        procs[name] = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, cwd=ROOT)
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"importing {name}: {stderr}"
        out[name] = json.loads(stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_service_server_modules_load_no_ember(service, loaded):
    mods = loaded[service]
    assert set(SERVICES[service]) <= set(mods)
    ember = [m for m in mods if _top(m) == "ember"]
    assert not ember, f"{service} loads client modules: {ember[:10]}"
    others = {_top(m) for m in mods} & {"ember_gcs", "ember_raylet", "ember_objmgr", "ember_serve_proxy"}
    assert others == {service}, f"{service} loads another service: {others}"


def test_the_kit_loads_neither_ember_nor_a_service(loaded):
    mods = loaded["ember_common"]
    assert set(KIT_MODULES) <= set(mods)
    bad = [m for m in mods if _top(m) in FORBIDDEN_IN_KIT]
    assert not bad, f"the kit loads {bad[:10]}"


def _imports(path: pathlib.Path, package: str) -> set[str]:
    """Modules of `package` that the file imports anywhere (top level or inside functions)."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _top(alias.name) == package:
                    out.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = package + (f".{node.module}" if node.module else "")
            elif node.level == 0 and node.module and _top(node.module) == package:
                base = node.module
            else:
                continue
            out.add(base)
            for alias in node.names:  # `from . import rpc`: rpc is a module
                out.add(f"{base}.{alias.name}")
    return out


def _graph(package: str, root: pathlib.Path) -> dict[str, set[str]]:
    modules = {f"{package}.{p.stem}": p for p in root.glob("*.py") if p.stem != "__init__"}
    return {name: {m for m in _imports(path, package) if m in modules and m != name}
            for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_circles(package):
    graph = _graph(package, PACKAGES[package])
    assert graph, f"no modules found for {package}"
    cycle = _cycle(graph)
    assert cycle is None, f"import circle in {package}: {' -> '.join(cycle or [])}"


def test_the_circle_finder_finds_circles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
