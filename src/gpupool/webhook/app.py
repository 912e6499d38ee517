"""The webhook's HTTP face: ``/mutate``, ``/validate``, ``/healthz`` and ``/readyz``.

A small ASGI app of its own (not part of the REST API), so a dashboard restart never takes
admission down. ``/readyz`` answers 503 until the cluster facts are known, so a Deployment sends
no reviews to a replica that could only run the fact-free checks; ``/healthz`` only says the
process serves.

An AdmissionReview that cannot be read gets a 422 from the request validation; every readable
one gets a 200 with ``allowed`` true or false. A crash would be a 500, which the API server turns
into the configured failure policy; the fuzz tests show there is none. The one 500 on purpose:
the API server refused or did not answer a read of a pod's claims
(:mod:`gpupool.webhook.claim_requests`), so the failure policy decides that pod.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from gpupool.webhook.admission import (
    DEFAULT_CONFIG,
    AdmissionConfig,
    PodReview,
    Verdict,
    review_pod,
    validate_only,
)
from gpupool.webhook.claim_requests import ClaimReader, has_claims
from gpupool.webhook.facts import ClusterFacts
from gpupool.webhook.review import AdmissionRequest, AdmissionReview, allow, deny

log = logging.getLogger(__name__)

FactsSource = Callable[[], ClusterFacts | None]
"""Returns the current cluster facts, or None while the caches have not synced."""


async def _verdict(
    request: AdmissionRequest,
    facts: ClusterFacts | None,
    config: AdmissionConfig,
    claims: ClaimReader | None,
) -> Verdict:
    kind = request.kind
    if request.object is None or kind.group or kind.kind != "Pod":
        return Verdict()
    pod = request.object
    # claims are read on create only: an update cannot change spec.resourceClaims
    gpupool_claims = False
    if claims is not None and request.operation == "CREATE" and has_claims(pod):
        gpupool_claims = await claims.asks_for_gpupool(request.namespace, pod)
    review = PodReview(
        operation=request.operation,
        namespace=request.namespace,
        uid=request.uid,
        pod=pod,
        old_pod=request.old_object,
        claims_gpupool_devices=gpupool_claims,
    )
    return review_pod(review, facts, config)


def create_app(
    facts: FactsSource, config: AdmissionConfig = DEFAULT_CONFIG, claims: ClaimReader | None = None
) -> FastAPI:
    """The webhook app, deciding with the facts ``facts()`` returns at each request.

    ``claims`` reads the claims a pod names (None: claim pods are judged by their containers
    only, as a pod asking for nothing of gpupool's).
    """
    app = FastAPI(title="gpupool admission webhook", docs_url=None, redoc_url=None)

    @app.exception_handler(RequestValidationError)
    async def unreadable(request: Request, error: RequestValidationError) -> JSONResponse:
        """A 422 naming what is wrong, without echoing the body.

        FastAPI's own handler echoes it, and fails with a 500 on a body that is not UTF-8.
        """
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}"
            for problem in error.errors()[:5]
        )
        return JSONResponse({"message": f"not an AdmissionReview v1: {problems}"}, 422)

    async def answer(review: AdmissionReview, *, validating: bool) -> dict[str, Any]:
        request = review.request
        verdict = await _verdict(request, facts(), config, claims)
        if validating:
            verdict = validate_only(verdict)
        if verdict.refusal is not None:
            log.info("refused %s/%s: %s", request.namespace, request.uid, verdict.refusal)
            return deny(request.uid, str(verdict.refusal)).to_json()
        return allow(request.uid, None if validating else verdict.patch).to_json()

    @app.post("/mutate")
    async def mutate(review: AdmissionReview) -> dict[str, Any]:
        """Route, label and check a pod."""
        return await answer(review, validating=False)

    @app.post("/validate")
    async def validate(review: AdmissionReview) -> dict[str, Any]:
        """Check a pod after every mutating webhook ran."""
        return await answer(review, validating=True)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process serves."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(response: Response) -> dict[str, str]:
        """Ready once the cluster facts are known."""
        if facts() is None:
            response.status_code = 503
            return {"status": "waiting for the node and queue caches"}
        return {"status": "ok"}

    return app
