"""Generated pods through the admission decision and through the served HTTPS app.

10,000 pods go through the pure decision (:func:`review_pod`, where every property is checked),
and 10,000 through the app as ``gpupool webhook`` serves it: uvicorn over real TLS on loopback,
with the reloading certificate, a certificate from a test CA verified by the client (the HTTP
and TLS layers add what the decision cannot show: a 5xx, a missing uid, an unreadable patch, a
refusal without a field, a broken handshake). About two minutes on 2 idle cores (a TLS
request costs about four times an in-process one), far longer on a crowded machine, hence the
test's own timeout; ``FZ_PURE`` and ``FZ_HTTP`` change the counts for a quick local run.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpupool.api.serve import serving
from gpupool.devcluster.certs import write_cluster_certs, write_serving_cert
from gpupool.kube.client.serving_tls import ReloadingCertificate
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import pod_spec
from gpupool.webhook.admission import PodReview, review_pod, validate_only
from gpupool.webhook.app import create_app
from gpupool.webhook.facts import ClusterFacts

from .helpers import FACTS, apply_patch
from .strategies import FACTS_CHOICES, NAMESPACES, Json, old_pods, pods

ALLOWED_PATHS = {
    "/spec/schedulerName",
    "/metadata/labels",
    "/metadata/labels/gpupool.io~1queue",
    "/metadata/labels/gpupool.io~1class",
}
FIELD = re.compile(r"^(spec|metadata)([.\[]|$)")
"""A field path at the pod's top level: ``spec.containers[0]...``, ``metadata.labels[...]``."""
FUZZ_PURE = int(os.environ.get("FZ_PURE", "10000"))
FUZZ_HTTP = int(os.environ.get("FZ_HTTP", "10000"))


def check_patch(patch: list[Json]) -> None:
    for op in patch:
        assert op["op"] == "add"
        assert op["path"] in ALLOWED_PATHS, op
        assert "allocation" not in json.dumps(op)


@settings(
    max_examples=FUZZ_PURE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    obj=pods(),
    namespace=NAMESPACES,
    facts=FACTS_CHOICES,
    operation=st.sampled_from(["CREATE", "CREATE", "CREATE", "UPDATE"]),
    old=old_pods(),
)
def test_every_pod_gets_a_verdict_that_names_a_field(
    obj: Json, namespace: str, facts: ClusterFacts | None, operation: str, old: Json | None
) -> None:
    review = PodReview(operation, namespace, "uid-1", obj, old if operation == "UPDATE" else None)
    verdict = review_pod(review, facts)
    event("refused" if verdict.refusal else "admitted" + (" and mutated" if verdict.patch else ""))
    if verdict.refusal is not None:
        assert FIELD.match(verdict.refusal.field), verdict.refusal
        assert verdict.refusal.message
        assert validate_only(verdict) == verdict
        return
    check_patch(verdict.patch)
    if operation == "UPDATE" or not verdict.patch:
        return
    mutated = apply_patch(obj, verdict.patch)
    # the scheduler accepts what the webhook admitted, and reads it the same way
    record = msgspec.convert(mutated, PodRecord)
    pod_spec(
        msgspec.structs.replace(record, metadata=msgspec.structs.replace(record.metadata, uid="u"))
    )
    assert mutated["spec"]["schedulerName"] == "gpupool"
    # a mutated pod needs no more mutation: the validating webhook admits it
    again = review_pod(PodReview("CREATE", namespace, "uid-1", mutated), facts)
    assert validate_only(again).allowed, again


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx2.Client]:
    """The app served over TLS as ``gpupool webhook`` serves it; a client verifying the CA."""
    pki: Path = tmp_path_factory.mktemp("pki")
    write_cluster_certs(pki)
    cert, key = write_serving_cert(pki, "webhook", ["127.0.0.1"])
    tls = ReloadingCertificate(cert, key)
    with serving(create_app(lambda: FACTS), tls=tls) as url:
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        with httpx2.Client(base_url=url, verify=context, timeout=10) as client:
            yield client


@pytest.mark.timeout(3600)
@settings(
    max_examples=FUZZ_HTTP,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(obj=pods(), namespace=NAMESPACES, path=st.sampled_from(["/mutate", "/validate"]))
def test_the_app_answers_every_pod_without_a_server_error(
    webhook: httpx2.Client, obj: Any, namespace: str, path: str
) -> None:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "uid-7",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": namespace,
            "operation": "CREATE",
            "object": obj,
        },
    }
    response = webhook.post(path, json=body)
    assert response.status_code == 200, response.text
    answer = response.json()["response"]
    assert answer["uid"] == "uid-7"
    if answer["allowed"]:
        check_patch(json.loads(base64.b64decode(answer.get("patch", "W10="))))
    else:
        assert FIELD.match(answer["status"]["message"].partition(": ")[0]), answer
