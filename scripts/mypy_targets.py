"""mypy's targets for `make lint`, read from pyproject.toml's `strict` [[tool.mypy.overrides]]: the
one list of what is checked strictly (adding a module or package there adds it to the gate).

    python scripts/mypy_targets.py services   # -p ember_common -p ember_gcs ...
    python scripts/mypy_targets.py client     # -p ember

An entry "pkg.*" is the package `pkg` (`-p pkg`, its "pkg" entry included); any other entry is
one module (`-m module`). `client` is the entries of the `ember` package, `services` the others
(the kit and the services).
"""
from __future__ import annotations

import pathlib
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
GROUPS = ("client", "services")


def strict_modules(pyproject: pathlib.Path = ROOT / "pyproject.toml") -> list[str]:
    """The module entries of every `strict = true` override, in file order."""
    with open(pyproject, "rb") as f:
        overrides = tomllib.load(f).get("tool", {}).get("mypy", {}).get("overrides", [])
    out: list[str] = []
    for o in overrides:
        if o.get("strict") is True:
            mods = o["module"]
            out += [mods] if isinstance(mods, str) else list(mods)
    return out


def targets(group: str, modules: list[str]) -> list[str]:
    """mypy's arguments (-p/-m pairs) for the group's entries."""
    if group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS}, got {group!r}")
    packages = {m[:-2] for m in modules if m.endswith(".*")}
    args: list[str] = []
    seen: set[str] = set()
    for m in modules:
        name = m[:-2] if m.endswith(".*") else m
        if (name.split(".")[0] == "ember") != (group == "client") or name in seen:
            continue
        seen.add(name)
        args += ["-p", name] if name in packages else ["-m", name]
    return args


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in GROUPS:
        print(f"usage: {sys.argv[0]} {{{'|'.join(GROUPS)}}}", file=sys.stderr)
        return 2
    args = targets(argv[0], strict_modules())
    if not args:
        print(f"no strict [[tool.mypy.overrides]] entries for {argv[0]} in pyproject.toml", file=sys.stderr)
        return 1
    print(" ".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
