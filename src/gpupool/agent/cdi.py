"""CDI spec files: how a container's edits reach the runtime *after* the agent knows the pod.

The kubelet takes a container's environment, mounts and device nodes from the device plugin's
``Allocate`` answer, which is given before anyone knows which pod the devices are for. gpupool's
answer contains no GPU at all, only a CDI device name ``gpupool.io/container=<token>`` with a
fresh token. The container runtime (containerd >= 1.7, CRI-O) resolves that name from the spec
files in ``/var/run/cdi`` when it *creates* the container, which the kubelet does only after
``PreStartContainer`` returned: that is where the agent, knowing the pod, writes the spec. If it
refuses, no spec exists, and the runtime fails the container instead of starting it without
caps or with someone else's GPU.

The DRA path (:mod:`gpupool.agent.dra.prepare`) writes the same edits for a prepared claim
under its own kind, ``gpupool.io/claim=<claim uid>``, so the hand-off's collection of orphaned
container specs never touches a claim's, and the other way round.

Files are written atomically (temporary file + rename) so a runtime never reads half a spec.
A container's own files (:class:`~gpupool.agent.isolation.ContainerFile`: its
``/etc/ld.so.preload``, its limits) are written first, into a folder beside its spec
(``<spec name>.d``; the CDI cache reads only ``*.json``/``*.yaml`` specs), and mounted
read-only by the spec; removing the spec removes them, so no two containers share one and none
outlives its container.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpupool.agent.isolation import ContainerEdits, Mount

CDI_VERSION = "0.6.0"


@dataclass(frozen=True, slots=True)
class CdiKind:
    """A CDI vendor/class and the prefix of its spec files."""

    kind: str
    file_prefix: str


CONTAINER = CdiKind("gpupool.io/container", "gpupool.io-container-")
"""The device-plugin path: one device per container, named by a hand-off token."""
CLAIM = CdiKind("gpupool.io/claim", "gpupool.io-claim-")
"""The DRA path: one device per prepared claim, named by the claim's uid."""
CDI_KIND = CONTAINER.kind


def device_name(token: str, kind: CdiKind = CONTAINER) -> str:
    """The fully qualified CDI device name of a token."""
    return f"{kind.kind}={token}"


def spec_path(cdi_dir: Path, token: str, kind: CdiKind = CONTAINER) -> Path:
    """Where the spec of ``token`` lives."""
    return cdi_dir / f"{kind.file_prefix}{token}.json"


def files_path(cdi_dir: Path, token: str, kind: CdiKind = CONTAINER) -> Path:
    """The folder of ``token``'s own files (beside its spec)."""
    return cdi_dir / f"{kind.file_prefix}{token}.d"


def _file_mounts(edits: ContainerEdits, folder: Path) -> list[Mount]:
    return [
        Mount(
            str(folder / file.container_path.strip("/").replace("/", "-")),
            file.container_path,
            True,
        )
        for file in edits.files
    ]


def spec(
    token: str, edits: ContainerEdits, kind: CdiKind = CONTAINER, files: Path | None = None
) -> dict[str, object]:
    """The CDI spec with one device named ``token`` carrying ``edits``.

    Args:
        token: The device's name (a hand-off token or a claim's uid).
        edits: What the container gets.
        kind: The CDI kind.
        files: Where ``edits.files`` are written (see :func:`files_path`); required if any.
    """
    container_edits: dict[str, object] = {
        "env": [f"{key}={value}" for key, value in sorted(edits.env.items())],
        "deviceNodes": [
            {"path": node.path}
            if node.host_path == node.path
            else {"path": node.path, "hostPath": node.host_path}
            for node in edits.device_nodes
        ],
    }
    if edits.files and files is None:
        raise ValueError("a spec with container files needs the folder they are written to")
    mounts = [*edits.mounts, *(_file_mounts(edits, files) if files is not None else [])]
    if mounts:
        container_edits["mounts"] = [
            {
                "hostPath": mount.host_path,
                "containerPath": mount.container_path,
                "options": ["rbind", "ro" if mount.read_only else "rw"],
            }
            for mount in mounts
        ]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind.kind,
        "devices": [{"name": token, "containerEdits": container_edits}],
    }


def write_spec(cdi_dir: Path, token: str, edits: ContainerEdits, kind: CdiKind = CONTAINER) -> Path:
    """Write (atomically) the container's files, then the spec of ``token``."""
    cdi_dir.mkdir(parents=True, exist_ok=True)
    folder = files_path(cdi_dir, token, kind)
    if edits.files:
        folder.mkdir(exist_ok=True)
        for file, mount in zip(edits.files, _file_mounts(edits, folder), strict=True):
            write_atomically(Path(mount.host_path), file.content, 0o644)
    document = spec(token, edits, kind, folder)
    target = spec_path(cdi_dir, token, kind)
    write_atomically(target, json.dumps(document, indent=1), 0o600)
    return target


def write_atomically(target: Path, text: str, mode: int) -> None:
    """Replace ``target`` by ``text`` so that no reader ever sees half of it."""
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.chmod(temporary, mode)
    os.replace(temporary, target)


def remove_spec(cdi_dir: Path, token: str, kind: CdiKind = CONTAINER) -> None:
    """Delete the spec of ``token`` and its files, if they exist."""
    spec_path(cdi_dir, token, kind).unlink(missing_ok=True)
    shutil.rmtree(files_path(cdi_dir, token, kind), ignore_errors=True)


def spec_tokens(cdi_dir: Path, kind: CdiKind = CONTAINER) -> set[str]:
    """Tokens of every spec of ``kind`` on disk."""
    if not cdi_dir.is_dir():
        return set()
    return {
        path.name.removeprefix(kind.file_prefix).removesuffix(".json")
        for path in cdi_dir.glob(f"{kind.file_prefix}*.json")
    }
