"""Resource access, what Kubernetes objects mean to gpupool: records, names, requests, records.

No I/O and no client: the scheduler, the agent, the webhook, governance and the tests all read
objects through these, so a pod's request or a node's GPUs are read one way everywhere.
"""
