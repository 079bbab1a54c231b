"""Prints the runtime dependencies of pyproject.toml, one per line (a requirements file):
`pyproject_deps.py PYPROJECT [EXTRA,...]` adds the named optional extras (unknown ones are skipped).

Used by docker/Dockerfile (to install dependencies in a layer that only changes when
pyproject.toml does) and by docker/build-offline.sh (to fill the wheelhouse)."""
from __future__ import annotations

import sys
import tomllib

with open(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
deps = list(project["dependencies"])
for extra in filter(None, (sys.argv[2] if len(sys.argv) > 2 else "").split(",")):
    deps += [d for d in project.get("optional-dependencies", {}).get(extra, [])
             if not d.startswith(project["name"] + "[")]
print("\n".join(deps))
