"""gpupool: shared GPUs for Kubernetes that are schedulable, isolated, reclaimable and governable.

The package is layered (see docs/architecture.md):

* ``gpupool.core``: the resource model (nodes, GPUs, requests), the cluster snapshot kept as numpy
  arrays, the decision types and the kube-scheduler style framework. Pure: no I/O, no clock.
* ``gpupool.policy``: pools, queues, quotas and the rules every process shares. Pure.
* ``gpupool.scheduling``: the policy engine and placement policies built on the core. Pure.
* ``gpupool.governance``: accounting and the governance rules, decisions as data. Pure.
* ``gpupool.sim``: trace readers, the published replay protocol, the simulated cluster and the
  drivers that run it over seeds (``sim.sweep``).
* ``gpupool.kube``: the live halves (objects, client, policy, scheduler, governance, install,
  control plane); ``gpupool.agent`` and ``gpupool.webhook``: the node agent and the webhook.
* ``gpupool.cli``: the ``gpupool`` command.
"""

__version__ = "0.1.0"
