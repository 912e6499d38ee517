from __future__ import annotations

import msgspec
import pytest

from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import pod_spec
from gpupool.policy.spec import QueueSpec
from gpupool.webhook.admission import (
    AdmissionConfig,
    PodReview,
    Verdict,
    class_refusal_message,
    review_pod,
    validate_only,
)
from gpupool.webhook.facts import ClusterFacts

from .helpers import FACTS, Json, apply_patch, pod

LIMIT = "spec.containers[0].resources.limits"
ALLOCATION = "gpupool.io/allocation"


def create(obj: Json, facts: ClusterFacts | None = FACTS, **config: object) -> Verdict:
    namespace = obj["metadata"]["namespace"]
    review = PodReview("CREATE", namespace, "req-1", obj)
    return review_pod(review, facts, AdmissionConfig(**config))  # type: ignore[arg-type]


def update(old: Json, new: Json, facts: ClusterFacts | None = FACTS) -> Verdict:
    review = PodReview("UPDATE", new["metadata"]["namespace"], "req-2", new, old)
    return review_pod(review, facts)


def refused(verdict: Verdict) -> tuple[str, str]:
    assert verdict.refusal is not None, verdict
    return verdict.refusal.field, verdict.refusal.message


def test_a_pod_without_gpupool_resources_is_left_alone() -> None:
    verdict = create(pod({"nvidia.com/gpu": "1"}, annotations={"x": "y"}))
    assert verdict == Verdict()


def test_a_gpu_pod_is_routed_queued_and_classed() -> None:
    obj = pod({"gpupool.io/gpu": "1", "gpupool.io/gpu-cores": "50"})
    verdict = create(obj)
    assert verdict.allowed
    mutated = apply_patch(obj, verdict.patch)
    assert mutated["spec"]["schedulerName"] == "gpupool"
    assert mutated["metadata"]["labels"] == {
        "gpupool.io/queue": "research",
        "gpupool.io/class": "default",
    }
    # the webhook and the scheduler read the mutated pod the same way
    record = PodRecord(**{})  # noqa: F841 - the decoder below is what the informer uses

    spec = pod_spec(
        msgspec.convert(mutated | {"metadata": mutated["metadata"] | {"uid": "u"}}, PodRecord)
    )
    assert (spec.gpu_count, spec.gpu_milli, spec.workload_class) == (1, 500, "default")
    # mutated, it passes the validating webhook and needs nothing more
    assert validate_only(create(mutated)) == Verdict()


def test_existing_labels_are_kept_and_added_to() -> None:
    obj = pod({"gpupool.io/gpu": "2"}, labels={"app": "x", "gpupool.io/class": "training"})
    verdict = create(obj, scheduler_name="gpupool")
    mutated = apply_patch(obj, verdict.patch)
    assert mutated["metadata"]["labels"] == {
        "app": "x",
        "gpupool.io/class": "training",
        "gpupool.io/queue": "research",
    }


def test_an_explicit_gpupool_scheduler_and_no_default_class_need_no_patch() -> None:
    obj = pod({"gpupool.io/gpu": "1"}, scheduler="gpupool", labels={"gpupool.io/queue": "research"})
    assert create(obj, default_class="") == Verdict()


def test_a_pod_naming_gpupool_without_gpu_resources_is_queued() -> None:
    obj = pod(scheduler="gpupool", namespace="team-b")
    labels = apply_patch(obj, create(obj).patch)["metadata"]["labels"]
    assert labels["gpupool.io/queue"] == "prod"


def test_a_namespace_without_queue_gets_no_queue_label() -> None:
    obj = pod({"gpupool.io/gpu": "1"}, namespace="elsewhere")
    labels = apply_patch(obj, create(obj).patch)["metadata"]["labels"]
    assert labels == {"gpupool.io/class": "default"}


@pytest.mark.parametrize(
    ("limits", "field", "expected"),
    [
        ({"gpupool.io/gpu": "1", "gpupool.io/gpu-cores": "150"}, "gpu-cores", "1..100"),
        ({"gpupool.io/gpu": "1", "gpupool.io/gpu-cores": "0"}, "gpu-cores", "1..100"),
        ({"gpupool.io/gpu": "1", "gpupool.io/gpu-cores": "50.5"}, "gpu-cores", "whole number"),
        ({"gpupool.io/gpu": "-1"}, "gpu", "in 0..8 (the most GPUs on one node), got '-1'"),
        ({"gpupool.io/gpu": "500m"}, "gpu", "whole number of GPUs"),
        ({"gpupool.io/gpu": "16"}, "gpu", "0..8"),
        ({"gpupool.io/gpu": "1e3"}, "gpu", "0..8"),
        ({"gpupool.io/gpu": "one"}, "gpu", "got 'one'"),
        ({"gpupool.io/gpu": "1e999999999"}, "gpu", "exponent within ±30"),
        ({"gpupool.io/gpu": "1" * 65}, "gpu", "at most 64 characters"),
        (
            {"gpupool.io/gpu": "1", "gpupool.io/gpu-memory": "90000"},
            "gpu-memory",
            "1..81559 (the largest GPU in the cluster)",
        ),
        ({"gpupool.io/gpu": "1", "gpupool.io/gpu-memory": "0"}, "gpu-memory", "1..81559"),
        ({"gpupool.io/mig-9g.99gb": "1"}, "mig-9g.99gb", "the nodes offer: 1g.10gb, 3g.40gb"),
        ({"gpupool.io/mig-1g.10gb": "2"}, "mig-1g.10gb", "1..1"),
        ({"gpupool.io/vram": "1"}, "vram", "allowed: gpupool.io/gpu, gpupool.io/gpu-memory"),
    ],
)
def test_a_malformed_value_is_refused_naming_its_field_and_range(
    limits: dict[str, str], field: str, expected: str
) -> None:
    where, message = refused(create(pod(limits)))
    assert where == f"{LIMIT}[gpupool.io/{field}]"
    assert expected in message


def test_a_cpu_quantity_that_would_stall_the_parser_is_refused() -> None:
    where, message = refused(create(pod({"gpupool.io/gpu": "1"}, requests={"cpu": "1e999999"})))
    assert where == "spec.containers[0].resources.requests[cpu]"
    assert "exponent" in message


def test_share_and_mig_mixed_is_refused() -> None:
    where, message = refused(create(pod({"gpupool.io/gpu": "1", "gpupool.io/mig-1g.10gb": "1"})))
    assert where == "spec.containers[].resources"
    assert "MIG slice" in message


def test_a_share_without_gpus_is_refused() -> None:
    where, message = refused(create(pod({"gpupool.io/gpu-cores": "50"})))
    assert where == f"{LIMIT}[gpupool.io/gpu-cores]"
    assert "gpupool.io/gpu >= 1" in message


def test_requests_must_equal_limits() -> None:
    obj = pod({"gpupool.io/gpu": "2"}, requests={"gpupool.io/gpu": "1"})
    where, message = refused(create(obj))
    assert where == "spec.containers[0].resources.requests[gpupool.io/gpu]"
    assert f"must equal {LIMIT}[gpupool.io/gpu]" in message


def test_sums_over_containers_are_checked_against_the_nodes() -> None:
    obj = pod({"gpupool.io/gpu": "5"})
    obj["spec"]["containers"].append(obj["spec"]["containers"][0])
    where, message = refused(create(obj))
    assert where == "spec.containers[].resources[gpupool.io/gpu]"
    assert "10 GPUs in all; allowed: 0..8" in message


def test_an_unknown_model_is_refused() -> None:
    obj = pod({"gpupool.io/gpu": "1"}, annotations={"gpupool.io/gpu-model": "H100|B200"})
    where, message = refused(create(obj))
    assert where == "metadata.annotations[gpupool.io/gpu-model]"
    assert "B200" in message
    assert "A100, H100" in message
    assert create(obj, check_nodes=False).allowed


def test_another_scheduler_is_refused() -> None:
    where, message = refused(create(pod({"gpupool.io/gpu": "1"}, scheduler="volcano")))
    assert where == "spec.schedulerName"
    assert "'volcano'" in message


@pytest.mark.parametrize(
    ("namespace", "label", "expected"),
    [
        ("team-a", "prod", "queue 'prod' does not serve namespace 'team-a'; allowed: research"),
        ("team-a", "nope", "allowed: research"),
        ("elsewhere", "prod", "allowed: none"),
        ("shared", None, "served by several queues; choose one of prod, research"),
        ("team-c", None, "queue 'closed' admits no pods"),
    ],
)
def test_a_queue_the_namespace_cannot_use_is_refused(
    namespace: str, label: str | None, expected: str
) -> None:
    labels = {} if label is None else {"gpupool.io/queue": label}
    obj = pod({"gpupool.io/gpu": "1"}, labels=labels, namespace=namespace)
    where, message = refused(create(obj))
    assert where == "metadata.labels[gpupool.io/queue]"
    assert expected in message


def test_a_shared_namespace_chooses_with_the_label() -> None:
    obj = pod({"gpupool.io/gpu": "1"}, labels={"gpupool.io/queue": "prod"}, namespace="shared")
    assert create(obj).allowed


def test_a_pod_created_with_an_allocation_is_refused_even_without_gpus() -> None:
    obj = pod(annotations={ALLOCATION: '{"node":"n1"}'})
    assert refused(create(obj))[0] == f"metadata.annotations[{ALLOCATION}]"


def test_updates_may_not_forge_an_allocation_or_move_queues() -> None:
    old = pod({"gpupool.io/gpu": "1"}, labels={"gpupool.io/queue": "research"})
    old["metadata"]["annotations"] = {ALLOCATION: "a"}
    changed = pod({"gpupool.io/gpu": "1"}, labels={"gpupool.io/queue": "research"})
    changed["metadata"]["annotations"] = {ALLOCATION: "b"}
    assert refused(update(old, changed))[0] == f"metadata.annotations[{ALLOCATION}]"
    moved = pod({"gpupool.io/gpu": "1"}, labels={"gpupool.io/queue": "prod"})
    moved["metadata"]["annotations"] = {ALLOCATION: "a"}
    assert refused(update(old, moved))[0] == "metadata.labels[gpupool.io/queue]"
    finalizer_removed = dict(old, metadata=old["metadata"] | {"finalizers": []})
    assert update(old, finalizer_removed) == Verdict()


def test_a_bound_pods_queue_and_class_labels_are_fixed_naming_the_field() -> None:
    """In ``shared``, both queues serve the namespace: only the bind makes the change wrong."""
    labels = {"gpupool.io/queue": "research", "gpupool.io/class": "default"}
    old = pod({"gpupool.io/gpu": "1"}, labels=labels, namespace="shared")
    bound = dict(old, spec=old["spec"] | {"nodeName": "n1"})
    for key, value in (("gpupool.io/queue", "prod"), ("gpupool.io/class", "batch")):
        for changed in ({**labels, key: value}, {k: v for k, v in labels.items() if k != key}):
            new = dict(bound, metadata=bound["metadata"] | {"labels": changed})
            field, message = refused(update(bound, new))
            assert field == f"metadata.labels[{key}]"
            assert message.startswith("fixed once the pod is bound")
            unbound = dict(old, metadata=old["metadata"] | {"labels": changed})
            assert update(old, unbound).allowed  # before the bind, a serving queue may be chosen
    other = dict(bound, metadata=bound["metadata"] | {"labels": {**labels, "team": "x"}})
    assert update(bound, other) == Verdict()


def test_an_update_is_not_judged_again_on_resources() -> None:
    old = pod({"gpupool.io/gpu": "8"})
    smaller = ClusterFacts(most_gpus_per_node=4, models=frozenset({"H100"}))
    assert update(old, old, smaller) == Verdict()


def test_before_the_caches_sync_only_fact_free_checks_run() -> None:
    big = pod(
        {"gpupool.io/gpu": "64", "gpupool.io/gpu-memory": "999999"},
        labels={"gpupool.io/queue": "x"},
    )
    verdict = create(big, facts=None)
    assert verdict.allowed
    labels = apply_patch(big, verdict.patch)["metadata"]["labels"]
    assert labels == {"gpupool.io/queue": "x", "gpupool.io/class": "default"}
    assert refused(create(pod({"gpupool.io/gpu": "1", "gpupool.io/gpu-cores": "101"}), None))


def test_a_cluster_without_gpu_nodes_does_not_refuse_by_node_facts() -> None:
    verdict = create(pod({"gpupool.io/gpu": "4"}), facts=ClusterFacts())
    assert verdict.allowed


def test_an_ill_typed_pod_is_refused_naming_the_field() -> None:
    obj = pod({"gpupool.io/gpu": "1"})
    obj["spec"]["containers"][0]["resources"]["limits"]["gpupool.io/gpu"] = 1
    where, message = refused(create(obj))
    assert where == "spec.containers[0].resources.limits[...]"
    assert "Expected `str`, got `int`" in message
    unrelated = pod()
    unrelated["spec"]["containers"] = "x"
    assert create(unrelated) == Verdict()


def test_the_validating_webhook_refuses_a_pod_that_bypassed_mutation() -> None:
    where, message = refused(validate_only(create(pod({"gpupool.io/gpu": "1"}))))
    assert where == "spec.schedulerName"
    assert "'gpupool'" in message


def test_other_operations_are_admitted() -> None:
    review = PodReview("DELETE", "team-a", "u", pod({"gpupool.io/gpu": "99"}))
    assert review_pod(review, FACTS) == Verdict()


CLASSED = ClusterFacts(
    queues={
        "train": QueueSpec(
            "train", frozenset({"ml", "shared"}), allowed_classes=frozenset({"training"})
        ),
        "any": QueueSpec("any", frozenset({"shared"})),
    }
)


def test_a_class_its_queue_does_not_allow_is_refused_with_the_policys_message() -> None:
    obj = pod({"gpupool.io/gpu": "1"}, labels={"gpupool.io/class": "serving"}, namespace="ml")
    verdict = create(obj, CLASSED)
    assert verdict.refusal is not None
    assert verdict.refusal.field == "metadata.labels[gpupool.io/class]"
    # the ValidatingAdmissionPolicy builds the same string (tests/integration/test_queue_classes)
    assert str(verdict.refusal) == class_refusal_message("serving", "train", "ml")
    assert "spec.allowedClasses of GPUQueue 'train'" in verdict.refusal.message
    allowed = pod({"gpupool.io/gpu": "1"}, labels={"gpupool.io/class": "training"}, namespace="ml")
    assert create(allowed, CLASSED).allowed


def test_every_queue_serving_the_namespace_must_allow_the_class() -> None:
    """As strict as the admission policy, which cannot see which queue a label chooses."""
    labels = {"gpupool.io/class": "serving", "gpupool.io/queue": "any"}
    obj = pod({"gpupool.io/gpu": "1"}, labels=labels, namespace="shared")
    assert refused(create(obj, CLASSED)) == (
        "metadata.labels[gpupool.io/class]",
        "class 'serving' is not in spec.allowedClasses of GPUQueue 'train', which serves "
        "namespace 'shared'",
    )


def test_the_default_class_is_given_only_where_every_serving_queue_allows_it() -> None:
    obj = pod({"gpupool.io/gpu": "1"}, namespace="ml")
    mutated = apply_patch(obj, create(obj, CLASSED).patch)
    assert mutated["metadata"]["labels"] == {"gpupool.io/queue": "train"}  # no class: allowed
    free = pod({"gpupool.io/gpu": "1"}, namespace="team-a")
    labels = apply_patch(free, create(free).patch)["metadata"]["labels"]
    assert labels["gpupool.io/class"] == "default"


def test_an_update_may_not_change_the_class_to_one_the_queue_does_not_allow() -> None:
    old = pod({"gpupool.io/gpu": "1"}, labels={"gpupool.io/class": "training"}, namespace="ml")
    new = pod({"gpupool.io/gpu": "1"}, labels={"gpupool.io/class": "serving"}, namespace="ml")
    assert refused(update(old, new, CLASSED))[0] == "metadata.labels[gpupool.io/class]"
    # a pod whose class was allowed once is not refused its other updates when the queue changes
    assert update(new, new | {"spec": new["spec"] | {"priority": 0}}, CLASSED) == Verdict()


def _claim_pod(labels: dict[str, str] | None = None, scheduler: str = "default-scheduler") -> Json:
    obj = pod(labels=labels, scheduler=scheduler)
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return obj


def _create_claim_pod(obj: Json, gpupool_devices: bool) -> Verdict:
    namespace = obj["metadata"]["namespace"]
    review = PodReview("CREATE", namespace, "req-3", obj, None, gpupool_devices)
    return review_pod(review, FACTS)


def test_a_pod_whose_claims_ask_for_gpupool_devices_is_routed_queued_and_checked() -> None:
    obj = _claim_pod()
    mutated = apply_patch(obj, _create_claim_pod(obj, gpupool_devices=True).patch)
    assert mutated["spec"]["schedulerName"] == "gpupool"
    assert mutated["metadata"]["labels"] == {
        "gpupool.io/queue": "research",
        "gpupool.io/class": "default",
    }
    # checked like a pod asking for gpupool.io/gpu: a queue of another namespace is refused
    where, _ = refused(_create_claim_pod(_claim_pod(labels={"gpupool.io/queue": "prod"}), True))
    assert where == "metadata.labels[gpupool.io/queue]"
    where, _ = refused(_create_claim_pod(_claim_pod(scheduler="volcano"), True))
    assert where == "spec.schedulerName"
    # claims of other drivers: the pod is not gpupool's
    assert _create_claim_pod(_claim_pod(scheduler="volcano"), False) == Verdict()
