"""Every resource besides CPU, memory and GPUs, and host ports (NodeResourcesFit, NodePorts).

kube-scheduler checks them all; they live here so the snapshot and the filters share one
definition.

*Extra resources* (:data:`~gpupool.core.model.ExtraResources`: other vendors' extended resources,
``hugepages-*``, ``ephemeral-storage``) are one int64 column each, over the names some node
offers; a pod asking for a name no node offers fits nowhere, as in kube-scheduler, where a node
without a resource in allocatable has zero of it. The common pod asks for none and costs nothing
here: every entry point returns at once on an empty request.

*Host ports* follow kube-scheduler's rule: two ports conflict when they have the same port and
protocol and their host IPs are equal or either binds every address (``0.0.0.0``). Which ports
are in use is kept per node as ``(protocol, port) -> {host IP: holders}``; the filter visits only
the nodes where some port is in use, so a port-asking pod costs nothing on a cluster without them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from gpupool.core.model import WILDCARD_IP, ExtraResources, HostPort, NodeSpec, PodSpec

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

REASON_PORTS = "node(s) didn't have free ports for the requested pod ports"


def insufficient(name: str) -> str:
    """kube-scheduler's reason for a node short of resource ``name``."""
    return f"Insufficient {name}"


class ExtraColumns:
    """Capacity and free amounts of the extra resources, one column per name some node offers.

    Args:
        nodes: The node inventory, in snapshot row order.
    """

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        self.names: tuple[str, ...] = tuple(
            sorted({name for node in nodes for name, _ in node.extra_resources})
        )
        self.column: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self.capacity: IntArray = np.zeros((len(nodes), len(self.names)), dtype=np.int64)
        for row, node in enumerate(nodes):
            for name, amount in node.extra_resources:
                self.capacity[row, self.column[name]] = amount
        self.capacity.setflags(write=False)

    def new_free(self) -> IntArray:
        """A fresh free-amount array: everything allocatable is free."""
        return self.capacity.copy()

    def short_of(self, free: IntArray, node: int, extras: ExtraResources) -> str | None:
        """The first resource of ``extras`` that ``free`` lacks on ``node``; None when all fit."""
        for name, amount in extras:
            column = self.column.get(name)
            if column is None or free[node, column] < amount:
                return name
        return None

    def checks(
        self, free: IntArray, extras: ExtraResources, size: int
    ) -> list[tuple[str, BoolArray]]:
        """One kube-worded pass mask per resource of ``extras`` (``Insufficient <name>``)."""
        found = []
        for name, amount in extras:
            column = self.column.get(name)
            passed = np.zeros(size, np.bool_) if column is None else free[:, column] >= amount
            found.append((insufficient(name), passed))
        return found

    def could_ever_fit(self, extras: ExtraResources, size: int) -> BoolArray:
        """Nodes whose allocatable (nothing running) holds ``extras``."""
        ok = np.ones(size, dtype=np.bool_)
        for _, passed in self.checks(self.capacity, extras, size):
            ok &= passed
        return ok

    def apply(self, free: IntArray, node: int, extras: ExtraResources, sign: int) -> None:
        """Take (``sign`` -1) or give back (+1) ``extras`` on ``node``."""
        for name, amount in extras:
            free[node, self.column[name]] += sign * amount

    def clamped(self, free: IntArray, node: int, extras: ExtraResources) -> ExtraResources:
        """``extras`` cut down to what ``node`` has left of each (none of a resource it lacks)."""
        return tuple(
            (name, min(amount, int(free[node, self.column[name]])) if name in self.column else 0)
            for name, amount in extras
        )


PortUse = dict[tuple[str, int], Counter[str]]
"""One node's ports in use: ``(protocol, port)`` to the host IPs bound and how many times."""


def _conflicts(used: PortUse, port: HostPort) -> bool:
    ips = used.get((port.protocol, port.port))
    if not ips:
        return False
    return port.host_ip == WILDCARD_IP or WILDCARD_IP in ips or port.host_ip in ips


class PortsInUse:
    """The host ports held on each node, and kube-scheduler's conflict rule over them.

    Args:
        size: Number of nodes.
    """

    def __init__(self, size: int) -> None:
        self.by_node: list[PortUse] = [{} for _ in range(size)]
        self.busy: set[int] = set()
        """Rows with some port in use: the only ones a port-asking pod's filter visits."""

    def copy(self) -> PortsInUse:
        """A copy that later changes to this one do not touch."""
        clone = PortsInUse(0)
        clone.by_node = [{key: Counter(ips) for key, ips in used.items()} for used in self.by_node]
        clone.busy = set(self.busy)
        return clone

    def conflict(self, node: int, ports: Iterable[HostPort]) -> HostPort | None:
        """The first of ``ports`` already taken on ``node``; None when all are free."""
        used = self.by_node[node]
        if not used:
            return None
        return next((port for port in ports if _conflicts(used, port)), None)

    def free_mask(self, ports: tuple[HostPort, ...], size: int) -> BoolArray:
        """Nodes where every one of ``ports`` is free."""
        mask = np.ones(size, dtype=np.bool_)
        for node in self.busy:
            if self.conflict(node, ports) is not None:
                mask[node] = False
        return mask

    def apply(self, node: int, ports: tuple[HostPort, ...], sign: int) -> None:
        """Take (``sign`` -1) or give back (+1) ``ports`` on ``node``."""
        used = self.by_node[node]
        for port in ports:
            ips = used.setdefault((port.protocol, port.port), Counter())
            ips[port.host_ip] -= sign
            if ips[port.host_ip] <= 0:
                del ips[port.host_ip]
                if not ips:
                    del used[port.protocol, port.port]
        if used:
            self.busy.add(node)
        else:
            self.busy.discard(node)


def asks_at_least(pod: PodSpec, other: PodSpec) -> bool:
    """Whether ``pod`` asks for every extra resource and host port ``other`` does, no less.

    Backfill's "a larger pod cannot fit where a smaller one failed" needs it: a pod asking
    for less of CPU and GPUs but for a port ``other`` did not can still fail elsewhere.
    """
    if other.extra_resources:
        mine = dict(pod.extra_resources)
        if any(mine.get(name, 0) < amount for name, amount in other.extra_resources):
            return False
    return set(other.host_ports) <= set(pod.host_ports)
