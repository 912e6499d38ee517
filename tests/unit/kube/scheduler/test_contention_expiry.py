"""Placement honours an agent's contention scores only while the agent keeps publishing them.

An agent that dies leaves its last ``gpupool.io/gpu-contention`` on the Node; honoured for
ever, a GPU it called contended would be refused to every pod under ``avoidAbove`` while idle.
"""

from __future__ import annotations

import json

import msgspec

from gpupool.devcluster.fakenodes import FakeGpuNode
from gpupool.kube.client.informer import ADDED, MODIFIED
from gpupool.kube.objects.records import NodeRecord
from gpupool.kube.scheduler.state import ClusterState

T0 = 1_796_551_200.0  # 2026-12-06T10:00:00Z
PERIOD = 60.0  # stale after three periods


def _node(sampled_at: str, score: float = 0.9) -> NodeRecord:
    manifest = FakeGpuNode("n", gpus=4).manifest()
    gpus = {"1": {"level": "high", "score": score}}
    signal = {"sampledAt": sampled_at, "periodSeconds": PERIOD, "gpus": gpus}
    manifest["metadata"]["annotations"]["gpupool.io/gpu-contention"] = json.dumps(signal)
    return msgspec.convert(manifest, NodeRecord)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _state(clock: Clock) -> ClusterState:
    state = ClusterState("gpupool", clock=clock)
    state.restart()
    return state


def _scores(state: ClusterState) -> tuple[float, ...]:
    assert state.snapshot is not None
    return state.snapshot.nodes[0].gpu_contention


def test_scores_count_while_fresh_and_drop_once_their_agent_went_silent() -> None:
    clock = Clock()
    state = _state(clock)
    state.on_node(ADDED, _node("2026-12-06T10:00:00Z"))
    state.sync()
    assert _scores(state) == (0.0, 0.9, 0.0, 0.0)
    assert state.wake_within(None) == 180.0  # the loop wakes when they go stale
    assert state.wake_within(5.0) == 5.0
    epoch = state.capacity_epoch
    clock.now = T0 + 179.0
    state.sync()
    assert _scores(state) == (0.0, 0.9, 0.0, 0.0)
    clock.now = T0 + 181.0
    state.sync()  # no event came: the deadline alone rebuilds the snapshot
    assert _scores(state) == ()
    assert state.capacity_epoch > epoch  # pods parked for want of room are tried again
    assert state.wake_within(None) is None


def test_the_same_scores_republished_keep_counting() -> None:
    clock = Clock()
    state = _state(clock)
    state.on_node(ADDED, _node("2026-12-06T10:00:00Z"))
    state.sync()
    for minute in range(1, 10):
        clock.now = T0 + 60.0 * minute
        state.on_node(MODIFIED, _node(f"2026-12-06T10:{minute:02d}:00Z"))
        state.sync()
        assert _scores(state) == (0.0, 0.9, 0.0, 0.0), minute
    assert state.wake_within(None) == 180.0


def test_scores_already_stale_when_first_read_are_never_honoured() -> None:
    clock = Clock()
    clock.now = T0 + 3600.0
    state = _state(clock)
    state.on_node(ADDED, _node("2026-12-06T10:00:00Z"))
    state.sync()
    assert _scores(state) == ()
    assert state.wake_within(None) is None
