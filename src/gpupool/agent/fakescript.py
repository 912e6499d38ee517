"""A file that scripts the fake NVML of a running agent: GPU processes and XID events.

On a machine without a GPU the agent runs on :class:`~gpupool.agent.fakenvml.FakeNvml`
(``--fake-gpus``). Tests and the dev cluster script it in-process; an agent in a pod of the real
node is another process, so what the driver would report comes from ``fake-nvml.json`` in the
agent's state folder (a host path only root on the node writes, like the driver's own state):

.. code-block:: json

    {"processes": {"GPU-node-0": [{"pid": 4242, "memory_mib": 2048, "sm_percent": 60,
                                   "memory_busy_percent": 10}]},
     "xids": [{"gpu": "GPU-node-3", "xid": 79}],
     "throttles": {"GPU-node-1": {"reasons": 4, "sm_clock_mhz": 1320}}}

``processes`` is what runs on each GPU now (a GPU left out runs nothing), with real host PIDs:
the agent maps them to pods through ``/proc/<pid>/cgroup`` exactly as it does NVML's. ``xids``
only grows: each entry is raised once, in order, as the driver raises an event once; an agent
that restarts reads the list again, so a GPU that broke stays broken (as a GPU that fell off
the bus does). ``throttles`` is each throttled GPU's NVML clocks-event reasons bitmask (4: power
cap, 64: hardware thermal slowdown) and its SM clock now (0: the board's maximum). A file that
does not parse is reported, naming the field, and the last good
script stays in force: a typo must not make every GPU look idle or healthy.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool.agent.nvml import ProcessUsage

log = logging.getLogger(__name__)

SCRIPT_FILE = "fake-nvml.json"
"""Its name in the agent's state folder."""


class ScriptError(ValueError):
    """The script file does not say what it must (the message names the field)."""


@dataclass(frozen=True, slots=True)
class Throttle:
    """One GPU's clock throttling.

    Attributes:
        reasons: NVML's clocks-event reasons bitmask (0: not throttled).
        sm_clock_mhz: The SM clock now; 0 for the board's maximum.
    """

    reasons: int = 0
    sm_clock_mhz: int = 0


NO_THROTTLE = Throttle()


@dataclass(frozen=True, slots=True)
class FakeScript:
    """What the file says.

    Attributes:
        processes: Per GPU UUID, what runs on it.
        xids: Every XID event so far, in order: (GPU UUID, XID).
        throttles: Per GPU UUID, its throttling (a GPU left out runs at full clock).
    """

    processes: dict[str, tuple[ProcessUsage, ...]]
    xids: tuple[tuple[str, int], ...]
    throttles: dict[str, Throttle] = field(default_factory=dict)


def _count(entry: dict[str, Any], key: str, where: str, *, limit: int | None = None) -> int:
    value = entry.get(key, 0)
    if type(value) is not int or value < 0 or (limit is not None and value > limit):
        bound = f"0..{limit}" if limit is not None else "a whole number >= 0"
        raise ScriptError(f"{where}.{key}: {value!r} is not {bound}")
    return value


def _process(gpu: str, entry: object, where: str) -> ProcessUsage:
    if not isinstance(entry, dict):
        raise ScriptError(f"{where}: expected an object with pid, memory_mib, sm_percent")
    unknown = set(entry) - {"pid", "memory_mib", "sm_percent", "memory_busy_percent"}
    if unknown:
        raise ScriptError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    if "pid" not in entry:
        raise ScriptError(f"{where}.pid: missing")
    return ProcessUsage(
        gpu_uuid=gpu,
        pid=_count(entry, "pid", where),
        memory_mib=_count(entry, "memory_mib", where),
        sm_percent=_count(entry, "sm_percent", where, limit=100),
        memory_busy_percent=_count(entry, "memory_busy_percent", where, limit=100),
    )


def _xid(entry: object, where: str) -> tuple[str, int]:
    if not isinstance(entry, dict) or not isinstance(entry.get("gpu"), str):
        raise ScriptError(f"{where}.gpu: expected a GPU UUID")
    return entry["gpu"], _count(entry, "xid", where)


def _throttles(document: dict[str, Any]) -> dict[str, Throttle]:
    by_gpu = document.get("throttles", {})
    if not isinstance(by_gpu, dict):
        raise ScriptError("throttles: expected an object of GPU UUID to its throttling")
    throttles = {}
    for gpu, entry in by_gpu.items():
        where = f"throttles.{gpu}"
        if not isinstance(entry, dict):
            raise ScriptError(f"{where}: expected an object with reasons, sm_clock_mhz")
        unknown = set(entry) - {"reasons", "sm_clock_mhz"}
        if unknown:
            raise ScriptError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        reasons = _count(entry, "reasons", where)
        throttles[gpu] = Throttle(reasons, _count(entry, "sm_clock_mhz", where))
    return throttles


def parse_script(text: str) -> FakeScript:
    """Read a script file's text.

    Raises:
        ScriptError: Not JSON, or a field of the wrong shape (named in the message).
    """
    try:
        document = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as error:
        raise ScriptError(f"not JSON: {error}") from None
    if not isinstance(document, dict):
        raise ScriptError("expected an object with processes, xids and throttles")
    unknown = set(document) - {"processes", "xids", "throttles"}
    if unknown:
        raise ScriptError(f"unknown field(s) {', '.join(sorted(unknown))}")
    by_gpu = document.get("processes", {})
    if not isinstance(by_gpu, dict):
        raise ScriptError("processes: expected an object of GPU UUID to a list of processes")
    processes = {}
    for gpu, entries in by_gpu.items():
        if not isinstance(entries, list):
            raise ScriptError(f"processes.{gpu}: expected a list")
        where = f"processes.{gpu}"
        processes[gpu] = tuple(_process(gpu, e, f"{where}[{i}]") for i, e in enumerate(entries))
    xids = document.get("xids", [])
    if not isinstance(xids, list):
        raise ScriptError("xids: expected a list")
    return FakeScript(
        processes,
        tuple(_xid(e, f"xids[{i}]") for i, e in enumerate(xids)),
        _throttles(document),
    )


class ScriptFile:
    """The script file, read again whenever it changed (its size or modification time).

    Args:
        path: The file; it need not exist yet (then nothing is scripted).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None
        self.script = FakeScript({}, ())

    def read(self) -> FakeScript:
        """The script in force: the file's, or the last good one when it does not parse."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return self.script
        mark = (stat.st_mtime_ns, stat.st_size)
        if mark == self._seen:
            return self.script
        self._seen = mark
        try:
            self.script = parse_script(self.path.read_text())
        except (OSError, UnicodeDecodeError, ScriptError) as error:
            log.error("%s: %s; keeping the last good script", self.path, error)
        return self.script
