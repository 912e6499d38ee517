"""One compiled policy: the pools of a node inventory and the queues against them.

Built once per inventory and configuration (not per pod): node membership, pool capacities and
the queue tables are arrays, so per-pod rules are lookups. The live scheduler rebuilds it when
nodes or the GPUPool/GPUQueue objects change; the simulator builds it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.policy.pools import PoolLayout
from gpupool.policy.quota import Ledger, QueueTables
from gpupool.policy.spec import PolicyConfig
from gpupool.policy.units import milli_units


@dataclass(frozen=True, slots=True)
class ClusterPolicy:
    """Pools and queues compiled for one node inventory.

    Attributes:
        config: The pools and queues as configured.
        layout: Node membership, capacities, routing.
        tables: Queue priorities, weights, guarantees, ceilings, limits.
    """

    config: PolicyConfig
    layout: PoolLayout
    tables: QueueTables

    @classmethod
    def build(cls, config: PolicyConfig, nodes: Sequence[NodeSpec]) -> ClusterPolicy:
        """Compile ``config`` for ``nodes``."""
        layout = PoolLayout.build(config.pools, nodes, config.default_pool())
        return cls(config=config, layout=layout, tables=QueueTables.build(config.queues, layout))

    def new_ledger(self) -> Ledger:
        """An empty ledger shaped for these queues and pools."""
        return Ledger(len(self.tables.queues), len(self.layout.pools))

    def prepare(self, snapshot: ClusterSnapshot) -> None:
        """Set the Shared pools' GPU sharing limits on a fresh snapshot of the same nodes."""
        self.layout.apply_sharing(snapshot)

    def pending_units(self, pod: PodSpec, pool: int) -> int:
        """Milli-units a pod will at most be charged in ``pool`` (before its node is known)."""
        return milli_units(pod, int(self.layout.reference_memory[pool]))
