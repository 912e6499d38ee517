"""A detached view is a copy: later binds and releases on the live snapshot do not reach it."""

from __future__ import annotations

import numpy as np

from gpupool.api import view
from gpupool.api.example import example_view
from gpupool.core.model import PodSpec


def test_copy_shares_nothing_that_bind_or_release_change() -> None:
    source = example_view()
    original = source.snapshot()
    assert original is not None
    clone = original.copy()
    shared = {
        name: value.copy()
        for name, value in vars(original).items()
        if isinstance(value, np.ndarray) and value is getattr(clone, name)
    }
    assert "gpu_free" not in shared
    original.bind(PodSpec("x/y", 1, 1, 1, 1, 1), 2, (1,))  # a bind writes none of the shared
    for name, before in shared.items():
        assert (getattr(original, name) == before).all(), name
    assert (clone.gpu_free != original.gpu_free).any()
    fixed = {"_model_masks", "node_index", "refused"}  # per snapshot: its inventory never changes
    for name, value in vars(original).items():
        if isinstance(value, (dict, list, set)) and name not in fixed:
            assert value is not getattr(clone, name), name


def test_detached_view_keeps_its_moment() -> None:
    source = example_view()
    frozen = source.detached()
    before = view.nodes(frozen)
    snapshot = source.snapshot()
    assert snapshot is not None
    snapshot.bind(PodSpec("late/pod", 1000, 1000, 1, 1000), snapshot.node_index["t4-1"], (1,))
    snapshot.release("nlp/serve-0")
    assert view.nodes(frozen) == before
    assert view.cluster(frozen).allocated_pods == view.cluster(source).allocated_pods
    after = view.nodes(source.detached())
    assert after != before
    assert [s.pod for s in after[2].gpus[1].shares] == ["late/pod"]
    assert view.pending(frozen) == view.pending(source)
    assert frozen.detached() is frozen
