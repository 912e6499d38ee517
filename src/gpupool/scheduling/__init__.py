"""Scheduling execution: the policy engine and the placement policies on top of the pure core.

The engine (:mod:`gpupool.scheduling.engine`) runs one cycle over the pending pods: its data
types are :mod:`~gpupool.scheduling.decisions`, its algorithm :mod:`~gpupool.scheduling.cycle`
with :mod:`~gpupool.scheduling.victims` (preemption within a cycle, by the rules of
:mod:`~gpupool.scheduling.preemption`), :mod:`~gpupool.scheduling.backfill` and
:mod:`~gpupool.scheduling.ordering`; :mod:`~gpupool.scheduling.candidates` gives ``explain``
the nodes a pod could ever be placed on.

Each placement policy is a small class with the :class:`gpupool.core.framework.PlacementPolicy`
shape: ``score`` returns one array over nodes and ``select_gpus`` picks GPUs inside the chosen
node. :mod:`gpupool.scheduling.registry` maps the names the CLI accepts to constructors.
"""
