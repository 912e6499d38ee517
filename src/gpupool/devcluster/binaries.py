"""Where the control-plane binaries are.

``make test`` and ``make dev-cluster`` build them with ``scripts/build-control-plane.sh`` into a
cache outside the repository and export the folder as ``GPUPOOL_CONTROLPLANE_BIN``. The envtest
convention ``KUBEBUILDER_ASSETS`` (a folder with ``etcd`` and ``kube-apiserver``) is honoured as
well, so a folder prepared for controller-runtime's envtest works too. Without either variable,
the newest complete build in the script's cache folder is used, so one ``make control-plane`` is
enough for ``gpupool dev-cluster up``.
"""

from __future__ import annotations

import os
from pathlib import Path

REQUIRED = ("etcd", "kube-apiserver")
OPTIONAL = ("kwok", "kube-scheduler")


class MissingBinariesError(RuntimeError):
    """The control-plane binaries were not found; the message says how to build them."""


def find_binaries() -> Path:
    """The folder holding etcd and kube-apiserver (and, when built, kwok and kube-scheduler).

    Raises:
        MissingBinariesError: Neither variable names a folder with the required binaries.
    """
    for variable in ("GPUPOOL_CONTROLPLANE_BIN", "KUBEBUILDER_ASSETS"):
        value = os.environ.get(variable)
        if not value:
            continue
        folder = Path(value)
        missing = [name for name in REQUIRED if not os.access(folder / name, os.X_OK)]
        if missing:
            raise MissingBinariesError(f"${variable}={value} lacks {', '.join(missing)}")
        return folder
    cache = Path(
        os.environ.get("GPUPOOL_CACHE_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpupool"
    )
    built = [
        folder
        for folder in (cache / "controlplane").glob("*/bin")
        if all(os.access(folder / name, os.X_OK) for name in REQUIRED)
    ]
    if built:
        return max(built, key=lambda folder: folder.stat().st_mtime)
    raise MissingBinariesError(
        "no control-plane binaries: run `scripts/build-control-plane.sh` (needs Go >= 1.26) and "
        "export GPUPOOL_CONTROLPLANE_BIN=<the folder it prints>; `make test` does both"
    )


def require(folder: Path, name: str) -> Path:
    """The path of one binary in ``folder``, or a clear error when it was not built."""
    path = folder / name
    if not os.access(path, os.X_OK):
        raise MissingBinariesError(f"{path} is missing; run scripts/build-control-plane.sh")
    return path
