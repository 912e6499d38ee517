"""Who may read the API and dashboard: loopback freely, anyone else as the cluster says.

Requests from loopback (``kubectl port-forward``, a sidecar, the demo) are allowed, the way
``kubectl proxy`` serves whoever can reach its local port. Any other request needs a bearer
token, which the API server authenticates (TokenReview) and then authorizes (SubjectAccessReview
for ``get`` on ``gpupools.gpupool.io``): the cluster's own RBAC decides, so a tenant who may not
read GPU pools cannot read who holds which GPU either, and no second user database exists.
Answers are cached for :data:`CACHE_SECONDS` per token (by its SHA-256, never the token itself),
so a dashboard polling every two seconds costs the API server two reviews a minute, not sixty.
An API server that cannot be asked means 503, never an open door.

Only the face is wrapped: ``/healthz``, ``/readyz`` and ``/metrics`` stay open for kubelet probes
and Prometheus.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx2
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from gpupool.kube.api import ApiError, KubeAPI

log = logging.getLogger(__name__)

CACHE_SECONDS = 30.0
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
READ_ATTRIBUTES = {"group": "gpupool.io", "resource": "gpupools", "verb": "get"}
"""What a reader must be allowed: the same as reading the GPU pools themselves."""


class ReviewUnavailableError(RuntimeError):
    """The API server could not be asked."""


class Authorizer(Protocol):
    """Decides whether a bearer token may read."""

    async def decide(self, token: str) -> tuple[bool, str]:
        """(allowed, who or why not); raises :class:`ReviewUnavailableError`."""
        ...


@dataclass
class ClusterAuthorizer:
    """Decides bearer tokens with TokenReview and SubjectAccessReview, cached per token.

    Args:
        api: A client allowed to create TokenReviews and SubjectAccessReviews
            (``system:auth-delegator``).
        clock: Monotonic seconds.
    """

    api: KubeAPI
    clock: Callable[[], float] = time.monotonic
    _cache: dict[str, tuple[float, bool, str]] = field(default_factory=dict)

    async def decide(self, token: str) -> tuple[bool, str]:
        """(allowed, who or why not) for ``token``.

        Raises:
            ReviewUnavailableError: A review could not be made.
        """
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1], cached[2]
        allowed, detail = await self._review(token)
        if len(self._cache) > 10_000:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
        self._cache[key] = (now + CACHE_SECONDS, allowed, detail)
        return allowed, detail

    async def _review(self, token: str) -> tuple[bool, str]:
        try:
            review = await self.api.create(
                TOKEN_REVIEWS,
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token},
                },
            )
            status: dict[str, Any] = review.get("status", {})
            if not status.get("authenticated"):
                return False, "token not authenticated"
            user: dict[str, Any] = status.get("user", {})
            name = str(user.get("username", ""))
            access = await self.api.create(
                ACCESS_REVIEWS,
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {
                        "user": name,
                        "groups": user.get("groups", []),
                        "uid": user.get("uid", ""),
                        "extra": user.get("extra", {}),
                        "resourceAttributes": READ_ATTRIBUTES,
                    },
                },
            )
        except (ApiError, OSError, httpx2.HTTPError) as error:
            raise ReviewUnavailableError(str(error)) from error
        if access.get("status", {}).get("allowed"):
            return True, name
        return False, f"{name} may not get gpupools.gpupool.io"


def is_loopback(host: str | None) -> bool:
    """Whether a client address is a loopback address."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RequireClusterReader:
    """ASGI middleware: loopback passes, others need a token the cluster lets read gpupools.

    Args:
        app: The app to protect.
        authorizer: Decides tokens; ``None`` refuses every non-loopback request (no cluster to
            ask, as in the demo).
    """

    def __init__(self, app: ASGIApp, authorizer: Authorizer | None) -> None:
        self.app = app
        self.authorizer = authorizer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve, or answer 401/403/503."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        if is_loopback(client[0] if client else None):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        auth = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            await _answer(scope, receive, send, 401, "a bearer token is needed from off-host")
            return
        if self.authorizer is None:
            await _answer(scope, receive, send, 403, "no cluster to check tokens against")
            return
        try:
            allowed, detail = await self.authorizer.decide(token.strip())
        except ReviewUnavailableError as error:
            log.warning("token review failed: %s", error)
            await _answer(scope, receive, send, 503, "the API server could not review the token")
            return
        if not allowed:
            await _answer(scope, receive, send, 403, f"forbidden: {detail}")
            return
        await self.app(scope, receive, send)


async def _answer(scope: Scope, receive: Receive, send: Send, status: int, text: str) -> None:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    await PlainTextResponse(text + "\n", status_code=status, headers=headers)(scope, receive, send)
