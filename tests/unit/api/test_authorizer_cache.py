"""ClusterAuthorizer: what it asks the API server, what it caches, and for how long.

The API server is played by a table here (what TokenReview and SubjectAccessReview answer is
tested against the real one in tests/integration/test_api_live.py); these tests check the
requests made, the audience check and the caching, which the real server cannot show.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.api.auth import API_AUDIENCE, CACHE_SECONDS, ClusterAuthorizer, ReviewUnavailableError
from gpupool.kube.client.api import ApiError


class Reviews:
    """Answers TokenReviews and SubjectAccessReviews as an API server would, and counts them."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.down = False
        self.ignores_audiences = False

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(path.rsplit("/", 1)[1])
        if self.down:
            raise ApiError(503, "ServiceUnavailable", "etcd is down")
        spec = body["spec"]
        if body["kind"] == "TokenReview":
            assert spec["audiences"] == [API_AUDIENCE]
            token = spec["token"]
            if token == "bad":
                return {"status": {"authenticated": False}}
            audiences = [] if self.ignores_audiences else spec["audiences"]
            user = {"username": token, "groups": ["team"], "extra": {"k": ["v"]}}
            return {"status": {"authenticated": True, "user": user, "audiences": audiences}}
        assert spec["resourceAttributes"]["resource"] == "pods"
        assert spec["resourceAttributes"]["verb"] == "list"
        assert (spec["groups"], spec["extra"]) == (["team"], {"k": ["v"]})
        namespace = spec["resourceAttributes"].get("namespace")
        allowed = spec["user"] == "admin" or (spec["user"] == "alice" and namespace == "ml")
        return {"status": {"allowed": allowed}}


async def test_answers_are_cached_until_they_expire() -> None:
    reviews = Reviews()
    now = [0.0]
    authorizer = ClusterAuthorizer(reviews, clock=lambda: now[0])  # type: ignore[arg-type]
    alice = await authorizer.access("alice")
    assert alice is not None
    assert alice.who == "alice"
    assert await authorizer.access("alice") is not None
    assert reviews.calls == ["tokenreviews"]
    assert await alice.namespaces(["ml", "other", ""]) == frozenset({"ml"})
    assert reviews.calls.count("subjectaccessreviews") == 3  # all namespaces, then ml, other
    assert await alice.namespaces(["ml", "other"]) == frozenset({"ml"})
    assert await alice.cluster_wide() is False
    assert len(reviews.calls) == 4
    assert await authorizer.access("bad") is None
    assert await authorizer.access("bad") is None
    assert len(reviews.calls) == 5  # a refusal is cached too
    now[0] = CACHE_SECONDS + 1
    await authorizer.access("alice")
    await alice.cluster_wide()
    assert len(reviews.calls) == 7
    assert all("alice" not in key for key in authorizer._tokens.entries)  # hashes, not tokens


async def test_a_cluster_wide_reader_needs_one_review() -> None:
    reviews = Reviews()
    admin = await ClusterAuthorizer(reviews).access("admin")  # type: ignore[arg-type]
    assert admin is not None
    assert await admin.namespaces(["a", "b", "c"]) == frozenset({"a", "b", "c"})
    assert reviews.calls == ["tokenreviews", "subjectaccessreviews"]


async def test_an_authenticator_blind_to_audiences_is_not_believed() -> None:
    reviews = Reviews()
    reviews.ignores_audiences = True
    assert await ClusterAuthorizer(reviews).access("alice") is None  # type: ignore[arg-type]


async def test_an_unreachable_api_server_is_an_error_not_an_answer() -> None:
    reviews = Reviews()
    reviews.down = True
    authorizer = ClusterAuthorizer(reviews)  # type: ignore[arg-type]
    with pytest.raises(ReviewUnavailableError, match="etcd is down"):
        await authorizer.access("alice")
    reviews.down = False
    alice = await authorizer.access("alice")  # the failure was not cached
    assert alice is not None
    reviews.down = True
    with pytest.raises(ReviewUnavailableError):
        await alice.namespaces(["ml"])
