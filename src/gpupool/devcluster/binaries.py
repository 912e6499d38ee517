"""Where the control-plane and node binaries are.

``make test`` and ``make dev-cluster`` build them with ``scripts/build-*.sh`` into a cache
outside the repository and export each folder in a variable: ``GPUPOOL_CONTROLPLANE_BIN``
(etcd, kube-apiserver, kwok, kube-scheduler, kube-controller-manager), ``GPUPOOL_KUBELET_BIN``
(the kubelet), ``GPUPOOL_CONTAINERD_BIN`` (containerd, its runc shim, ctr, crictl, the CNI
loopback plugin), and ``GPUPOOL_HELM`` (the helm binary itself). The envtest convention
``KUBEBUILDER_ASSETS`` (a folder with ``etcd`` and ``kube-apiserver``) is honoured for the
control plane, so a folder prepared for controller-runtime's envtest works too. Without a
variable, the newest complete build in the script's cache folder is used, so one ``make
control-plane`` is enough for ``gpupool dev-cluster up``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REQUIRED = ("etcd", "kube-apiserver")
OPTIONAL = ("kwok", "kube-scheduler", "kube-controller-manager")


class MissingBinariesError(RuntimeError):
    """The binaries were not found; the message says how to build them."""


@dataclass(frozen=True, slots=True)
class BinarySet:
    """One cached build: which variables may name it, where the script caches it, what it holds.

    Attributes:
        variables: Environment variables naming the folder, first one wins.
        cache_subfolder: The script's folder under the cache (``<cache>/<sub>/*/bin``).
        required: Executables the folder must hold.
        script: The script that builds it (for the error message).
    """

    variables: tuple[str, ...]
    cache_subfolder: str
    required: tuple[str, ...]
    script: str


CONTROL_PLANE = BinarySet(
    ("GPUPOOL_CONTROLPLANE_BIN", "KUBEBUILDER_ASSETS"),
    "controlplane",
    REQUIRED,
    "scripts/build-control-plane.sh",
)
KUBELET = BinarySet(("GPUPOOL_KUBELET_BIN",), "kubelet", ("kubelet",), "scripts/build-kubelet.sh")
CONTAINERD = BinarySet(
    ("GPUPOOL_CONTAINERD_BIN",),
    "node",
    ("containerd", "containerd-shim-runc-v2", "ctr", "loopback"),
    "scripts/build-containerd.sh",
)

HELM = BinarySet(("GPUPOOL_HELM_BIN",), "helm", ("helm",), "scripts/build-helm.sh")


def cache_root() -> Path:
    """The scripts' cache (``$GPUPOOL_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpupool``)."""
    return Path(
        os.environ.get("GPUPOOL_CACHE_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpupool"
    )


def _complete(folder: Path, names: tuple[str, ...]) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in names)


def find(binaries: BinarySet) -> Path:
    """The folder holding ``binaries``: a variable's, else the newest complete cached build.

    Raises:
        MissingBinariesError: A variable names an incomplete folder, or nothing was built.
    """
    for variable in binaries.variables:
        value = os.environ.get(variable)
        if not value:
            continue
        folder = Path(value)
        missing = [name for name in binaries.required if not os.access(folder / name, os.X_OK)]
        if missing:
            raise MissingBinariesError(f"${variable}={value} lacks {', '.join(missing)}")
        return folder
    built = [
        folder
        for folder in (cache_root() / binaries.cache_subfolder).glob("*/bin")
        if _complete(folder, binaries.required)
    ]
    if built:
        return max(built, key=lambda folder: folder.stat().st_mtime)
    raise MissingBinariesError(
        f"no {', '.join(binaries.required)}: run `{binaries.script}` (needs Go >= 1.26) and "
        f"export {binaries.variables[0]}=<the folder it prints>; `make test` does both"
    )


def find_binaries() -> Path:
    """The folder holding etcd and kube-apiserver (and, when built, the optional ones).

    Raises:
        MissingBinariesError: Neither variable names a folder with the required binaries.
    """
    return find(CONTROL_PLANE)


def find_helm() -> Path:
    """The helm binary: ``$GPUPOOL_HELM`` (a file, as ``make test`` sets it), else the cache's.

    Raises:
        MissingBinariesError: Not built (the message says how to build it).
    """
    configured = os.environ.get("GPUPOOL_HELM")
    return Path(configured) if configured else find(HELM) / "helm"


def require(folder: Path, name: str, script: str = CONTROL_PLANE.script) -> Path:
    """The path of one binary in ``folder``, or a clear error naming the ``script`` to run."""
    path = folder / name
    if not os.access(path, os.X_OK):
        raise MissingBinariesError(f"{path} is missing; run {script}")
    return path
