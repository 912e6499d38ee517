"""The admission webhook: pods that ask for gpupool resources are routed, labelled and checked.

The API server calls it over TLS when a pod that mentions gpupool is created or updated
(:mod:`gpupool.webhook.configuration`). The mutating part sets ``schedulerName``, the queue label
from the namespace's GPUQueue and a default class; the validating part refuses every malformed GPU
request with a message that names the field and the allowed range. The decisions are a pure
function of the pod and a few cluster facts (:mod:`gpupool.webhook.admission`), so they are unit
tested and fuzzed without HTTP; the scheduler keeps its own checks: the webhook can be down,
bypassed or configured to fail open.
"""
