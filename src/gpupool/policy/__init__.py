"""Policy control: pools, queues, quotas, ordering, preemption and backfill, as pure rules.

Who may enter which GPUs, how much each team may hold, who waits and who is preempted are
decided here, without placing anything: placement stays in :mod:`gpupool.core` and the
orchestration that combines both is :mod:`gpupool.scheduling.engine`. Nothing here reads a
clock (every rule takes ``now`` in seconds), performs I/O or imports Kubernetes; the simulator
and the live scheduler hand the same data in.
"""
