"""The pure core: resource model, cluster snapshot, decisions and the scheduling framework.

Nothing in this package performs I/O, reads the wall clock or imports a Kubernetes, gRPC, NVML,
web or database library; an import-linter contract in pyproject.toml and a unit test keep it so.
The simulator and the live cluster both drive the same functions.
"""
