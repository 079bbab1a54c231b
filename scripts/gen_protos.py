"""Regenerates the Python gRPC stubs from proto/*.proto into common/ember_common/proto.

Usage: python scripts/gen_protos.py [--out DIR]

The generated package is committed; tests/unit/gates/test_protos.py regenerates into a temporary
directory and fails on any difference, so edit the .proto files and rerun this script.
grpcio-tools is pinned (pyproject's `dev` extra) so that output is byte-for-byte reproducible.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
DEFAULT_OUT = ROOT / "common" / "ember_common" / "proto"
_IMPORT_RE = re.compile(r"^import (\w+_pb2)( as \w+)?$", re.M)


def generate(out: pathlib.Path) -> list[pathlib.Path]:
    """Runs protoc into `out` and rewrites imports to be package-relative."""
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    protos = sorted(str(p.name) for p in PROTO_DIR.glob("*.proto"))
    # mypy-protobuf's plugin (pinned in the dev extra) types the gRPC stubs and servicers (.pyi).
    plugin = pathlib.Path(sys.executable).parent / "protoc-gen-mypy_grpc"
    if not plugin.exists():
        raise SystemExit(f"{plugin} is missing: install the dev extra (mypy-protobuf)")
    args = ["protoc", f"-I{PROTO_DIR}", f"--python_out={out}", f"--pyi_out={out}",
            f"--grpc_python_out={out}", f"--plugin=protoc-gen-mypy_grpc={plugin}",
            f"--mypy_grpc_out={out}", *protos]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    written = []
    for path in sorted(out.glob("*_pb2*.py*")):
        text = path.read_text()
        text = _IMPORT_RE.sub(lambda m: f"from . import {m.group(1)}{m.group(2) or ''}", text)
        path.write_text(text)
        written.append(path)
    init = out / "__init__.py"
    init.write_text('"""Generated gRPC stubs (scripts/gen_protos.py). Do not edit."""\n')
    written.append(init)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    ns = parser.parse_args(argv)
    for path in generate(ns.out):
        print(path.relative_to(ns.out.parent) if path.is_relative_to(ns.out.parent) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
