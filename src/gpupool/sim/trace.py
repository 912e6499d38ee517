"""Readers for the Alibaba openb trace (cluster-trace-gpu-v2023) node and pod lists.

The files are plain CSV with a header. Node lists have ``sn, cpu_milli, memory_mib, gpu, model``;
pod lists have at least ``name, cpu_milli, memory_mib, num_gpu, gpu_milli`` and may add
``gpu_spec`` (allowed models separated by ``|``) and columns the replay protocol ignores (qos,
phase, timestamps). Columns are found by name, so their order does not matter.

Every malformed row raises :class:`TraceFormatError` naming the file, the line and the column,
and nothing is silently skipped. One tolerance is inherited from the authors' converter: a
``gpu_milli`` above 1000 is clipped to 1000.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gpupool.core.model import MILLI_PER_GPU, InvalidSpecError, NodeSpec, PodSpec

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
OPENB_MAX_PODS = 1001
"""Pod slots per node in the FGD simulator's node YAML."""

SpecT = TypeVar("SpecT", NodeSpec, PodSpec)

_POD_FIELD_TO_COLUMN = {
    "name": "name",
    "cpu_milli": "cpu_milli",
    "memory_mib": "memory_mib",
    "gpu_count": "num_gpu",
    "gpu_milli": "gpu_milli",
}
_NODE_FIELD_TO_COLUMN = {
    "name": "sn",
    "cpu_milli": "cpu_milli",
    "memory_mib": "memory_mib",
    "gpu_count": "gpu",
    "gpu_model": "model",
}


class TraceFormatError(ValueError):
    """A trace file that cannot be read; the message names the file, line and column."""

    def __init__(self, path: Path, line: int, column: str | None, message: str) -> None:
        where = f"{path}, line {line}" + (f", column '{column}'" if column else "")
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.column = column


@dataclass(frozen=True, slots=True)
class Trace:
    """A node list and a pod list read from disk.

    Attributes:
        name: A short name for reports (the pod file's stem without ``openb_pod_list_``).
        nodes: The nodes, in file order.
        pods: The pods, in file order.
    """

    name: str
    nodes: tuple[NodeSpec, ...]
    pods: tuple[PodSpec, ...]


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, Mapping[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceFormatError(path, 0, None, f"cannot open: {exc.strerror}") from exc
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [column for column in required if column not in header]
        if missing:
            raise TraceFormatError(path, 1, missing[0], f"missing column(s) {', '.join(missing)}")
        for row in reader:
            if None in row:
                raise TraceFormatError(
                    path, reader.line_num, None, f"expected {len(header)} fields, got more"
                )
            absent = [column for column in header if row[column] is None]
            if absent:
                raise TraceFormatError(
                    path, reader.line_num, absent[0], f"expected {len(header)} fields, got fewer"
                )
            yield reader.line_num, row


def _integer(path: Path, line: int, row: Mapping[str, str], column: str) -> int:
    text = row[column].strip()
    try:
        value = int(text)
    except ValueError:
        raise TraceFormatError(
            path, line, column, f"expected a non-negative integer, got {text!r}"
        ) from None
    if value < 0:
        raise TraceFormatError(path, line, column, f"expected a non-negative integer, got {value}")
    return value


def _read_specs(
    path: Path,
    required: tuple[str, ...],
    kind: str,
    columns: Mapping[str, str],
    build: Callable[[int, Mapping[str, str]], SpecT],
) -> tuple[SpecT, ...]:
    """Read rows into specs; duplicate names and invalid specs become TraceFormatErrors.

    Args:
        path: The CSV file.
        required: Columns the header must have; the first one holds the name.
        kind: "node" or "pod", for messages.
        columns: Spec field name to CSV column, to name the column of an invalid field.
        build: Makes one spec from (line, row); may raise InvalidSpecError.
    """
    specs: list[SpecT] = []
    seen: dict[str, int] = {}
    name_column = required[0]
    for line, row in _rows(path, required):
        name = row[name_column].strip()
        if name in seen:
            raise TraceFormatError(
                path, line, name_column, f"duplicate {kind} {name!r} (line {seen[name]})"
            )
        seen[name] = line
        try:
            specs.append(build(line, row))
        except InvalidSpecError as exc:
            column = columns.get(exc.field_name, exc.field_name)
            raise TraceFormatError(path, line, column, str(exc)) from exc
    if not specs:
        raise TraceFormatError(path, 1, None, f"no {kind}s")
    return tuple(specs)


def read_nodes(path: Path) -> tuple[NodeSpec, ...]:
    """Read an openb node list.

    Raises:
        TraceFormatError: The file is missing, a column is missing, or a row is malformed.
    """

    def build(line: int, row: Mapping[str, str]) -> NodeSpec:
        gpus = _integer(path, line, row, "gpu")
        return NodeSpec(
            name=row["sn"].strip(),
            cpu_milli=_integer(path, line, row, "cpu_milli"),
            memory_mib=_integer(path, line, row, "memory_mib"),
            gpu_count=gpus,
            gpu_model=row["model"].strip() if gpus else "",
            max_pods=OPENB_MAX_PODS,
        )

    return _read_specs(path, NODE_COLUMNS, "node", _NODE_FIELD_TO_COLUMN, build)


def read_pods(path: Path) -> tuple[PodSpec, ...]:
    """Read an openb pod list.

    Raises:
        TraceFormatError: The file is missing, a column is missing, or a row is malformed.
    """

    def build(line: int, row: Mapping[str, str]) -> PodSpec:
        spec = (row.get("gpu_spec") or "").strip()
        return PodSpec(
            name=row["name"].strip(),
            cpu_milli=_integer(path, line, row, "cpu_milli"),
            memory_mib=_integer(path, line, row, "memory_mib"),
            gpu_count=_integer(path, line, row, "num_gpu"),
            gpu_milli=min(_integer(path, line, row, "gpu_milli"), MILLI_PER_GPU),
            gpu_models=frozenset(part.strip() for part in spec.split("|") if part.strip()),
        )

    return _read_specs(path, POD_COLUMNS, "pod", _POD_FIELD_TO_COLUMN, build)


def trace_name(pods_path: Path) -> str:
    """``openb_pod_list_gpushare40.csv`` becomes ``gpushare40``."""
    return pods_path.stem.removeprefix("openb_pod_list_")


def read_trace(nodes_path: Path, pods_path: Path) -> Trace:
    """Read a node list and a pod list together."""
    return Trace(
        name=trace_name(pods_path), nodes=read_nodes(nodes_path), pods=read_pods(pods_path)
    )
