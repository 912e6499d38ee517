"""gpupool: shared GPUs for Kubernetes that are schedulable, isolated, reclaimable and governable.

The package is layered (see docs/architecture.md):

* ``gpupool.core``: the resource model (nodes, GPUs, requests), the cluster snapshot kept as numpy
  arrays, the decision types and the kube-scheduler style framework. Pure: no I/O, no clock.
* ``gpupool.scheduling``: placement policies (filter masks and score arrays) built on the core.
* ``gpupool.sim``: trace readers, the published replay protocol and the simulated cluster.
* ``gpupool.bench``: benchmark drivers that run the simulator over seeds and write reports.
* ``gpupool.cli``: the ``gpupool`` command.
"""

__version__ = "0.1.0"
