"""Import boundaries between the client, its libraries, the kit and the services.

Loaded modules (a fresh interpreter per service, so nothing else loaded them first):
- Each service's server module (and its `python -m` entry) imports no `ember` module: services
  share only `ember_common`.
- The kit imports neither `ember` nor a service.

Every import statement of every file (lazy imports in functions included), read with `ast`:
- `ember_common` imports no `ember` and no service;
- services import only `ember_common` and themselves (serve-proxy and the dashboard, drivers,
  may import `ember`: its public modules and the named doors below, nothing private);
- libraries (`ember.air`, `ember.data`, `ember.serve`, `ember.train`, `ember.tune`, `ember.util`)
  reach the core only through its public doors: `ember` itself and its public modules,
  `ember._private` modules on the allow-list below, never `ember_common.proto`;
- a library imports only another library's public modules (none whose dotted path has a part
  starting with `_`, such as `ember.train._internal.x` or `ember.serve._private`); code two
  libraries share lives in `ember.air`, which imports no other library;
- nothing imports a service but the service itself;
- no import circles inside the kit or inside a service package.
"""
from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
# Each service's process entry (`python -m ember_x` runs __main__, which imports server).
SERVICES = {"ember_gcs": ["ember_gcs.__main__", "ember_gcs.server"],
            "ember_raylet": ["ember_raylet.__main__", "ember_raylet.server"],
            "ember_objmgr": ["ember_objmgr.__main__", "ember_objmgr.server"]}
PACKAGES = {"ember_common": ROOT / "common" / "ember_common",
            "ember_gcs": ROOT / "services" / "gcs" / "ember_gcs",
            "ember_raylet": ROOT / "services" / "raylet" / "ember_raylet",
            "ember_objmgr": ROOT / "services" / "objmgr" / "ember_objmgr"}
FORBIDDEN_IN_KIT = ("ember", "ember_gcs", "ember_raylet", "ember_objmgr", "ember_serve_proxy", "ember_dashboard")
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


# ---------------------------------------------------------------------------------------------
# Allowed imports, checked on every import statement in the tree.

ALL_PACKAGES = {"ember": ROOT / "client" / "ember", **PACKAGES,
                "ember_serve_proxy": ROOT / "services" / "serve-proxy" / "ember_serve_proxy",
                "ember_dashboard": ROOT / "services" / "dashboard" / "ember_dashboard"}
SERVICE_PACKAGES = ("ember_gcs", "ember_raylet", "ember_objmgr", "ember_serve_proxy", "ember_dashboard")
# Services that are also drivers and may use `ember`: serve-proxy (routes requests to replica
# actors) and the dashboard (reads the state API, runs jobs as actors, reads Serve's status).
DRIVER_SERVICES = ("ember_serve_proxy", "ember_dashboard")
LIBRARIES = ("ember.air", "ember.data", "ember.serve", "ember.train", "ember.tune", "ember.util")
# The layer Train and Tune share (Ray's `ray.air`): it sits below them and imports no library.
SHARED_LAYER = "ember.air"
# The core's modules a library may import. Each is a door, not an implementation detail:
DOORS = {
    # the internal KV: where libraries keep their state (issue 11, item 4)
    "ember._private.doors.internal_kv",
    # placement groups: create/remove/look up/wait through the core's GcsClient, in plain
    # Python (ids as bytes, Ray's table dicts), and the current task's group (issue 12)
    "ember._private.doors.placement_groups",
    # the scheduling strategy classes, which the core interprets (re-exported by
    # ember.util.scheduling_strategies, as Ray's)
    "ember._private.api.scheduling",
    # the state door: the cluster's tables (GCS, raylets' workers, object managers' objects) as
    # plain dicts in Ray's state-API shapes, for ember.util.state and the dashboard (issue 18)
    "ember._private.doors.state",
    # the logs door: each node's log files through its raylet's LogService, as plain values,
    # for ember.util.state.list_logs / get_log and the dashboard (issue 42 item 5)
    "ember._private.doors.logs",
    # the driver door: this process's session id, the core's event loop (the Serve proxy runs
    # uvicorn on it) and the inline-value bound, as plain values
    "ember._private.doors.driver",
}
# What a driver service may import of `ember` besides its public modules: the doors, Serve's
# door for its HTTP proxy (public by path: ember.serve.proxy_door), and the job manager the
# dashboard's job API runs (Ray's JobManager; the tools package sits above the core).
DRIVER_DOORS = DOORS | {"ember._tools.job_manager"}
# Offenders in other engineers' areas when this test was written: (module, import). Each must
# still be there (so the list only shrinks); fixing one means deleting its entry.
KNOWN_OFFENDERS: set[tuple[str, str]] = set()


def _modules() -> dict[str, pathlib.Path]:
    """Every module of every package in the tree, by dotted name."""
    out = {}
    for top, root in ALL_PACKAGES.items():
        for path in root.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((top, *parts))] = path
    return out


MODULES = _modules()


def import_targets(name: str, source: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) of every import in a module's source, relative ones resolved.
    `from a.b import c` is `a.b.c` when that is a module of the tree, else `a.b`."""
    package = name if is_package else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((node.lineno, sub if sub in MODULES else base))
    return out


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(name: str, path: pathlib.Path, source: str | None = None) -> list[str]:
    """The import rules a module (its file, or the given source) breaks, one line each."""
    top = _top(name)
    bad = []
    text = path.read_text() if source is None else source
    for line, target in import_targets(name, text, is_package=path.name == "__init__.py"):
        where = f"{path.relative_to(ROOT)}:{line} imports {target}"
        ttop = _top(target)
        if ttop in SERVICE_PACKAGES and ttop != top:
            bad.append(f"{where}: nothing imports a service")
        if top == "ember_common" and ttop == "ember":
            bad.append(f"{where}: the kit imports no `ember`")
        if top in SERVICE_PACKAGES and ttop == "ember" and top not in DRIVER_SERVICES:
            bad.append(f"{where}: services import only `ember_common`")
        if top in DRIVER_SERVICES and ttop == "ember" and _private_part(target, "ember") \
                and target not in DRIVER_DOORS:
            bad.append(f"{where}: driver services use the public `ember` API or a named door")
        if any(_within(name, lib) for lib in LIBRARIES):
            if _within(target, "ember._private") and target not in DOORS:
                bad.append(f"{where}: libraries reach the core only through its public doors")
            if _within(target, "ember_common.proto"):
                bad.append(f"{where}: libraries never use the GCS's protos")
        own, other = _library(name), _library(target)
        if own and other and other != own:
            if _within(own, SHARED_LAYER):
                bad.append(f"{where}: {SHARED_LAYER} imports no other library")
            elif _private_part(target, other):
                bad.append(f"{where}: a library imports only another library's public modules")
    return bad


def _library(module: str) -> str | None:
    """The library a module belongs to (None for the core, the kit and the services)."""
    return next((lib for lib in LIBRARIES if _within(module, lib)), None)


def _private_part(module: str, library: str) -> bool:
    """Whether the module, below its library, has a private part (`_internal`, `_checkpoint`)."""
    return any(part.startswith("_") for part in module[len(library):].split(".") if part)


def _offender(name: str, message: str) -> tuple[str, str]:
    return name, message.partition(" imports ")[2].split(":", 1)[0]


def test_every_import_respects_the_boundaries():
    found = {}
    for name, path in sorted(MODULES.items()):
        for message in violations(name, path):
            found[_offender(name, message)] = message
    new = [m for key, m in found.items() if key not in KNOWN_OFFENDERS]
    assert not new, "imports across a boundary:\n" + "\n".join(new)
    fixed = KNOWN_OFFENDERS - set(found)
    assert not fixed, f"no longer offending, delete from KNOWN_OFFENDERS: {sorted(fixed)}"


def test_the_rules_catch_each_kind_of_offender():
    """Every rule fires on a file that breaks it (so the test above cannot pass by accident)."""
    cases = {
        "ember.serve.fake": ("from ember._private.worker import global_worker\n"
                             "from ember_common.proto import gcs_pb2\n",
                             ["public doors", "protos"]),
        "ember.util.fake": ("from .._private import core_worker\n", ["public doors"]),
        "ember_common.fake": ("import ember\nfrom ember_gcs import server\n",
                              ["the kit imports no", "nothing imports a service"]),
        "ember_gcs.fake": ("from ember import exceptions\nimport ember_raylet.server\n",
                           ["services import only", "nothing imports a service"]),
        "ember._private.fake": ("import ember_objmgr\n", ["nothing imports a service"]),
        "ember.tune.fake": ("from ember.train._internal import worker\nimport ember.serve._private.router\n"
                            "from ember.data import _internal\n",
                            ["another library's public", "another library's public",
                             "another library's public"]),
        "ember.air.fake": ("from ember.train import Checkpoint\n", ["imports no other library"]),
        "ember_serve_proxy.fake": ("from ember._private.worker import global_worker\n"
                                   "from ember.serve._private import router\n",
                                   ["public `ember` API or a named door", "public `ember` API or a named door"]),
    }
    fake = ROOT / "fake.py"  # never read: the source is given
    for name, (source, expected) in cases.items():
        found = violations(name, fake, source)
        assert len(found) == len(expected), (name, found)
        for message, part in zip(found, expected, strict=True):
            assert part in message, (name, message)
    ok = {"ember.serve.fake": "import ember\nfrom ember._private.doors import internal_kv\n"
                              "from ember.serve._private import router\nimport ember_common.rpc\n",
          "ember_serve_proxy.fake": "import ember\nfrom ember.serve import proxy_door\n"
                                    "from ember._private.doors import driver\n",
          "ember_dashboard.fake": "from ember._tools import job_manager\nfrom ember.util.state import list_actors\n",
          "ember_gcs.fake": "from . import kv\nfrom ember_common import rpc\n",
          "ember.tune.fake": "from ember.train import Checkpoint\nfrom ember.air import storage\n"
                             "from ember.tune._internal import controller\nimport ember.data\n",
          "ember.train.torch.fake": "from ember.train._internal import session\nfrom ember.air import session\n"}
    for name, source in ok.items():
        assert violations(name, fake, source) == [], name


def test_relative_imports_resolve():
    name = "ember.serve._private.controller"
    targets = {t for _, t in import_targets(name, MODULES[name].read_text())}
    assert "ember.serve._private.deployment_state" in targets
    assert "ember._private.doors.internal_kv" in targets
    init = {t for _, t in import_targets("ember.serve", "from ._private import router\n"
                                                       "from .. import util\n", is_package=True)}
    assert init == {"ember.serve._private.router", "ember.util"}
