"""The face shows a claim's GPUs as the GPUs of the pod charged for them, in that pod's team.

A claim holds its GPUs under ``claim:<uid>``, which names no pod; read as a pod name, the face
counted a claim pod's GPUs to a team "unknown", as one more pod, and its own team held nothing.
"""

from __future__ import annotations

from gpupool.api import view
from gpupool.api.sources import LiveView
from gpupool.kube.scheduler.read_view import SchedulerReader

from ..builders import pod_dict
from ..claim_server import ClaimServer, add_pods, claim_pod_json, live_scheduler, run_cycles
from ..dra_builders import request_json


async def test_claims_gpus_are_shown_as_their_pods_and_counted_to_their_team() -> None:
    server = ClaimServer()
    server.add_claim("two", request_json("gpu.gpupool.io", count=2))
    server.add_claim("shared", request_json("gpu.gpupool.io", count=1))
    pods = {
        "trainer": claim_pod_json("trainer", "two"),
        "a": claim_pod_json("a", "shared"),
        "b": claim_pod_json("b", "shared"),
    }
    scheduler = await live_scheduler(server)
    add_pods(scheduler, pods)
    await run_cycles(scheduler, server, pods)
    pods["plugin"] = pod_dict("plugin", namespace="team", gpus=1, created="2026-01-01T00:00:01Z")
    add_pods(scheduler, {"plugin": pods["plugin"]})
    await run_cycles(scheduler, server, pods)
    assert set(server.bindings) == set(pods)

    frozen = LiveView(SchedulerReader(scheduler)).detached()
    shares = [share for node in view.nodes(frozen) for gpu in node.gpus for share in gpu.shares]
    by_claim = sorted((s.claim, s.pod) for s in shares if s.claim)
    # the shared claim is shown once, as the pod its queue is charged through
    payer = next(c["name"] for c in server.claims["shared"]["status"]["reservedFor"])
    assert by_claim == [("team/shared", f"team/{payer}")] + [("team/two", "team/trainer")] * 2
    (plugin,) = [s for s in shares if s.claim is None]
    assert {s.team for s in shares} == {plugin.team}

    (team,) = view.teams(frozen)  # no team "unknown"
    assert team.name == plugin.team
    assert team.used_units == 4.0  # 2 + 1 claimed, 1 by the extended resource
    assert team.pods == 4  # each pod once, the claims not as pods of their own
    await scheduler.api.close()
