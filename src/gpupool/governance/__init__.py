"""Runtime governance, the pure part: what an allocation costs and how usage adds up.

Everything here works from plain values (times in seconds, units, GiB) so that the simulator,
the live controllers and the cost report compute the same numbers the same way; the clock,
the database and the cluster stay outside (``gpupool.store``, ``gpupool.kube``).
"""
