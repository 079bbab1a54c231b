"""The settings registry (ember_common.envvars): the one reader of EMBER_* variables.

An ast check over client/, common/, services/, docker/ and scripts/ fails on any read of an
EMBER_* variable that does not go through the registry (tests/ is left out on purpose: tests
save and restore variables around a case and look at what a child process saw, and the chaos
knobs are the test harness's own; they are registered so that they are documented and never
warn). Writing a variable into a child's environment is not a read. docs/settings.md must be
what scripts/gen_settings_doc.py generates; Config's and the services' settings fields must
agree with the table; every registered name must be used somewhere, and every EMBER_* name the
tree spells (handed to a child, passed by compose or the image build) must be registered.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import pathlib
import re
import warnings

import pytest

from ember_common import envvars
from ember_common.config import Config
from ember_common.settings import SERVICES

ROOT = pathlib.Path(__file__).resolve().parents[3]
CHECKED = ("client", "common", "services", "docker", "scripts")
REGISTRY = {ROOT / "common" / "ember_common" / "envvars.py", ROOT / "common" / "ember_common" / "envvars_table.py"}


def _is_environ(node: ast.AST) -> bool:
    """`os.environ` or a bare `environ` (from os import environ)."""
    return ((isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
             and node.value.id == "os") or (isinstance(node, ast.Name) and node.id == "environ"))


def _is_getenv(node: ast.AST) -> bool:
    return ((isinstance(node, ast.Attribute) and node.attr == "getenv" and isinstance(node.value, ast.Name)
             and node.value.id == "os") or (isinstance(node, ast.Name) and node.id == "getenv"))


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "string" assignments."""
    out = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node.value.value
    return out


def _ember_name(node: ast.AST | None, consts: dict[str, str]) -> str | None:
    """The EMBER_* name an expression stands for (a literal, a module constant, an f-string
    starting with EMBER_), else None. EMBER_TEST_* are the tests' own knobs."""
    text = None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.Name):
        text = consts.get(node.id)
    elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        text = str(node.values[0].value) + "..."
    if text and text.startswith("EMBER_") and not text.startswith(envvars.TEST_PREFIX):
        return text
    return None


def _read_key(node: ast.AST) -> ast.AST | None:
    """The key expression when `node` reads the environment: os.environ.get(k) / os.getenv(k) /
    os.environ[k] (not assigned to or deleted) / k in os.environ."""
    if isinstance(node, ast.Call) and node.args:
        f = node.func
        if _is_getenv(f) or (isinstance(f, ast.Attribute) and f.attr == "get" and _is_environ(f.value)):
            return node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
        return node.slice
    if isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops) \
            and any(_is_environ(c) for c in node.comparators):
        return node.left
    return None


def _iterates_environ(it: ast.AST) -> bool:
    if _is_environ(it):
        return True
    return (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("items", "keys")
            and _is_environ(it.func.value))


def find_reads(source: str, path: str = "<source>") -> list[str]:
    """`path:line NAME` for every read of an EMBER_* variable that bypasses the registry."""
    tree = ast.parse(source)
    consts = _constants(tree)
    found: list[str] = []
    param_reads: dict[str, set[int]] = {}  # function name -> positions of parameters read as keys
    functions = [fn for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))]
    changed = True
    while changed:  # a helper that passes its parameter on to such a helper reads it too
        changed = False
        for fn in functions:
            params = [a.arg for a in fn.args.args]
            for node in ast.walk(fn):
                keys = [_read_key(node)]
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in param_reads:
                    keys += [node.args[i] for i in param_reads[node.func.id] if i < len(node.args)]
                for key in keys:
                    if isinstance(key, ast.Name) and key.id in params:
                        before = len(param_reads.get(fn.name, ()))
                        param_reads.setdefault(fn.name, set()).add(params.index(key.id))
                        changed |= len(param_reads[fn.name]) != before
    for node in ast.walk(tree):
        key = _read_key(node)
        name = _ember_name(key, consts) if key is not None else None
        if name:
            found.append(f"{path}:{node.lineno} {name}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in param_reads:
            for i in param_reads[node.func.id]:  # a helper that reads the variable it is given
                arg = node.args[i] if i < len(node.args) else None
                if (name := _ember_name(arg, consts)):
                    found.append(f"{path}:{node.lineno} {name} (through {node.func.id}())")
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            if any(_iterates_environ(g.iter) for g in node.generators):
                for sub in ast.walk(node):  # filtering the environment by an exact EMBER_* name
                    if isinstance(sub, ast.Compare) and any(isinstance(o, (ast.Eq, ast.In)) for o in sub.ops):
                        for c in sub.comparators:
                            if (name := _ember_name(c, consts)):
                                found.append(f"{path}:{node.lineno} {name} (filtering the environment)")
    return found


def _sources() -> list[pathlib.Path]:
    out = []
    for top in CHECKED:
        for p in sorted((ROOT / top).rglob("*.py")):
            if p in REGISTRY or "proto" in p.relative_to(ROOT).parts or ".venv" in p.parts:
                continue
            out.append(p)
    return out


def test_no_ember_variable_is_read_outside_the_registry():
    found = []
    for p in _sources():
        found += find_reads(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
    assert not found, "read these through ember_common.envvars:\n" + "\n".join(found)


@pytest.mark.parametrize("src", [
    'import os\nx = os.environ.get("EMBER_X")',
    'import os\nx = os.getenv("EMBER_X", "1")',
    'import os\nx = os.environ["EMBER_X"]',
    'import os\nx = "EMBER_X" in os.environ',
    'from os import environ\nx = environ.get("EMBER_X")',
    'import os\nVAR = "EMBER_X"\ndef f():\n    return os.environ.get(VAR)',
    'import os\ndef f(n):\n    return os.environ[n]\nf("EMBER_X")',
    'import os\ndef f(n, d):\n    return os.environ.get(n, d)\ndef g(n):\n    return f(n, "")\ng("EMBER_X")',
    'import os\nk = [k for k in os.environ if k == "EMBER_X"]',
    'import os\nx = os.environ.get(f"EMBER_{1}")',
])
def test_the_check_finds_each_kind_of_read(src):
    found = find_reads(src)
    assert len(found) == 1 and "EMBER_" in found[0], found


@pytest.mark.parametrize("src", [
    'import os\nos.environ["EMBER_X"] = "1"',  # writing (a child inherits it)
    'import os\nenv = dict(os.environ, EMBER_X="1")',
    'import os\nos.environ.pop("EMBER_X", None)',
    'import os\nos.environ.setdefault("EMBER_X", "1")',
    'import os\nenv = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_AUTH")}',
    'import os\nx = os.environ.get("EMBER_TEST_RAY_PYTHON")',
    'import os\nx = os.environ.get("OTEL_X")',
    'from ember_common import envvars\nx = envvars.get("EMBER_X")',
])
def test_the_check_leaves_writes_and_registry_calls_alone(src):
    assert find_reads(src) == []


def _gen_doc_module():
    spec = importlib.util.spec_from_file_location("gen_settings_doc", ROOT / "scripts" / "gen_settings_doc.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_settings_md_is_what_the_registry_generates():
    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert text == _gen_doc_module().render(), "docs/settings.md is stale: run python scripts/gen_settings_doc.py"
    for name in envvars.VARS:
        assert f"`{name}`" in text


def test_every_registered_name_is_used_somewhere():
    texts = []
    for top in (*CHECKED, "tests"):
        for p in (ROOT / top).rglob("*"):
            if p.is_file() and p.suffix in (".py", ".sh", ".yml", "") and p not in REGISTRY and ".venv" not in p.parts:
                texts.append(p.read_text(encoding="utf-8", errors="replace"))
    for extra in ("docker-compose.yml", "Makefile"):
        texts.append((ROOT / extra).read_text(encoding="utf-8"))
    everything = "\n".join(texts)
    unused = [n for n in envvars.VARS if n not in everything]
    assert not unused, f"registered but read nowhere: {unused}"


def test_config_fields_come_from_the_registry():
    defaults = Config()
    for f in dataclasses.fields(Config):
        name = f.metadata["env"]
        assert name == "EMBER_" + f.name.upper()
        var = envvars.VARS[name]
        assert f.type == var.kind, name
        assert getattr(defaults, f.name) == var.default and type(getattr(defaults, f.name)) is type(var.default)


KINDS = {"int": "int", "int | None": "int", "float": "float", "bool": "bool", "str": "str",
         "str | None": "str", "dict[str, float]": "json"}


def test_service_settings_fields_are_registered_with_their_kind():
    for cls in SERVICES:
        for f in dataclasses.fields(cls):
            name = f.metadata.get("env")
            if name:
                assert envvars.VARS[name].kind == KINDS[str(f.type)], (cls.__name__, f.name)
                assert f.metadata["help"], (cls.__name__, f.name)


def test_get_value_require(monkeypatch):
    monkeypatch.delenv("EMBER_SERVE_LLM_METRICS_PORT", raising=False)
    assert envvars.value("EMBER_SERVE_LLM_METRICS_PORT") == 0
    monkeypatch.setenv("EMBER_SERVE_LLM_METRICS_PORT", "9123")
    assert envvars.value("EMBER_SERVE_LLM_METRICS_PORT") == 9123
    assert envvars.get("EMBER_SERVE_LLM_METRICS_PORT") == "9123"
    monkeypatch.setenv("EMBER_SERVE_LLM_METRICS_PORT", "x")
    with pytest.raises(ValueError, match="EMBER_SERVE_LLM_METRICS_PORT='x' is not a valid int"):
        envvars.value("EMBER_SERVE_LLM_METRICS_PORT")
    monkeypatch.delenv("EMBER_RAYLET_ADDRESS", raising=False)
    with pytest.raises(envvars.SettingsError, match="missing required setting EMBER_RAYLET_ADDRESS"):
        envvars.require("EMBER_RAYLET_ADDRESS")
    with pytest.raises(envvars.SettingsError, match="EMBER_RAYLET_ADDRESS"):
        envvars.value("EMBER_RAYLET_ADDRESS")
    assert envvars.get("EMBER_RAYLET_ADDRESS", "d") == "d"
    with pytest.raises(KeyError, match="EMBER_NOT_A_SETTING"):
        envvars.get("EMBER_NOT_A_SETTING")


def test_variables_the_code_reads_are_known_and_typos_warn():
    read_by_code = {"EMBER_SERVE_LLM_METRICS_HOST": "h", "EMBER_SERVE_LLM_METRICS_PORT": "1",
                    "EMBER_DASHBOARD_ADDRESS": "http://x", "EMBER_ETCD_BIN": "etcd", "EMBER_CHAOS_SEED": "1"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Config.from_env(read_by_code) == Config()
    with pytest.warns(RuntimeWarning, match="EMBER_DASHBOARD_ADRESS"):
        envvars.warn_unknown({"EMBER_DASHBOARD_ADRESS": "x"})


def test_container_only_variables_are_the_ones_the_entry_point_consumes():
    assert set(envvars.container_only()) == {
        "EMBER_CLUSTER_NAME", "EMBER_GCS_PORT", "EMBER_GCS_STORAGE", "EMBER_OBJMGR_PORT", "EMBER_OBJECT_STORE_BYTES",
        "EMBER_GCS_HA", "EMBER_GCS_LEADER_LEASE_S", "EMBER_GCS_ADVERTISE_ADDRESS",
        "EMBER_SPILL_DIR", "EMBER_RAYLET_PORT", "EMBER_NUM_CPUS", "EMBER_NUM_GPUS", "EMBER_RESOURCES", "EMBER_HEAD",
        "EMBER_HTTP_PORT", "EMBER_TRACE_OUT", "EMBER_METRICS_EXPORT_PORT", "EMBER_DASHBOARD_PORT"}
    assert envvars.container_default("EMBER_HEAD") == "0"
    assert envvars.container_default("EMBER_RAYLET_PORT") == "8077"
    assert envvars.container_default("EMBER_RESOURCES") == "{}"
    assert os.path.isabs(envvars.container_default("EMBER_TRACE_OUT"))


def _named_in_python(source: str) -> set[str]:
    """EMBER_* names a module spells as a whole string or as a keyword (dict(os.environ, EMBER_X=...))."""
    names = set()
    tree = ast.parse(source)
    prefixes = {id(a) for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "startswith" for a in node.args}  # k.startswith("EMBER_AUTH"): a prefix
    for node in ast.walk(tree):
        if id(node) in prefixes:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"EMBER_[A-Z0-9_]+", node.value):
            names.add(node.value)
        if isinstance(node, ast.keyword) and node.arg and node.arg.startswith("EMBER_"):
            names.add(node.arg)
    return names


def test_every_name_the_tree_spells_is_registered():
    """A variable handed to a child, passed by compose or the image build is in the table too."""
    names: dict[str, str] = {}
    for p in _sources():
        for n in _named_in_python(p.read_text(encoding="utf-8")):
            names.setdefault(n, str(p.relative_to(ROOT)))
    for rel in ("docker-compose.yml", "Makefile", "docker/Dockerfile", "docker/build-offline.sh"):
        for n in re.findall(r"EMBER_[A-Z0-9_]*[A-Z0-9]", (ROOT / rel).read_text(encoding="utf-8")):
            names.setdefault(n, rel)
    unknown = {n: where for n, where in names.items() if n not in envvars.VARS and not n.startswith(envvars.TEST_PREFIX)}
    assert not unknown, f"add these to common/ember_common/envvars_table.py: {unknown}"


def test_names_spelled_in_python_are_found():
    src = 'import os\nenv = dict(os.environ, EMBER_A="1")\nb = {"EMBER_B": 1}\nc = k.startswith("EMBER_C")\nd = "EMBER_D is"'
    assert _named_in_python(src) == {"EMBER_A", "EMBER_B"}
