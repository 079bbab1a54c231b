"""Writes what Ray 2.60 offers under the names Ray's docs use most, for the coverage gate
(tests/unit/gates/test_ray_api_coverage.py): each name's kind and, for a function or a class,
its parameter names. Run with the Python of a venv that has Ray (never a project dependency):

    /path/to/ray-venv/bin/python scripts/ray_api_snapshot.py tests/unit/gates/ray_common_api.json

The names are the JSON file's own list (`names`), and the command-line options its `cli` map,
picked by hand from Ray's quick starts and user guides (Core, `ray.util`, `ray.dag`, exceptions,
job submission, Serve, the `ray` and `serve` commands); the script fills in Ray's side for each
name and checks that Ray has every listed command and option."""
from __future__ import annotations

import importlib
import inspect
import json
import sys
from typing import Any


def resolve(dotted: str) -> Any:
    """The object a dotted name names: an attribute of the longest importable module prefix
    (`ray.serve.deployment` is the decorator, not the module of that name), else the module."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            for attr in parts[i:]:
                obj = getattr(obj, attr)
            return obj
        except (ImportError, AttributeError):
            continue
    return importlib.import_module(dotted)


def params(obj: Any) -> list[str] | None:
    """Parameter names a caller may pass (a class: its constructor's), or None."""
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    return [p.name for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def kind(obj: Any) -> str:
    if inspect.isclass(obj):
        return "class"
    if callable(obj):
        return "function"
    return "value"


def main() -> None:
    path = sys.argv[1]
    with open(path) as f:
        data = json.load(f)
    import ray

    ray_side = {}
    for name in data["names"]:
        obj = resolve(name)
        ray_side[name] = {"kind": kind(obj), "params": params(obj) if kind(obj) != "value" else None}
    from ray.scripts.scripts import cli as ray_cli
    from ray.serve.scripts import cli as serve_cli

    for command, options in data.get("cli", {}).items():  # each listed option must be Ray's
        words = command.split()
        cmd = ray_cli if words[0] == "ray" else serve_cli
        for w in words[1:]:
            cmd = cmd.commands[w]
        have = {o for p in cmd.params for o in p.opts}
        unknown = sorted(set(options) - have)
        if unknown:
            raise SystemExit(f"{command}: Ray 2.60 has no option(s) {unknown}")
    data["ray_version"] = ray.__version__
    data["ray"] = ray_side
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
