"""The simulated cluster: trace readers, the published replay protocol and per-event metrics.

The simulator drives the same :class:`gpupool.core.framework.Scheduler` the live cluster uses; it
only replaces the Kubernetes API with a :class:`gpupool.core.snapshot.ClusterSnapshot` that it
mutates itself.
"""
