"""The simulators: the placement replay, the dynamic simulation and the demo, one sub-package each.

What they share sits here: the simulated cluster under the policy engine (:mod:`.cluster`),
consolidation and governance applied to simulated pods (:mod:`.consolidating`,
:mod:`.governing`), the trace readers (:mod:`.trace`), the pools-and-queues file reader
(:mod:`.policy_file`) and the provenance every report carries (:mod:`.machine`,
:mod:`.provenance`).

The simulator drives the same :class:`gpupool.core.framework.Scheduler` the live cluster uses; it
only replaces the Kubernetes API with a :class:`gpupool.core.snapshot.ClusterSnapshot` that it
mutates itself.
"""
