"""The node agent: one per GPU node, between the kubelet and the GPUs.

It sees the GPUs through NVML (:mod:`.nvml`, or :mod:`.fakenvml` without a GPU), publishes them to
the Node (:mod:`.inventory`), serves the kubelet's device-plugin API over gRPC (:mod:`.plugin`,
:mod:`.registration`), hands every container exactly the GPUs and caps of its own pod's
allocation record (:mod:`.handoff`, :mod:`.grants`, :mod:`.isolation`, :mod:`.cdi`) and reports
per-pod usage (:mod:`.telemetry`). :mod:`.service` wires them; ``gpupool agent`` runs it.

gRPC, protobuf, NVML and prometheus-client are the ``agent`` extra; nothing here is imported by
the scheduler.
"""
