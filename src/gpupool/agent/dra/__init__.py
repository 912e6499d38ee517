"""The agent as a DRA kubelet plugin: the node's GPUs as a ResourceSlice, claims prepared.

Registration and the ``DRAPlugin`` gRPC service (:mod:`.plugin`), the node's ResourceSlice
(:mod:`.slice`), what a claim's allocation grants its containers, checked against the
scheduler's signed record (:mod:`.grants`), and the CDI specs of prepared claims
(:mod:`.prepare`).
"""
