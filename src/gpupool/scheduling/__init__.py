"""Scheduling execution: placement policies on top of the pure core.

Each policy is a small class with the :class:`gpupool.core.framework.PlacementPolicy` shape:
``score`` returns one array over nodes and ``select_gpus`` picks GPUs inside the chosen node.
:mod:`gpupool.scheduling.registry` maps the names the CLI accepts to constructors.
"""
