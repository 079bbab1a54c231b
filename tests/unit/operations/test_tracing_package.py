"""The shape of ember_common/tracing/: the face exports what it lists, no module of the package
reads another's private names, and importing the face loads no OpenTelemetry module (a process
that never traces, a forked worker's template, does not carry the SDK)."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import ember_common.tracing as tracing

PACKAGE = pathlib.Path(tracing.__file__).parent


def _modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.glob("*.py"))}


def test_the_face_exports_what_it_lists():
    assert len(set(tracing.__all__)) == len(tracing.__all__)
    for name in tracing.__all__:
        assert not name.startswith("_") and hasattr(tracing, name), name


def test_no_module_reads_another_modules_private_names():
    mods = _modules()
    found = []
    for name, tree in mods.items():
        siblings: set[str] = set()  # the package's modules as this one names them
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module is None:  # from . import _x [as y]
                    siblings |= {a.asname or a.name for a in node.names}
                else:  # from ._x import y: y must be public
                    found += [f"{name}: from .{node.module} import {a.name}" for a in node.names
                              if a.name.startswith("_")]
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in siblings and node.attr.startswith("_")):
                found.append(f"{name}: {node.value.id}.{node.attr}")
    assert not found, found
    assert len(mods) > 10 and all(m == "__init__" or m.startswith("_") for m in mods)


def test_importing_the_face_loads_no_opentelemetry():
    code = ("import sys, ember_common.tracing as t; "
            "assert not t.enabled(); "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
