"""ClusterAuthorizer: two reviews per token, then the cached answer until it expires."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.api.auth import CACHE_SECONDS, ClusterAuthorizer, ReviewUnavailableError
from gpupool.kube.api import ApiError


class Reviews:
    """Answers TokenReviews and SubjectAccessReviews as an API server would, and counts them."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.down = False

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(path.rsplit("/", 1)[1])
        if self.down:
            raise ApiError(503, "ServiceUnavailable", "etcd is down")
        if body["kind"] == "TokenReview":
            token = body["spec"]["token"]
            if token == "bad":
                return {"status": {"authenticated": False}}
            return {"status": {"authenticated": True, "user": {"username": token, "groups": []}}}
        allowed = body["spec"]["user"] == "alice"
        assert body["spec"]["resourceAttributes"]["resource"] == "gpupools"
        return {"status": {"allowed": allowed}}


async def test_answers_are_cached_per_token_until_they_expire() -> None:
    reviews = Reviews()
    now = [0.0]
    authorizer = ClusterAuthorizer(reviews, clock=lambda: now[0])  # type: ignore[arg-type]
    assert await authorizer.decide("alice") == (True, "alice")
    assert await authorizer.decide("alice") == (True, "alice")
    assert reviews.calls == ["tokenreviews", "subjectaccessreviews"]
    assert await authorizer.decide("bob") == (False, "bob may not get gpupools.gpupool.io")
    assert await authorizer.decide("bad") == (False, "token not authenticated")
    assert len(reviews.calls) == 5
    now[0] = CACHE_SECONDS + 1
    await authorizer.decide("alice")
    assert len(reviews.calls) == 7
    assert all("alice" not in key for key in authorizer._cache)  # hashes, never tokens


async def test_an_unreachable_api_server_is_an_error_not_an_answer() -> None:
    reviews = Reviews()
    reviews.down = True
    authorizer = ClusterAuthorizer(reviews)  # type: ignore[arg-type]
    with pytest.raises(ReviewUnavailableError, match="etcd is down"):
        await authorizer.decide("alice")
    reviews.down = False
    assert await authorizer.decide("alice") == (True, "alice")  # the failure was not cached
