"""What evaluating a claim's CEL selectors on every ResourceSlice device costs.

Builds the slices the agent publishes for ``--nodes`` fake 8-GPU nodes (H100 and A100 with MIG,
alternating), then for a share request of ``gpu-share.gpupool.io`` with a request selector
measures, ``--repeats`` times each: compiling a new expression (a cache miss), the eligibility of
one pod with a cold device cache (CEL inputs built from the slices, every selector evaluated)
and with a warm one (a later pod with the same selectors while the slices do not change: the
verdicts are cached). Prints medians and writes them
with the commit, dirty flag and machine to ``--json``.

    .venv/bin/python bench/dra_selectors.py --nodes 250 --json out/bench/dra_selectors.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import msgspec

from gpupool.agent.dra.slice import slice_devices, slice_object
from gpupool.agent.fakenvml import preset_devices
from gpupool.kube.install.device_classes import device_class_manifests
from gpupool.kube.objects.dra.cel import COMPILER
from gpupool.kube.objects.dra.claim_devices import translate_pod_claims
from gpupool.kube.objects.dra.device_cache import DeviceCache
from gpupool.kube.objects.dra.records import DeviceClass, ResourceClaim, ResourceSlice
from gpupool.kube.objects.records import PodRecord
from gpupool.sim.provenance import provenance

SELECTOR = 'device.attributes["gpu.gpupool.io"].model == "H100" && {extra}'


def _decode(body: Any, kind: type[Any]) -> Any:
    return msgspec.json.decode(msgspec.json.encode(body), type=kind)


def _slices(nodes: int) -> list[ResourceSlice]:
    slices = []
    for i in range(nodes):
        name = f"node-{i}"
        preset = "h100" if i % 2 == 0 else "a100-mig"
        body = slice_object(name, f"uid-{i}", slice_devices(preset_devices(preset, name)), 1)
        body["metadata"]["uid"] = f"slice-{i}"
        slices.append(_decode(body, ResourceSlice))
    return slices


def _pod_and_claim(extra: str) -> tuple[PodRecord, ResourceClaim]:
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "gpu-share.gpupool.io",
            "capacity": {"requests": {"memory": "10Gi", "compute": "200m"}},
            "selectors": [{"cel": {"expression": SELECTOR.format(extra=extra)}}],
        },
    }
    claim = {
        "metadata": {"name": "c", "namespace": "b", "uid": "u"},
        "spec": {"devices": {"requests": [request]}},
    }
    pod = {
        "metadata": {"name": "p", "namespace": "b", "uid": "pu"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}], "containers": []},
    }
    return _decode(pod, PodRecord), _decode(claim, ResourceClaim)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    slices = _slices(args.nodes)
    devices = sum(len(s.spec.devices) for s in slices)
    classes = {c["metadata"]["name"]: _decode(c, DeviceClass) for c in device_class_manifests()}
    COMPILER.compile("true")  # load the CEL runtime outside the measurements
    timings: dict[str, list[float]] = {"compile": [], "cold": [], "warm": []}
    eligible = 0
    for repeat in range(args.repeats):
        extra = f'device.attributes["gpu.gpupool.io"].index >= {repeat % 8}'
        started = time.perf_counter()
        COMPILER.compile(SELECTOR.format(extra=extra))
        timings["compile"].append(time.perf_counter() - started)
        pod, claim = _pod_and_claim(extra)
        cache = DeviceCache()

        def claims(namespace: str, name: str, found: ResourceClaim = claim) -> ResourceClaim:
            return found

        for key in ("cold", "warm"):
            started = time.perf_counter()
            result = translate_pod_claims(
                pod, claims, lambda ns, n: None, classes.get, slices, cache
            )
            timings[key].append(time.perf_counter() - started)
        assert result is not None
        eligible = sum(len(names) for names in result.eligible.by_node.values())
    medians = {key: statistics.median(values) for key, values in timings.items()}
    print(
        f"{args.nodes} nodes, {devices} devices ({eligible} eligible in the last run): "
        f"compile {medians['compile'] * 1e3:.2f} ms, one pod cold {medians['cold'] * 1e3:.1f} ms, "
        f"warm {medians['warm'] * 1e3:.1f} ms "
        f"({medians['warm'] / devices * 1e6:.1f} us per device, both selectors)",
        flush=True,
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "nodes": args.nodes,
            "devices": devices,
            "repeats": args.repeats,
            "seconds": timings,
            "median_seconds": medians,
            **provenance(),
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
