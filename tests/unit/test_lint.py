"""`ruff` (pyflakes, import order, bugbear; settings in pyproject.toml [tool.ruff]) passes on the
paths it gates. The pinned ruff comes with the dev extra."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
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
