"""Hypothesis strategies for pods as a tenant might write them, valid and malformed.

Quantities range over what Kubernetes accepts and what it does not (fractions, negatives, huge
exponents, garbage, very long strings, wrong JSON types); resource names over gpupool's own,
unknown ``gpupool.io/`` names, known and unknown MIG profiles and foreign resources; containers
and init containers vary in number, with share and MIG requests mixed at random.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from gpupool.webhook.facts import ClusterFacts

from .helpers import FACTS

Json = dict[str, Any]

RARE = st.sampled_from([False] * 25 + [True])
"""True about once in 26 draws (hypothesis favours small integers, so ``integers() == 0`` is not
rare at all)."""

NAMES = st.sampled_from(
    [
        "gpupool.io/gpu",
        "gpupool.io/gpu-memory",
        "gpupool.io/gpu-cores",
        "gpupool.io/mig-1g.10gb",
        "gpupool.io/mig-3g.40gb",
        "gpupool.io/mig-7g.80gb",
        "gpupool.io/gpu-count",
        "gpupool.io/",
        "cpu",
        "memory",
        "nvidia.com/gpu",
        "ephemeral-storage",
    ]
) | st.text(min_size=1, max_size=20).map(lambda t: "gpupool.io/" + t)

QUANTITIES = st.one_of(
    st.integers(-3, 120).map(str),
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(
        [
            "0",
            "1",
            "2",
            "8",
            "50",
            "100",
            "101",
            "81559",
            "90000",
            "500m",
            "1.5",
            "0.5",
            "-0",
            "1Gi",
            "64Mi",
            "1e3",
            "1E2",
            "1e-3",
            "1e31",
            "1e999999999",
            "+1",
            ".5",
            "1.",
            "",
            " 1",
            "one",
            "1Ki",
            "1Xi",
            "\u0661",
            "\u00bd",
            "1" * 80,
            "9" * 64,
        ]
    ),
    st.fractions(max_denominator=7).map(lambda f: f"{float(f):g}"),
    st.text(max_size=12),
)
AMOUNTS = QUANTITIES | st.sampled_from([1, -1, 2.5, None, True, [], {}])
WELL_FORMED = st.one_of(
    st.fixed_dictionaries(
        {"gpupool.io/gpu": st.integers(1, 4).map(str)},
        optional={
            "gpupool.io/gpu-memory": st.integers(1, 81559).map(str),
            "gpupool.io/gpu-cores": st.integers(1, 100).map(str),
            "cpu": st.sampled_from(["500m", "2"]),
        },
    ),
    st.sampled_from(["1g.10gb", "3g.40gb"]).map(lambda p: {f"gpupool.io/mig-{p}": "1"}),
)
"""A request the webhook should admit on its own (the pod as a whole may still be refused)."""
RESOURCE_MAP = WELL_FORMED | st.dictionaries(NAMES, AMOUNTS, max_size=4)


@st.composite
def containers(draw: st.DrawFn, max_size: int) -> list[Any]:
    result: list[Any] = []
    for index in range(draw(st.integers(0, max_size))):
        resources: Json = {}
        if draw(st.booleans()):
            resources["limits"] = draw(WELL_FORMED)
        else:
            for source in ("limits", "requests"):
                if draw(st.booleans()):
                    resources[source] = draw(RESOURCE_MAP | st.sampled_from([None, "x", []]))
        container: Any = {"name": f"c{index}", "image": "cuda", "resources": resources}
        if draw(RARE):
            container = draw(st.sampled_from([None, "x", 1, {"resources": "none"}]))
        result.append(container)
    return result


LABELS = st.dictionaries(
    st.sampled_from(["gpupool.io/queue", "gpupool.io/class", "app"]),
    st.sampled_from(["research", "prod", "closed", "nope", "", "training"]),
    max_size=3,
)
ANNOTATIONS = st.dictionaries(
    st.sampled_from(["note"] * 4 + ["gpupool.io/gpu-model"] * 3 + ["gpupool.io/allocation"]),
    st.sampled_from(["H100", "A100|H100", "B200", " | ", "", '{"node":"n"}']),
    max_size=2,
)


@st.composite
def pods(draw: st.DrawFn) -> Json:
    """One pod, more often well formed than not."""
    metadata: Json = {"generateName": "p-"}
    for key, values in (("labels", LABELS), ("annotations", ANNOTATIONS)):
        if draw(st.booleans()):
            metadata[key] = draw(values)
    spec: Json = {"containers": draw(containers(3))}
    if draw(st.booleans()):
        spec["initContainers"] = draw(containers(2))
    if draw(RARE):
        spec["overhead"] = draw(RESOURCE_MAP)
    scheduler = draw(
        st.sampled_from(
            [None, "default-scheduler", "gpupool", None, "default-scheduler", "volcano", "", 7]
        )
    )
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    obj: Json = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if draw(RARE):
        obj[draw(st.sampled_from(["metadata", "spec"]))] = draw(st.sampled_from([None, [], "x"]))
    return obj


NAMESPACES = st.sampled_from(["team-a", "team-b", "shared", "team-c", "elsewhere", ""])
FACTS_CHOICES = st.sampled_from([FACTS, None, ClusterFacts()])


@st.composite
def old_pods(draw: st.DrawFn) -> Json | None:
    """The pod before an update: an update is judged on its metadata only."""
    metadata: Any = {}
    for key, values in (("labels", LABELS), ("annotations", ANNOTATIONS)):
        if draw(st.booleans()):
            metadata[key] = draw(values)
    if draw(RARE):
        metadata = draw(st.sampled_from([None, "x", {"labels": None}]))
    return draw(st.sampled_from([None, {"metadata": metadata, "spec": {}}]))
