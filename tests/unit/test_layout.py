"""Small modules and short functions, kept that way (the project's style rule).

No module in ``src/gpupool`` may pass :data:`MODULE_LINES` lines and no function
:data:`FUNCTION_LINES`, generated code (``agent/protos``) excepted. A long function is usually
several jobs under one name, which is how a simulation loop came to hold its arrivals,
completions, cycles and metrics in 226 lines; the test names every offender at once, so a
change that adds one says where.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "gpupool"
GENERATED = ("agent/protos",)
"""Folders of generated code, relative to the package root."""
MODULE_LINES = 400
FUNCTION_LINES = 80


@dataclass(frozen=True, slots=True)
class Offender:
    """One module or function over its limit."""

    where: str
    lines: int
    limit: int

    def __str__(self) -> str:
        return f"{self.where}: {self.lines} lines (limit {self.limit})"


def source_files(root: Path = SRC) -> list[Path]:
    """Every Python file under ``root`` but the generated ones."""
    return sorted(
        path
        for path in root.rglob("*.py")
        if not any(path.is_relative_to(root / generated) for generated in GENERATED)
    )


def _functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method, nested ones included, with a dotted name."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append((name, child))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def offenders(path: Path, root: Path = SRC) -> list[Offender]:
    """The module itself if too long, and each function of it that is too long.

    A function's length runs from its ``def`` (decorators included) to its last line, docstring
    and comments included: what a reader has to hold at once.
    """
    text = path.read_text()
    relative = str(path.relative_to(root))
    found = []
    lines = len(text.splitlines())
    if lines > MODULE_LINES:
        found.append(Offender(relative, lines, MODULE_LINES))
    for name, function in _functions(ast.parse(text, filename=str(path))):
        first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
        length = (function.end_lineno or function.lineno) - first + 1
        if length > FUNCTION_LINES:
            found.append(Offender(f"{relative}:{name}", length, FUNCTION_LINES))
    return found


def test_there_are_modules_to_check() -> None:
    files = source_files()
    assert len(files) > 100
    assert not any("protos" in path.parts for path in files)


def test_no_module_or_function_is_over_its_limit() -> None:
    found = [offender for path in source_files() for offender in offenders(path)]
    assert not found, "too long:\n" + "\n".join(str(offender) for offender in found)


def test_the_checker_sees_a_long_module_and_a_long_method(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    planted = tmp_path / "planted.py"
    planted.write_text(
        "class Thing:\n"
        "    @staticmethod\n"
        f"    def long() -> None:\n{body.replace('    x', '        x')}\n"
        f"def short() -> None:\n    pass\n" + "\n" * MODULE_LINES
    )
    found = {offender.where: offender.lines for offender in offenders(planted, tmp_path)}
    assert found == {
        "planted.py": MODULE_LINES + FUNCTION_LINES + 5,
        "planted.py:Thing.long": FUNCTION_LINES + 2,
    }


def test_the_checker_leaves_generated_code_out(tmp_path: Path) -> None:
    generated = tmp_path / "agent" / "protos"
    generated.mkdir(parents=True)
    (generated / "big_pb2.py").write_text("x = 1\n" * (MODULE_LINES + 1))
    (tmp_path / "agent" / "big.py").write_text("x = 1\n" * (MODULE_LINES + 1))
    files = source_files(tmp_path)
    assert [str(path.relative_to(tmp_path)) for path in files] == ["agent/big.py"]
    assert [str(o) for o in offenders(files[0], tmp_path)] == [
        f"agent/big.py: {MODULE_LINES + 1} lines (limit {MODULE_LINES})"
    ]
