"""Every Python package in the tree is listed in pyproject.toml, so a non-editable install (the
wheel the container images are built from) ships all of it. A listed directory without an
`__init__.py` must be a data-only package declared in `[tool.setuptools.package-data]` (the
dashboard's static files), which setuptools then ships without a warning."""
from __future__ import annotations

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[3]


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
    data_only = {name for name in cfg.get("package-data", {})
                 if (ROOT / cfg["package-dir"][name.split(".")[0]]).joinpath(*name.split(".")[1:]).is_dir()}
    stale = sorted(listed - found - data_only)
    assert not stale, f"pyproject.toml lists packages that do not exist: {stale}"
