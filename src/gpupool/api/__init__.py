"""gpupool's face: the REST API and the dashboard served by the control plane.

:mod:`gpupool.api.model` is what clients see (the OpenAPI schema), :mod:`gpupool.api.view`
builds it from any :class:`~gpupool.api.view.ClusterView` (a live scheduler's cache, a plain
snapshot, later the simulator), :mod:`gpupool.api.app` serves it, :mod:`gpupool.api.dashboard`
renders it as HTML and :mod:`gpupool.api.auth` decides who may read it.
"""
