#!/usr/bin/env python3
"""Generate the Python stubs of the kubelet's gRPC contracts, or check that they are current.

The stubs are committed (a user installing gpupool needs no protoc), so a stale stub is a real
risk: the agent would speak an older contract than the ``.proto`` next to it. ``--check``
regenerates into a temporary folder and fails on any difference; a unit test runs it.

Usage: ``python scripts/gen_protos.py [--check]`` from the repository root.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE = Path("gpupool/agent/protos")
OUTPUT_ROOT = ROOT / "src"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def _protos() -> list[Path]:
    return sorted((PROTO_ROOT / PACKAGE).rglob("*.proto"))


def generate(out: Path) -> list[Path]:
    """Run protoc for every proto into ``out``; return the generated files (relative)."""
    from grpc_tools import protoc

    protos = _protos()
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *(str(proto) for proto in protos),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    generated = []
    for proto in protos:
        stem = proto.relative_to(PROTO_ROOT).with_suffix("")
        generated.extend(Path(f"{stem}{suffix}") for suffix in GENERATED_SUFFIXES)
    return generated


def main() -> int:
    """Write the stubs into src/, or with --check compare them; 1 when stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Fail if the stubs are stale.")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = generate(Path(tmp))
        stale = [
            f
            for f in files
            if not (OUTPUT_ROOT / f).is_file() or not filecmp.cmp(Path(tmp) / f, OUTPUT_ROOT / f)
        ]
        if options.check:
            for path in stale:
                print(f"stale or missing: src/{path}", file=sys.stderr)
            if stale:
                print("run: python scripts/gen_protos.py", file=sys.stderr)
            return 1 if stale else 0
        for path in files:
            target = OUTPUT_ROOT / path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(tmp) / path, target)
            for folder in target.relative_to(OUTPUT_ROOT / PACKAGE.parent).parents:
                init = OUTPUT_ROOT / PACKAGE.parent / folder / "__init__.py"
                if folder != Path(".") and not init.exists():
                    init.write_text("")
        print(f"wrote {len(files)} files under src/{PACKAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
