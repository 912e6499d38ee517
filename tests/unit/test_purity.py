"""The core stays pure: no clock, no event loop, no I/O libraries, no global randomness.

import-linter (``make lint``) forbids third-party and adapter imports; this test adds the
standard-library modules that would make a decision depend on something other than its inputs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "gpupool"
PURE_PACKAGES = ("core", "policy", "scheduling")
FORBIDDEN = {
    "time", "datetime", "asyncio", "random", "os", "socket", "subprocess", "threading",
    "multiprocessing", "logging", "pathlib", "io", "urllib", "http", "sqlite3",
}  # fmt: skip


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


PURE_FILES = sorted(path for pkg in PURE_PACKAGES for path in (SRC / pkg).rglob("*.py"))


def test_there_are_pure_modules_to_check() -> None:
    assert len(PURE_FILES) >= 10


@pytest.mark.parametrize("path", PURE_FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_pure_module_imports_nothing_impure(path: Path) -> None:
    assert not imported_roots(path) & FORBIDDEN


def test_the_checker_sees_a_planted_import(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("import time\nfrom datetime import datetime\n")
    assert imported_roots(planted) & FORBIDDEN == {"time", "datetime"}
