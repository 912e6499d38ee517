"""A real local Kubernetes control plane for tests and for people.

etcd, kube-apiserver, and optionally kwok (fake nodes and pod lifecycles) and kube-scheduler, all
built from Go modules by ``scripts/build-control-plane.sh`` and started here on free loopback
ports with freshly generated certificates. The pytest fixtures and ``gpupool dev-cluster up`` use
the same code, so what the tests exercise is what a user can try by hand.
"""
