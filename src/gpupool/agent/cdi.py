"""CDI spec files: how a container's edits reach the runtime *after* the agent knows the pod.

The kubelet takes a container's environment, mounts and device nodes from the device plugin's
``Allocate`` answer, which is given before anyone knows which pod the devices are for. gpupool's
answer contains no GPU at all, only a CDI device name ``gpupool.io/container=<token>`` with a
fresh token. The container runtime (containerd >= 1.7, CRI-O) resolves that name from the spec
files in ``/var/run/cdi`` when it *creates* the container, which the kubelet does only after
``PreStartContainer`` returned: that is where the agent, knowing the pod, writes the spec. If it
refuses, no spec exists, and the runtime fails the container instead of starting it without
caps or with someone else's GPU.

Files are written atomically (temporary file + rename) so a runtime never reads half a spec.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from gpupool.agent.isolation import ContainerEdits

CDI_VERSION = "0.6.0"
CDI_KIND = "gpupool.io/container"
FILE_PREFIX = "gpupool.io-container-"


def device_name(token: str) -> str:
    """The fully qualified CDI device name of a hand-off token."""
    return f"{CDI_KIND}={token}"


def spec_path(cdi_dir: Path, token: str) -> Path:
    """Where the spec of ``token`` lives."""
    return cdi_dir / f"{FILE_PREFIX}{token}.json"


def spec(token: str, edits: ContainerEdits) -> dict[str, object]:
    """The CDI spec with one device named ``token`` carrying ``edits``."""
    container_edits: dict[str, object] = {
        "env": [f"{key}={value}" for key, value in sorted(edits.env.items())],
        "deviceNodes": [{"path": path} for path in edits.device_nodes],
    }
    if edits.mounts:
        container_edits["mounts"] = [
            {
                "hostPath": mount.host_path,
                "containerPath": mount.container_path,
                "options": ["rbind", "ro" if mount.read_only else "rw"],
            }
            for mount in edits.mounts
        ]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [{"name": token, "containerEdits": container_edits}],
    }


def write_spec(cdi_dir: Path, token: str, edits: ContainerEdits) -> Path:
    """Write (atomically) the spec of ``token``."""
    cdi_dir.mkdir(parents=True, exist_ok=True)
    target = spec_path(cdi_dir, token)
    handle, temporary = tempfile.mkstemp(dir=cdi_dir, prefix=".tmp-", suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump(spec(token, edits), out, indent=1)
    os.replace(temporary, target)
    return target


def remove_spec(cdi_dir: Path, token: str) -> None:
    """Delete the spec of ``token`` if it exists."""
    spec_path(cdi_dir, token).unlink(missing_ok=True)


def spec_tokens(cdi_dir: Path) -> set[str]:
    """Tokens of every gpupool spec on disk."""
    if not cdi_dir.is_dir():
        return set()
    return {
        path.name.removeprefix(FILE_PREFIX).removesuffix(".json")
        for path in cdi_dir.glob(f"{FILE_PREFIX}*.json")
    }
