"""Dynamic Resource Allocation as objects: gpupool's GPUs as devices, claims, selectors, records.

The names and slim records of DeviceClasses, ResourceSlices and ResourceClaims
(:mod:`.records`), a pod's claims read as one GPU request (:mod:`.claims`), which slice devices
a request may use (:mod:`.claim_devices`, with CEL selectors evaluated as Kubernetes evaluates
them in :mod:`.cel` and :mod:`.cel_values`, their verdicts kept in :mod:`.device_cache`), and the
scheduler's signed word on a claim's allocation (:mod:`.claim_record`). No I/O: the scheduler,
the agent and the webhook read claims through these.
"""
