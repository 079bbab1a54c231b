"""Every Python package in the tree is listed in pyproject.toml, so a non-editable install (the
wheel the container images are built from) ships all of it."""
from __future__ import annotations

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_package_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = set()
    for top, where in cfg["package-dir"].items():
        base = ROOT / where
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(base).parts
            found.add(".".join((top, *rel)))
    missing = sorted(found - listed)
    assert not missing, f"packages missing from pyproject.toml [tool.setuptools] packages: {missing}"
    stale = sorted(listed - found)
    assert not stale, f"pyproject.toml lists packages that do not exist: {stale}"
