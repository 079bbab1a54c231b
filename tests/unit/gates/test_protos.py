"""The committed stubs in common/ember_common/proto are exactly what scripts/gen_protos.py generates."""
from __future__ import annotations

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "common" / "ember_common" / "proto"
SCRIPT = ROOT / "scripts" / "gen_protos.py"


def load_generator():
    spec = importlib.util.spec_from_file_location("_ember_gen_protos", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def files(d: pathlib.Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def test_generator_reads_the_repo_protos():
    gen = load_generator()
    assert gen.PROTO_DIR == ROOT / "proto"
    assert gen.DEFAULT_OUT == COMMITTED
    assert sorted(gen.PROTO_DIR.glob("*.proto")), "no .proto files found"


def test_committed_stubs_match_generated(tmp_path):
    gen = load_generator()
    out = tmp_path / "_proto"
    written = gen.generate(out)
    assert written and all(p.is_file() for p in written)

    generated = files(out)
    committed = files(COMMITTED)
    assert sorted(generated) == sorted(committed), (
        f"missing from the repo: {sorted(set(generated) - set(committed))}; "
        f"stale in the repo: {sorted(set(committed) - set(generated))}")
    differ = [name for name in generated if generated[name] != committed[name]]
    assert not differ, f"regenerate with `python scripts/gen_protos.py`; these differ: {differ}"


def test_every_proto_has_its_stubs():
    protos = sorted(p.stem for p in (ROOT / "proto").glob("*.proto"))
    names = set(files(COMMITTED))
    for stem in protos:
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            assert stem + suffix in names
    assert "__init__.py" in names


def test_stub_imports_are_package_relative():
    for path in COMMITTED.glob("*_pb2*.py"):
        for line in path.read_text().splitlines():
            assert not (line.startswith("import ") and "_pb2" in line), f"{path.name}: {line}"
