"""`ruff` (pyflakes, import order, bugbear; settings in pyproject.toml [tool.ruff]) passes on the
paths it gates. The pinned ruff comes with the dev extra."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
# Gated paths and what is left out of them: the whole tree (what ruff itself leaves out - .venv,
# the generated protos in pyproject's extend-exclude - aside).
GATED = {".": []}


def _ruff() -> str:
    here = pathlib.Path(sys.executable).parent / "ruff"
    found = str(here) if here.exists() else shutil.which("ruff")
    assert found, "ruff is not installed: pip install -e '.[dev]' (pins it)"
    return found


def test_ruff_passes_on_the_whole_tree():
    for path, left_out in GATED.items():
        cmd = [_ruff(), "check", "--no-cache", path] + [f"--extend-exclude={p}" for p in left_out]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{' '.join(cmd)}:\n{r.stdout}{r.stderr}"


def test_ruff_finds_what_it_is_meant_to_find(tmp_path):
    """The gate is live: an unused import, a wrong import order and a bugbear finding fail."""
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport os\n\n\ndef f(x=[]):\n    return x\n")
    r = subprocess.run([_ruff(), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"),
                        str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    for code in ("F401", "I001", "B006"):
        assert code in r.stdout, (code, r.stdout)


def _strict_entries() -> list[str]:
    """The module entries of pyproject's `strict = true` mypy overrides: the one list of what mypy
    checks strictly."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        overrides = tomllib.load(f)["tool"]["mypy"]["overrides"]
    out: list[str] = []
    for o in overrides:
        if o.get("strict") is True:
            out += [o["module"]] if isinstance(o["module"], str) else o["module"]
    return out


def _make_lint_mypy_targets() -> list[tuple[str, str]]:
    """The (-p|-m, name) pairs of the mypy commands `make lint` runs (make -n: printed, not run)."""
    make = shutil.which("make")
    assert make, "make is not installed"
    r = subprocess.run([make, "-n", "--no-print-directory", "lint", f"PY={sys.executable}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = [line.split()[1:] for line in r.stdout.splitlines() if line.split()[:1]
             and line.split()[0].endswith("/mypy")]
    assert len(calls) == 2, r.stdout  # the kit and the services; the client
    pairs = []
    for args in calls:
        assert args and len(args) % 2 == 0, args
        pairs += [(args[i], args[i + 1]) for i in range(0, len(args), 2)]
    return pairs


def test_make_lint_runs_mypy_on_exactly_the_strict_list_of_pyproject():
    """One list: `make lint`'s mypy targets are pyproject's strict overrides ("pkg.*": -p pkg; a
    module alone: -m module), nothing more and nothing left out, and the Makefile names none."""
    entries = _strict_entries()
    packages = {m.removesuffix(".*") for m in entries if m.endswith(".*")}
    expected = set()
    for m in entries:
        name = m.removesuffix(".*")
        expected.add(("-p", name) if name in packages else ("-m", name))
    targets = _make_lint_mypy_targets()
    assert len(targets) == len(set(targets)), targets
    assert set(targets) == expected, (sorted(set(targets) - expected), sorted(expected - set(targets)))
    lint_rule = (ROOT / "Makefile").read_text()
    assert "-m ember" not in lint_rule and "-p ember" not in lint_rule, "the Makefile names mypy targets itself"


def test_the_whole_client_is_checked_strictly():
    """`make lint` checks the whole client package (`-p ember`: the core, Serve, the library
    packages, the testing helpers), and no mypy override loosens any of its modules."""
    import tomllib

    assert ("-p", "ember") in set(_make_lint_mypy_targets())
    with open(ROOT / "pyproject.toml", "rb") as f:
        overrides = tomllib.load(f)["tool"]["mypy"]["overrides"]
    for o in overrides:
        mods = [o["module"]] if isinstance(o["module"], str) else o["module"]
        if any(m == "ember" or m.startswith("ember.") for m in mods):
            assert o.get("ignore_errors") is not True and o.get("strict") is not False \
                and "follow_imports" not in o, o
