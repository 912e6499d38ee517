"""Consolidation's inputs after an engine cycle, built one way for the simulator and the live loop.

Both drivers hold the cycle's request and result when consolidation runs; building
:class:`~gpupool.governance.consolidation.Inputs` here from them, rather than at each call site,
keeps the simulator predicting what the live controller does: which pods count as waiting on
fragments (those the cycle left waiting for resources, not nominated), which nodes they may use
(their pool's, less those nominated to others), which nodes moved pods may not count on
(nominated or reserved for blocked pods), and when running pods are expected to end (as the
cycle's reservations expect it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gpupool.core.filtering import mask_of
from gpupool.core.snapshot import BoolArray
from gpupool.governance.consolidation import Inputs, Stuck
from gpupool.policy.spec import ConsolidationSpec
from gpupool.scheduling.decisions import CycleRequest, CycleResult, Wait
from gpupool.scheduling.engine import PolicyEngine
from gpupool.scheduling.runtime import expected_ends
from gpupool.scheduling.wait_cause import WaitKind


def pool_settings(engine: PolicyEngine) -> list[ConsolidationSpec]:
    """Per pool index, its ``spec.consolidation``."""
    return [pool.consolidation for pool in engine.policy.layout.pools]


def inputs_after(
    engine: PolicyEngine,
    request: CycleRequest,
    result: CycleResult,
    owners: Mapping[str, str],
    settings: Sequence[ConsolidationSpec] | None = None,
) -> Inputs:
    """The rule's inputs once ``result`` is carried out.

    Args:
        engine: The engine that ran the cycle (its pools, queues and options).
        request: The cycle's request (its snapshot and running pods as they are now).
        result: What it decided.
        owners: Running pod name to its workload key, for pods a controller creates again.
        settings: Per pool, consolidation settings (``None``: the pools' own).
    """
    snapshot, tables = request.snapshot, engine.policy.tables
    size = snapshot.size
    nominated = np.zeros(size, dtype=np.bool_)
    nominated[list(result.nominations.values())] = True
    reserved = np.zeros(size, dtype=np.bool_)
    reserved[[r.node for held in result.reservations.values() for r in held]] = True
    pool_nodes = [
        mask_of(size, engine.pool_checks(pool)) for pool in range(len(engine.policy.layout.pools))
    ]
    queue_names = [queue.name for queue in tables.queues]
    stuck: list[Stuck] = []
    for decision in result.decisions:
        if not isinstance(decision, Wait) or decision.cause.kind is not WaitKind.RESOURCES:
            continue
        if decision.workload.name in result.nominations:
            continue
        routes = engine.route(decision.workload, queue_names[decision.queue])
        if isinstance(routes, str):
            continue
        since = decision.workload.created_at
        stuck.extend(
            Stuck(decision.workload, pool, _open(pool_nodes[pool], nominated), since)
            for pool in routes
        )
    runtimes = request.runtimes or engine.default_runtimes
    by_age = engine.options.remaining_by_age
    return Inputs(
        snapshot=snapshot,
        stuck=stuck,
        running=request.running,
        owners=owners,
        pool_nodes=pool_nodes,
        settings=list(settings) if settings is not None else pool_settings(engine),
        expected_ends=lambda: expected_ends(
            request.running, request.now, runtimes, queue_names, by_age
        ),
        now=request.now,
        kept_off=nominated | reserved,
        reserved={r.node: r.pod for held in result.reservations.values() for r in held},
        min_runtime=[float(seconds) for seconds in tables.min_runtime],
        disruption=request.disruption,
    )


def _open(pool: BoolArray, nominated: BoolArray) -> BoolArray:
    return pool & ~nominated
