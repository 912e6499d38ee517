"""The openb trace readers: good files parse, bad files name the file, the line and the column."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from gpupool.core.model import NodeSpec, PodSpec
from gpupool.sim.trace import (
    OPENB_MAX_PODS,
    TraceFormatError,
    read_nodes,
    read_pods,
    read_trace,
    trace_name,
)

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER_11 = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
POD_HEADER_5 = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def assert_trace_error(
    error: TraceFormatError, path: Path, line: int, column: str | None, text: str = ""
) -> None:
    message = str(error)
    assert str(path) in message
    assert re.search(rf"\bline {line}\b", message), message
    assert error.path == path
    assert error.line == line
    assert error.column == column
    if column is not None:
        assert f"column '{column}'" in message
    else:
        assert ", column '" not in message
    assert text in message


# ------------------------------------------------------------------------------------------------
# Good files
# ------------------------------------------------------------------------------------------------


def test_read_nodes(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "nodes.csv",
        [
            NODE_HEADER,
            "openb-node-0000,64000,262144,0,",
            "openb-node-0001,96000,393216,8,G2",
            "openb-node-0002, 32000 ,131072,4,V100M16",
            "openb-node-0003,8000,61440,0,T4",
        ],
    )
    nodes = read_nodes(path)
    assert nodes == (
        NodeSpec("openb-node-0000", 64_000, 262_144, 0, "", max_pods=OPENB_MAX_PODS),
        NodeSpec("openb-node-0001", 96_000, 393_216, 8, "G2", max_pods=OPENB_MAX_PODS),
        NodeSpec("openb-node-0002", 32_000, 131_072, 4, "V100M16", max_pods=OPENB_MAX_PODS),
        # A model on a node without GPUs is dropped.
        NodeSpec("openb-node-0003", 8000, 61_440, 0, "", max_pods=OPENB_MAX_PODS),
    )


def test_read_pods_eleven_columns(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "openb_pod_list_default.csv",
        [
            POD_HEADER_11,
            "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0",
            "openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061",
            "openb-pod-0002,4000,15258,0,0,,BE,Failed,1061323,1061343,",
            "openb-pod-0003,88000,327680,8,1000,V100M16|V100M32,LS,Running,1,2,1",
            "openb-pod-0004,3000,8192,1,200,V100M16|V100M32|V100M32,BE,Pending,5,,",
            "openb-pod-0005,3000,8192,1,1500,T4,BE,Running,5,6,5",
            "openb-pod-0006, 2000 , 1024 , 2 , 1000 , G2 | T4 ,LS,Running,5,6,5",
        ],
    )
    pods = read_pods(path)
    assert pods == (
        PodSpec("openb-pod-0000", 12_000, 16_384, 1, 1000),
        PodSpec("openb-pod-0001", 6000, 12_288, 1, 460),
        PodSpec("openb-pod-0002", 4000, 15_258),
        PodSpec(
            "openb-pod-0003", 88_000, 327_680, 8, 1000, gpu_models=frozenset({"V100M16", "V100M32"})
        ),
        PodSpec("openb-pod-0004", 3000, 8192, 1, 200, gpu_models=frozenset({"V100M16", "V100M32"})),
        # gpu_milli above 1000 is clipped to 1000, as the authors' converter does.
        PodSpec("openb-pod-0005", 3000, 8192, 1, 1000, gpu_models=frozenset({"T4"})),
        PodSpec("openb-pod-0006", 2000, 1024, 2, 1000, gpu_models=frozenset({"G2", "T4"})),
    )
    assert trace_name(path) == "default"


def test_read_pods_five_columns_and_any_column_order(tmp_path: Path) -> None:
    five = write(
        tmp_path,
        "openb_pod_list_multigpu20.csv",
        [POD_HEADER_5, "p0,1000,2048,0,0", "p1,2000,4096,4,1000", "p2,500,512,1,50"],
    )
    assert read_pods(five) == (
        PodSpec("p0", 1000, 2048),
        PodSpec("p1", 2000, 4096, 4, 1000),
        PodSpec("p2", 500, 512, 1, 50),
    )
    shuffled = write(
        tmp_path,
        "shuffled.csv",
        ["gpu_milli,qos,num_gpu,name,memory_mib,cpu_milli", "250,LS,1,q0,100,300"],
    )
    assert read_pods(shuffled) == (PodSpec("q0", 300, 100, 1, 250),)


def test_read_trace(tmp_path: Path) -> None:
    nodes = write(tmp_path, "nodes.csv", [NODE_HEADER, "n0,1000,1000,1,T4"])
    pods = write(tmp_path, "openb_pod_list_gpushare40.csv", [POD_HEADER_5, "p0,1,1,1,300"])
    trace = read_trace(nodes, pods)
    assert trace.name == "gpushare40"
    assert trace.nodes == (NodeSpec("n0", 1000, 1000, 1, "T4", max_pods=OPENB_MAX_PODS),)
    assert trace.pods == (PodSpec("p0", 1, 1, 1, 300),)


# ------------------------------------------------------------------------------------------------
# Bad files
# ------------------------------------------------------------------------------------------------

GOOD_POD_ROW = "p-ok,1000,1024,1,500"

BAD_POD_FILES = [
    # lines, line, column, text in the message
    pytest.param(
        [POD_HEADER_5, GOOD_POD_ROW, "p1,abc,1024,1,500"], 3, "cpu_milli", "'abc'", id="non-integer"
    ),
    pytest.param(
        [POD_HEADER_5, GOOD_POD_ROW, GOOD_POD_ROW.replace("ok", "x"), "p2,1,1.5,0,0"],
        4,
        "memory_mib",
        "'1.5'",
        id="float",
    ),
    pytest.param([POD_HEADER_5, "p1,1,1,,0"], 2, "num_gpu", "''", id="empty-value"),
    pytest.param([POD_HEADER_5, GOOD_POD_ROW, "p1,1,1,-1,500"], 3, "num_gpu", "-1", id="negative"),
    pytest.param(
        [POD_HEADER_5, "p1,-5,1,1,500"], 2, "cpu_milli", "non-negative", id="negative-cpu"
    ),
    pytest.param(
        [POD_HEADER_5, "p1,1,1,1,-500"], 2, "gpu_milli", "non-negative", id="negative-milli"
    ),
    pytest.param(
        ["name,cpu_milli,memory_mib,num_gpu", "p1,1,1,0"], 1, "gpu_milli", "missing", id="no-column"
    ),
    pytest.param(
        [POD_HEADER_5, GOOD_POD_ROW, GOOD_POD_ROW.replace("ok", "x"), "p1,1,1,1"],
        4,
        "gpu_milli",  # the first column the short row lacks
        "expected 5 fields",
        id="too-few-fields",
    ),
    pytest.param(
        [POD_HEADER_5, "p1,1,1,1,500,extra"], 2, None, "expected 5 fields", id="too-many-fields"
    ),
    pytest.param(
        [POD_HEADER_5, "dup,1,1,0,0", GOOD_POD_ROW, "dup,2,2,0,0"],
        4,
        "name",
        "duplicate pod 'dup' (line 2)",
        id="duplicate",
    ),
    pytest.param(
        [POD_HEADER_5, GOOD_POD_ROW, "p1,1,1,0,300"],
        3,
        "num_gpu",
        "gpu_count",
        id="share-without-gpus",
    ),
    pytest.param(
        [POD_HEADER_5, "p1,1,1,2,0"], 2, "gpu_milli", "gpu_milli > 0", id="gpus-without-milli"
    ),
    pytest.param([POD_HEADER_5, ",1,1,0,0"], 2, "name", "must not be empty", id="empty-name"),
    pytest.param([], 1, "name", "missing column", id="empty-file"),
    pytest.param([POD_HEADER_11], 1, None, "no pods", id="header-only"),
]


@pytest.mark.parametrize(("lines", "line", "column", "text"), BAD_POD_FILES)
def test_bad_pod_files(
    tmp_path: Path, lines: list[str], line: int, column: str | None, text: str
) -> None:
    path = write(tmp_path, "pods.csv", lines)
    with pytest.raises(TraceFormatError) as info:
        read_pods(path)
    assert_trace_error(info.value, path, line, column, text)


GOOD_NODE_ROW = "n-ok,1000,1000,2,T4"

BAD_NODE_FILES = [
    pytest.param(
        [NODE_HEADER, GOOD_NODE_ROW, "n1,1000,1000,two,T4"], 3, "gpu", "'two'", id="non-integer"
    ),
    pytest.param([NODE_HEADER, "n1,-1000,1000,0,"], 2, "cpu_milli", "-1000", id="negative"),
    pytest.param(
        ["sn,cpu_milli,memory_mib,gpu", "n1,1,1,0"], 1, "model", "missing", id="no-column"
    ),
    pytest.param(
        [NODE_HEADER, GOOD_NODE_ROW, "n1,1000,1000"],
        3,
        "gpu",  # the first column the short row lacks
        "expected 5 fields",
        id="too-few-fields",
    ),
    pytest.param(
        [NODE_HEADER, GOOD_NODE_ROW, "n1,1,1,0,", "n-ok,1,1,0,"],
        4,
        "sn",
        "duplicate node 'n-ok' (line 2)",
        id="duplicate",
    ),
    pytest.param(
        [NODE_HEADER, "n1,1000,1000,2,"], 2, "model", "model name", id="gpus-without-model"
    ),
    pytest.param([NODE_HEADER, ",1000,1000,0,"], 2, "sn", "must not be empty", id="empty-name"),
    pytest.param([], 1, "sn", "missing column", id="empty-file"),
    pytest.param([NODE_HEADER], 1, None, "no nodes", id="header-only"),
]


@pytest.mark.parametrize(("lines", "line", "column", "text"), BAD_NODE_FILES)
def test_bad_node_files(
    tmp_path: Path, lines: list[str], line: int, column: str | None, text: str
) -> None:
    path = write(tmp_path, "nodes.csv", lines)
    with pytest.raises(TraceFormatError) as info:
        read_nodes(path)
    assert_trace_error(info.value, path, line, column, text)


@pytest.mark.parametrize("reader", [read_nodes, read_pods], ids=["nodes", "pods"])
def test_missing_file(tmp_path: Path, reader: Callable[[Path], tuple[object, ...]]) -> None:
    path = tmp_path / "does-not-exist.csv"
    with pytest.raises(TraceFormatError) as info:
        reader(path)
    assert_trace_error(info.value, path, 0, None, "cannot open")


def test_line_numbers_count_physical_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", [POD_HEADER_5, GOOD_POD_ROW, "", "p1,1,1,0,0", "p2,x,1,0,0"])
    with pytest.raises(TraceFormatError) as info:
        read_pods(path)
    assert_trace_error(info.value, path, 5, "cpu_milli", "'x'")


def test_trace_format_error_is_a_value_error(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", [POD_HEADER_5])
    with pytest.raises(ValueError, match="no pods"):
        read_pods(path)
