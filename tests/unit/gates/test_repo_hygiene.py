"""The tracked tree names no developer's own files, and its docs stay maps, not diaries.

Local paths. Every file `git ls-files` lists is read as UTF-8 (files that are not text are
skipped); a line fails when it holds an absolute path that can only be one machine's:

- `/work/...`, `/root/...`, `/Users/...`: anywhere;
- `/home/NAME...` for any NAME but `ember` (`/home/ember` is the container images' user);
- `/tmp/NAME...` outside `tests/` when NAME does not start with `ember`: Ember's runtime
  defaults all do (`/tmp/ember-<uid>`, `/tmp/ember-chaos`, the container's
  `/tmp/ember-service.port`), and a tool's or a developer's file does not belong in the tree.
  Tests may pass made-up `/tmp/...` values (never read from the machine's disk). This file,
  which names the paths it forbids, is the one file not scanned.

A path counts only where it starts one: the `/` must not follow a letter, digit, `.`, `-`,
`~`, `$` or another `/` (so `https://host/work/x`, `/var/tmp/x`, `$HOME/x` and `~/x` pass).
Paths the project documents as runtime locations that are not under those roots
(`/dev/shm`, `/var/lib/ember`, `/opt/ember`) are not affected.

Docs. The README is at most 200 lines and every other tracked Markdown file at most 400:
each is a map of what is true now; figures live in docs/perf.md's one table, history in git.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()  # names the paths it forbids

_START = r"(?<![\w.~$/-])"
_ANYWHERE = re.compile(_START + r"/(?:work|root|Users)/|" + _START + r"/home/(?!ember\b)[\w.-]+")
_TMP = re.compile(_START + r"/tmp/(?!ember)[\w.{}-]+")

README_MAX_LINES = 200
DOC_MAX_LINES = 400


def tracked_files() -> list[str]:
    """Paths of every file git tracks in this checkout, relative to its root."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def local_paths(rel: str, text: str) -> list[str]:
    """`file:line: path` for every developer-local path in one file's text (rules above)."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        hits = _ANYWHERE.findall(line)
        if not rel.startswith("tests/"):
            hits += _TMP.findall(line)
        found += [f"{rel}:{n}: {h}" for h in hits]
    return found


def _read_text(rel: str) -> str | None:
    path = ROOT / rel
    if not path.is_file():          # deleted in the work tree, or a submodule
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def test_no_tracked_file_names_a_developers_own_path() -> None:
    bad = []
    for rel in tracked_files():
        text = _read_text(rel) if rel != SELF else None
        if text is not None:
            bad += local_paths(rel, text)
    assert not bad, "absolute local paths in tracked files:\n" + "\n".join(bad)


def test_the_rule_flags_local_paths_and_passes_runtime_ones() -> None:
    flagged = ["/work/rayvenv/bin/python", "cd /root/x", "/home/alice/data", "/Users/bob/x",
               "--ray-pythonpath /tmp/rayllm"]
    passed = ["/tmp/ember-sessions/session_1/logs", "/dev/shm/ember-store", "/home/ember",
              "https://example.com/work/x", "/var/tmp/x", "$HOME/work/x", "~/.ember/auth_token",
              "mountPath: /tmp", "/var/lib/ember/spill"]
    for line in flagged:
        assert local_paths("scripts/x.py", line), line
    for line in passed:
        assert not local_paths("scripts/x.py", line), line
    assert not local_paths("tests/unit/x.py", "store_dir='/tmp/sess'")
    assert local_paths("tests/unit/x.py", "'/work/rayvenv'")


def test_docs_are_maps_of_bounded_length() -> None:
    too_long = []
    for rel in tracked_files():
        if not rel.endswith(".md"):
            continue
        text = _read_text(rel)
        if text is None:
            continue
        limit = README_MAX_LINES if rel == "README.md" else DOC_MAX_LINES
        lines = len(text.splitlines())
        if lines > limit:
            too_long.append(f"{rel}: {lines} lines (at most {limit})")
    assert not too_long, "docs over their length:\n" + "\n".join(too_long)


def test_test_modules_outside_packages_have_unique_basenames():
    """pytest imports a test folder without `__init__.py` under the module's basename alone
    (rootdir import mode), so two such files of one name stop the whole run at collection."""
    seen: dict[str, str] = {}
    clashes = []
    for path in sorted(ROOT.joinpath("tests").rglob("test_*.py")):
        if path.parent.joinpath("__init__.py").exists():
            continue
        rel = path.relative_to(ROOT).as_posix()
        if path.name in seen:
            clashes.append(f"{seen[path.name]} and {rel}")
        seen.setdefault(path.name, rel)
    assert not clashes, "test files that share a basename: " + "; ".join(clashes)
