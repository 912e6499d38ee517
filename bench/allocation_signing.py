"""What the Ed25519 allocation signature costs the scheduler per pod.

The scheduler signs each record once when it binds the pod and verifies it when the bound pod
comes back through its watch (and again on every rebuild: a restart, a new leader); the node
agent verifies it once per container start. This signs and verifies ``--pods`` realistic records
(one to eight GPUs, the node's UUIDs, pool and queue) and reports microseconds per pod (median
of ``--repeats`` runs), for the Ed25519 scheme and, as the baseline it replaced, HMAC-SHA256 over
the same bytes, measured in ABBA order so drift on a shared machine falls on both alike. Both
the process's CPU time (what the scheduler pays; little disturbed by other processes) and wall
time are reported.

    .venv/bin/python bench/allocation_signing.py --json out/bench/allocation_signing.json
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import random
import secrets
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from gpupool.kube.objects.allocation import AllocationRecord, GpuShare
from gpupool.kube.objects.signing import RecordSigner, signed_bytes
from gpupool.sim.provenance import provenance

Sample = list[tuple[AllocationRecord, str]]


def records(count: int, seed: int) -> Sample:
    """``count`` records as the live scheduler writes them, each with its pod's uid."""
    rng = random.Random(seed)
    made = []
    for i in range(count):
        node = f"gpu-node-{rng.randrange(1000):04d}"
        gpus = rng.sample(range(8), rng.choice((1, 1, 1, 2, 4, 8)))
        share = rng.random() < 0.6 and len(gpus) == 1
        record = AllocationRecord(
            node=node,
            kind="share" if share else "whole",
            gpus=tuple(
                GpuShare(g, f"GPU-{node}-{g:02d}", 250 if share else 1000, 8192 if share else 0)
                for g in sorted(gpus)
            ),
            scheduler="gpupool-scheduler-7d9f-x2k4p",
            time="2026-12-01T12:00:00.123456Z",
            pool="a100-shared" if share else "h100-exclusive",
            queue=f"team-{i % 12}",
        )
        made.append((record, f"{rng.getrandbits(128):032x}"))
    return made


Round = tuple[Callable[[], object], Callable[[object], None]]
"""(sign every record, verify what was signed)."""


def ed25519_round(sample: Sample) -> Round:
    """Sign every record, then verify every signed one."""
    signer = RecordSigner.generate()

    def sign() -> object:
        return [(signer.sign(record, uid), uid) for record, uid in sample]

    def verify(signed: object) -> None:
        assert isinstance(signed, list)
        assert all(signer.verify(record, uid) for record, uid in signed)

    return sign, verify


def hmac_round(sample: Sample) -> Round:
    """The retired scheme over the same bytes: HMAC-SHA256, hex, compared in constant time."""
    key = secrets.token_bytes(32)

    def digest(record: AllocationRecord, uid: str) -> str:
        return hmac.new(key, signed_bytes(record, uid), hashlib.sha256).hexdigest()

    def sign() -> object:
        return [(record, uid, digest(record, uid)) for record, uid in sample]

    def verify(signed: object) -> None:
        assert isinstance(signed, list)
        assert all(hmac.compare_digest(sig, digest(record, uid)) for record, uid, sig in signed)

    return sign, verify


def timed(sign: Callable[[], object], verify: Callable[[object], None]) -> dict[str, float]:
    """Seconds of CPU and wall time to sign, and to verify."""
    cpu, wall = time.process_time(), time.perf_counter()
    signed = sign()
    cpu_mid, wall_mid = time.process_time(), time.perf_counter()
    verify(signed)
    return {
        "sign_cpu": cpu_mid - cpu,
        "verify_cpu": time.process_time() - cpu_mid,
        "sign_wall": wall_mid - wall,
        "verify_wall": time.perf_counter() - wall_mid,
    }


def measure(sample: Sample, repeats: int) -> dict[str, dict[str, float]]:
    """Median microseconds per pod for each scheme, runs in ABBA order."""
    schemes: dict[str, Callable[[Sample], Round]] = {
        "ed25519": ed25519_round,
        "hmac_sha256": hmac_round,
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in schemes}
    order = list(schemes)
    for index in range(repeats):
        for name in order if index % 2 == 0 else reversed(order):
            runs[name].append(timed(*schemes[name](sample)))
    per_pod = 1e6 / len(sample)
    result = {}
    for name, rounds in runs.items():
        numbers = {
            f"{key}_us": round(statistics.median(r[key] for r in rounds) * per_pod, 2)
            for key in rounds[0]
        }
        for clock in ("cpu", "wall"):
            both = statistics.median(r[f"sign_{clock}"] + r[f"verify_{clock}"] for r in rounds)
            numbers[f"sign_and_verify_{clock}_us"] = round(both * per_pod, 2)
        result[name] = numbers
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sample = records(args.pods, args.seed)
    results = measure(sample, args.repeats)
    for name, numbers in results.items():
        total_ms = numbers["sign_and_verify_cpu_us"] * args.pods / 1000
        print(
            f"{name:>12}: CPU sign {numbers['sign_cpu_us']} us, verify "
            f"{numbers['verify_cpu_us']} us per pod ({total_ms:.0f} ms CPU for {args.pods} "
            f"pods); wall sign {numbers['sign_wall_us']} us, verify {numbers['verify_wall_us']} us",
            flush=True,
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "pods": args.pods,
            "repeats": args.repeats,
            "order": "ABBA",
            "results": results,
            **provenance(),
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
