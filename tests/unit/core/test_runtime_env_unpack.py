"""Unpacking runtime-env packages safely (pure: crafted zips in tmp): the uncompressed-size and
compression-ratio caps against zip bombs, symlink entries refused and never followed, paths that
leave the package refused, and modes normalised to 0644/0755 whatever the archive carries; pip
option-like requirements refused on both sides."""
from __future__ import annotations

import asyncio
import io
import os
import stat
import zipfile

import pytest

from ember._private.runtime_env import validation
from ember_raylet import unpack
from ember_raylet.runtime_env import RuntimeEnvManager, SetupFailed, _install_package


def _zip(entries: list[tuple[str, bytes, int]], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip of (name, data, st_mode) entries; st_mode goes into external_attr as zip does."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return buf.getvalue()


def test_zip_bomb_is_refused_by_the_ratio_cap(tmp_path):
    bomb = _zip([("zeros.bin", bytes(32 * 2**20), stat.S_IFREG | 0o644)])
    assert len(bomb) < 64 * 1024  # a tiny package ...
    with pytest.raises(unpack.UnpackError, match=r"expands more than 200x .*compression ratio"):
        unpack.unpack_zip(io.BytesIO(bomb), str(tmp_path), "pkg")
    assert os.listdir(tmp_path) == []  # ... refused from its declared sizes, nothing written


def test_lying_declared_sizes_are_caught_while_writing(tmp_path):
    data = bytearray(_zip([("zeros.bin", bytes(8 * 2**20), stat.S_IFREG | 0o644)]))
    # claim 1 KiB uncompressed in both headers (zipfile then stops reading at the claimed size
    # and fails the CRC); the declared check passes, so only the streaming count could refuse
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        real = zf.infolist()[0].file_size
    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = bytes(data).index(sig) + off
        assert int.from_bytes(data[at:at + 4], "little") == real
        data[at:at + 4] = (1024).to_bytes(4, "little")
    with pytest.raises(unpack.UnpackError, match="not a valid zip|expands more than"):
        unpack.unpack_zip(io.BytesIO(bytes(data)), str(tmp_path), "pkg")
    assert not (tmp_path / "zeros.bin").exists() or os.path.getsize(tmp_path / "zeros.bin") <= 1024


def test_streaming_count_refuses_what_the_declared_check_let_through(tmp_path, monkeypatch):
    data = _zip([("zeros.bin", bytes(8 * 2**20), stat.S_IFREG | 0o644)])
    monkeypatch.setattr(unpack, "_check_declared", lambda *a: None)
    with pytest.raises(unpack.UnpackError, match="expands more than 200x"):
        unpack.unpack_zip(io.BytesIO(data), str(tmp_path), "pkg")
    assert os.path.getsize(tmp_path / "zeros.bin") <= 200 * len(data) + 2**16


def test_many_small_entries_bomb_is_refused_by_the_total_ratio(tmp_path):
    # each entry stays under the per-entry floor; the archive as a whole expands too far
    bomb = _zip([(f"f{i}.bin", bytes(512 * 1024), stat.S_IFREG | 0o644) for i in range(8)])
    with pytest.raises(unpack.UnpackError, match="expands more than"):
        unpack.unpack_zip(io.BytesIO(bomb), str(tmp_path), "pkg")


def test_uncompressed_total_is_capped(tmp_path):
    data = _zip([("a.bin", os.urandom(300_000), stat.S_IFREG | 0o644),
                 ("b.bin", os.urandom(300_000), stat.S_IFREG | 0o644)], zipfile.ZIP_STORED)
    with pytest.raises(unpack.UnpackError, match=r"more than 500000 bytes .*uncompressed size.*'b.bin'"):
        unpack.unpack_zip(io.BytesIO(data), str(tmp_path), "pkg", max_bytes=500_000)
    assert unpack.MAX_UNPACKED_BYTES == 2 * 2**30 and unpack.MAX_RATIO == 200


def test_ordinary_package_unpacks(tmp_path):
    text = b"print('hello')\n" * 2000  # compresses well, but stays under the ratio floor
    data = _zip([("pkg/", b"", stat.S_IFDIR | 0o755), ("pkg/mod.py", text, stat.S_IFREG | 0o644),
                 ("data.bin", os.urandom(2 * 2**20), stat.S_IFREG | 0o644)])
    assert unpack.unpack_zip(io.BytesIO(data), str(tmp_path), "pkg") == len(text) + 2 * 2**20
    assert (tmp_path / "pkg" / "mod.py").read_bytes() == text


def test_symlink_entries_are_refused_and_never_created(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    data = _zip([("ok.txt", b"ok", stat.S_IFREG | 0o644),
                 ("passwd", b"/etc/passwd", stat.S_IFLNK | 0o777)])
    with pytest.raises(unpack.UnpackError, match=r"entry 'passwd' is a symlink; .*refused"):
        unpack.unpack_zip(io.BytesIO(data), str(dest), "pkg")
    assert not os.path.lexists(dest / "passwd")


def test_a_symlink_already_in_the_target_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    os.symlink(outside, dest / "sub")
    data = _zip([("sub/x.txt", b"x", stat.S_IFREG | 0o644)])
    with pytest.raises(unpack.UnpackError, match="escapes the package|symlink"):
        unpack.unpack_zip(io.BytesIO(data), str(dest), "pkg")
    assert os.listdir(outside) == []


@pytest.mark.parametrize("name", ["../evil.txt", "a/../../evil.txt", "/tmp/ember-evil-abs.txt"])
def test_entries_leaving_the_package_are_refused(tmp_path, name):
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(unpack.UnpackError, match="escapes the package"):
        unpack.unpack_zip(io.BytesIO(_zip([(name, b"x", stat.S_IFREG | 0o644)])), str(dest), "pkg")
    assert not (tmp_path / "evil.txt").exists() and not os.path.exists("/tmp/ember-evil-abs.txt")


def test_modes_are_normalised(tmp_path):
    old = os.umask(0)
    try:
        data = _zip([("d/", b"", stat.S_IFDIR | 0o777), ("d/w.txt", b"w", stat.S_IFREG | 0o666),
                     ("run.sh", b"#!/bin/sh\n", stat.S_IFREG | 0o777),
                     ("suid", b"s", stat.S_IFREG | 0o4777), ("plain", b"p", 0),
                     ("e/deep.txt", b"d", stat.S_IFREG | 0o600)])
        unpack.unpack_zip(io.BytesIO(data), str(tmp_path), "pkg")
    finally:
        os.umask(old)

    def mode(rel: str) -> int:
        return stat.S_IMODE(os.stat(tmp_path / rel).st_mode)
    assert mode("d") == 0o755 and mode("e") == 0o755
    assert mode("d/w.txt") == 0o644 and mode("plain") == 0o644 and mode("e/deep.txt") == 0o644
    assert mode("run.sh") == 0o755 and mode("suid") == 0o755


def test_install_package_reports_setup_failed_and_leaves_nothing(tmp_path):
    dest = tmp_path / "pkgs" / "_ray_pkg_x"
    with pytest.raises(SetupFailed, match="is a symlink"):
        _install_package(_zip([("l", b"/", stat.S_IFLNK | 0o777)]), str(dest))
    assert os.listdir(tmp_path / "pkgs") == []
    whl = tmp_path / "pkgs" / "x-1.0-py3-none-any.whl"
    old = os.umask(0)
    try:
        _install_package(b"wheel bytes", str(whl))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(whl).st_mode) == 0o644


@pytest.mark.parametrize("req", ["--report=/tmp/x.json", "--index-url=http://evil", "-e .",
                                 " -r other.txt"])
def test_pip_packages_take_requirement_specifiers_only(req, tmp_path):
    with pytest.raises(ValueError, match=r"is a pip option, not a requirement; .*pip_install_options"):
        validation.validate({"pip": [req]})
    with pytest.raises(ValueError, match=r"is a pip option"):
        validation.validate({"pip": {"packages": ["requests", req]}})
    reqs = tmp_path / "requirements.txt"
    reqs.write_text(f"requests\n{req}\n")
    with pytest.raises(ValueError, match=r"is a pip option"):
        validation.validate({"pip": str(reqs)})


def test_pip_options_still_go_through_pip_install_options():
    env = validation.validate({"pip": {"packages": ["requests>=2", "tiny @ file:///w/t.whl"],
                                       "pip_install_options": ["--no-index", "--find-links", "d"]}})
    assert env["pip"]["packages"] == ["requests>=2", "tiny @ file:///w/t.whl"]
    assert env["pip"]["pip_install_options"] == ["--no-index", "--find-links", "d"]


def test_raylet_refuses_option_like_packages_from_a_raw_client(tmp_path):
    mgr = RuntimeEnvManager(str(tmp_path))
    with pytest.raises(SetupFailed, match=r"'--report=x.json' is not a requirement specifier"):
        asyncio.run(mgr.venv({"packages": ["--report=x.json"], "pip_install_options": []}))
    assert not os.path.exists(tmp_path / "pip") or os.listdir(tmp_path / "pip") == []
