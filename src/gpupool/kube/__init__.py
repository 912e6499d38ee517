"""The Kubernetes backend: the live half of every layer, over one API client.

The pure layers (:mod:`gpupool.policy`, :mod:`gpupool.scheduling`, :mod:`gpupool.governance`,
over :mod:`gpupool.core`) decide; this package is where their decisions meet a real cluster, cut
the same way so that the tree shows the four layers in the live code too:

* :mod:`~gpupool.kube.objects`: resource access, what the objects mean (slim records, names,
  quantities, pod -> request translation, the signed allocation record); no I/O;
* :mod:`~gpupool.kube.client`: resource access, talking to the API server (HTTP port,
  informers, leader election, the signing key);
* :mod:`~gpupool.kube.policy`: policy control, GPUPool/GPUQueue objects in, compiled policy and
  status out;
* :mod:`~gpupool.kube.scheduler`: scheduling execution, the live loop, its cache and queue,
  preemption carried out, Bindings and Events;
* :mod:`~gpupool.kube.governance`: runtime governance, the controller that carries out the
  pure rules, audit and the cost ledger;
* :mod:`~gpupool.kube.install`: CRDs, RBAC and the admission policy;
* :mod:`~gpupool.kube.controlplane`: the ``gpupool control-plane`` process that runs them.

import-linter keeps this order (``pyproject.toml``): objects < client < policy < scheduler <
governance < controlplane, install beside them over client.
"""
