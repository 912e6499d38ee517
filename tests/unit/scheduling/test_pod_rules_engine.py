"""The engine with pod-relative rules: a pod kept out by its neighbours speaks for no other pod."""

from __future__ import annotations

from dataclasses import replace

from gpupool.core.pod_affinity import REASON_EXISTING_ANTI_AFFINITY
from gpupool.core.pod_terms import AffinityTerm, LabelSelector, PodTerms
from gpupool.policy.spec import PolicyConfig, PoolMode, PoolSpec
from gpupool.scheduling.decisions import Admit, Wait

from ..policy.builders import Cluster, node, queue, whole, work

HOST = "kubernetes.io/hostname"


def test_a_pod_refused_by_anti_affinity_does_not_make_the_engine_skip_its_shape() -> None:
    """web-1 is kept off the only node by a running pod's anti-affinity; api, of the same size
    but another app, must still be tried in the same cycle (and fits)."""
    hosted = replace(node("n0"), labels=((HOST, "n0"),))
    cluster = Cluster(
        [hosted], PolicyConfig((PoolSpec("p", PoolMode.EXCLUSIVE),), (queue("q", "p"),))
    )
    forbid_web = PodTerms(
        anti_affinity=(AffinityTerm(HOST, LabelSelector((("app", "web"),)), None),)
    )
    guard = replace(whole("guard"), labels=(("app", "db"),), terms=forbid_web)
    (admitted,) = cluster.run([work(guard, "q")]).decisions
    assert isinstance(admitted, Admit)
    web = replace(whole("web-1"), labels=(("app", "web"),))
    api = replace(whole("api-1"), labels=(("app", "api"),))
    web_decision, api_decision = cluster.cycle(
        [work(web, "q", created_at=1.0), work(api, "q", created_at=2.0)]
    ).decisions
    assert isinstance(web_decision, Wait)
    assert web_decision.reject is not None
    assert dict(web_decision.reject.reasons) == {REASON_EXISTING_ANTI_AFFINITY: 1}
    assert isinstance(api_decision, Admit), api_decision
