"""Which code and which machine produced a benchmark number: every report carries this block.

A number without its source cannot be compared with the next one: the review of the live
benchmark found a stored JSON measured on code older than the docs claimed, and memory JSONs
that named no version at all. So every benchmark writer takes its ``source`` (git commit and
whether the working tree had uncommitted changes) from here, and the control-plane benchmarks
add the ``--version`` of each binary; one function, so no script can forget a field or spell it
differently.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from gpupool.sim.machine import machine_description

CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kwok")


def _git(*args: str) -> str | None:
    """Output of ``git <args>`` run in this package's folder, or None when git cannot answer."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def source_state() -> dict[str, Any]:
    """``{"commit": ..., "dirty": ...}`` of the checkout this gpupool runs from.

    ``dirty`` is true when any tracked or untracked, not ignored file differs from the commit
    (so the number may not be reproducible from the commit alone). Both are None when gpupool
    is not running from a git checkout (an installed wheel).
    """
    head = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain")
    if head is None or status is None:
        return {"commit": None, "dirty": None}
    return {"commit": head.strip(), "dirty": bool(status.strip())}


def binary_versions(bin_dir: Path) -> dict[str, str]:
    """``--version`` of each control-plane binary in ``bin_dir`` ("unknown" if it cannot say)."""
    versions: dict[str, str] = {}
    for name in CONTROL_PLANE_BINARIES:
        try:
            done = subprocess.run(
                [str(bin_dir / name), "--version"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
            versions[name] = (done.stdout or done.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            versions[name] = "unknown"
    return versions


def provenance(bin_dir: Path | None = None) -> dict[str, Any]:
    """The block every benchmark JSON carries: ``source`` and ``machine``.

    Benchmarks on a control plane pass ``bin_dir`` and get ``binaries`` (each one's version).
    """
    block: dict[str, Any] = {"source": source_state(), "machine": machine_description()}
    if bin_dir is not None:
        block["binaries"] = binary_versions(bin_dir)
    return block
