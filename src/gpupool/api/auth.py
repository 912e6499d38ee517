"""Who may read the API and dashboard, and which namespaces each reader sees.

Every request needs a bearer token that the API server authenticates (TokenReview) **for the
audience** :data:`API_AUDIENCE`: a ServiceAccount token made with ``kubectl create token SA
--audience gpupool.io/api`` (or a user's token from an authenticator configured with that
audience). A token for the API server itself is refused, so a user never hands gpupool a
credential that works against the cluster. The cluster's RBAC then decides what the reader sees
(SubjectAccessReview, no second user database):

* *cluster-wide views* (the GPU map, the summary, teams, pools, queues, the dashboard) need
  ``list pods`` in every namespace: they show every tenant's pods, which such a reader can list
  anyway;
* *per-namespace views* (pending pods and their reasons, explanations, governance actions, the
  audit trail, cost) show only the namespaces where the reader may ``list pods``; asking for
  another one is a 403 naming it.

The peer address is no identity: a mesh sidecar forwards from 127.0.0.6, ``kubectl
port-forward`` from 127.0.0.1, so loopback gets no bypass unless the process was started with
``--insecure-local`` (the demo, a laptop), which lets loopback read everything without a token.
A browser presents its token through ``/login`` (a cookie, :mod:`gpupool.api.login`).

Answers are cached for :data:`CACHE_SECONDS`: a token by its SHA-256 (never the token itself), a
permission by the reader's identity and namespace, so a dashboard polling every two seconds
costs the API server a few reviews a minute, not sixty. An API server that cannot be asked means
503, never an open door.

Only the face is wrapped: ``/healthz``, ``/readyz`` and ``/metrics`` stay open for kubelet probes
and Prometheus.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx2
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from gpupool.api.login import login, login_form, token_of
from gpupool.kube.client.api import ApiError, KubeAPI

log = logging.getLogger(__name__)

API_AUDIENCE = "gpupool.io/api"
"""The audience a token must be issued for (``kubectl create token --audience``)."""
CACHE_SECONDS = 30.0
CACHE_LIMIT = 10_000
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ACCESS_KEY = "gpupool.access"
"""Where the middleware leaves the reader's :class:`Access` in the ASGI scope."""
REVIEWS_AT_ONCE = 16
"""SubjectAccessReviews in flight for one request (a reader in many namespaces)."""


class ReviewUnavailableError(RuntimeError):
    """The API server could not be asked."""


class Access(Protocol):
    """What one reader may see."""

    @property
    def who(self) -> str:
        """The reader's name, for messages."""
        ...

    async def cluster_wide(self) -> bool:
        """Whether the reader may list pods in every namespace."""
        ...

    async def namespaces(self, candidates: Iterable[str]) -> frozenset[str]:
        """Those of ``candidates`` the reader may list pods in.

        Raises:
            ReviewUnavailableError: The API server could not be asked.
        """
        ...


@dataclass(frozen=True)
class Everything:
    """Access to everything: loopback under ``--insecure-local``, or a face with no control."""

    who: str = "local"

    async def cluster_wide(self) -> bool:
        """Always."""
        return True

    async def namespaces(self, candidates: Iterable[str]) -> frozenset[str]:
        """All of them."""
        return frozenset(candidates)


EVERYTHING = Everything()


@dataclass(frozen=True)
class Reader:
    """A reader as the API server authenticated it (what a SubjectAccessReview needs)."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def from_status(cls, user: dict[str, Any]) -> Reader:
        """From a TokenReview's ``status.user``."""
        extra = user.get("extra") or {}
        return cls(
            name=str(user.get("username", "")),
            uid=str(user.get("uid", "")),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(v) for v in vs)) for k, vs in extra.items())),
        )

    @property
    def cache_key(self) -> str:
        """Identifies the reader with everything its permissions may depend on."""
        return json.dumps([self.name, self.uid, self.groups, self.extra])


class Authorizer(Protocol):
    """Authenticates bearer tokens and answers what the reader may see."""

    async def access(self, token: str) -> Access | None:
        """The reader's access, or None when the token is not one for this API.

        Raises:
            ReviewUnavailableError: The API server could not be asked.
        """
        ...


@dataclass
class _Cache:
    """Answers kept for :data:`CACHE_SECONDS`, bounded to :data:`CACHE_LIMIT` entries."""

    clock: Callable[[], float]
    entries: dict[str, tuple[float, Any]] = field(default_factory=dict)

    def get(self, key: str) -> tuple[bool, Any]:
        found = self.entries.get(key)
        if found is not None and found[0] > self.clock():
            return True, found[1]
        return False, None

    def put(self, key: str, value: Any) -> None:
        now = self.clock()
        if len(self.entries) >= CACHE_LIMIT:
            self.entries = {k: v for k, v in self.entries.items() if v[0] > now}
        self.entries[key] = (now + CACHE_SECONDS, value)


@dataclass
class ClusterAuthorizer:
    """TokenReview (for the gpupool audience) and SubjectAccessReview, both cached.

    Args:
        api: A client allowed to create TokenReviews and SubjectAccessReviews
            (``system:auth-delegator``).
        audience: The audience tokens must be issued for.
        clock: Monotonic seconds.
    """

    api: KubeAPI
    audience: str = API_AUDIENCE
    clock: Callable[[], float] = time.monotonic
    _tokens: _Cache = field(init=False)
    _permissions: _Cache = field(init=False)

    def __post_init__(self) -> None:
        self._tokens = _Cache(self.clock)
        self._permissions = _Cache(self.clock)

    async def access(self, token: str) -> ClusterAccess | None:
        """The reader's access, or None for a token the API server does not accept for us.

        Raises:
            ReviewUnavailableError: The API server could not be asked.
        """
        reader = await self.authenticate(token)
        return ClusterAccess(self, reader) if reader is not None else None

    async def authenticate(self, token: str) -> Reader | None:
        """Who ``token`` is, if it is valid for :attr:`audience`; None otherwise.

        The answer's ``status.audiences`` is checked too: an authenticator that ignores
        audiences would otherwise accept any token the API server accepts.

        Raises:
            ReviewUnavailableError: The API server could not be asked.
        """
        key = hashlib.sha256(token.encode()).hexdigest()
        found, reader = self._tokens.get(key)
        if found:
            return reader  # type: ignore[no-any-return]
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self.audience]},
        }
        try:
            review = await self.api.create(TOKEN_REVIEWS, body)
        except (ApiError, OSError, httpx2.HTTPError) as error:
            raise ReviewUnavailableError(str(error)) from error
        status: dict[str, Any] = review.get("status", {})
        audiences = status.get("audiences") or []
        valid = bool(status.get("authenticated")) and self.audience in audiences
        reader = Reader.from_status(status.get("user", {})) if valid else None
        self._tokens.put(key, reader)
        return reader

    async def may_list_pods(self, reader: Reader, namespace: str | None) -> bool:
        """Whether ``reader`` may list pods in ``namespace`` (None: in every namespace).

        Raises:
            ReviewUnavailableError: The API server could not be asked.
        """
        key = json.dumps([reader.cache_key, namespace])
        found, allowed = self._permissions.get(key)
        if found:
            return bool(allowed)
        attributes = {"verb": "list", "resource": "pods", "version": "v1"}
        if namespace is not None:
            attributes["namespace"] = namespace
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": reader.name,
                "uid": reader.uid,
                "groups": list(reader.groups),
                "extra": {k: list(v) for k, v in reader.extra},
                "resourceAttributes": attributes,
            },
        }
        try:
            answer = await self.api.create(ACCESS_REVIEWS, body)
        except (ApiError, OSError, httpx2.HTTPError) as error:
            raise ReviewUnavailableError(str(error)) from error
        allowed = bool(answer.get("status", {}).get("allowed"))
        self._permissions.put(key, allowed)
        return allowed


@dataclass(frozen=True)
class ClusterAccess:
    """One authenticated reader's access, asked of the cluster as views need it."""

    authorizer: ClusterAuthorizer
    reader: Reader

    @property
    def who(self) -> str:
        """The reader's user name."""
        return self.reader.name

    async def cluster_wide(self) -> bool:
        """``list pods`` at cluster scope."""
        return await self.authorizer.may_list_pods(self.reader, None)

    async def namespaces(self, candidates: Iterable[str]) -> frozenset[str]:
        """Those of ``candidates`` where the reader may list pods ("" is never one)."""
        wanted = sorted({c for c in candidates if c})
        if not wanted or await self.cluster_wide():
            return frozenset(wanted)
        gate = asyncio.Semaphore(REVIEWS_AT_ONCE)

        async def check(namespace: str) -> bool:
            async with gate:
                return await self.authorizer.may_list_pods(self.reader, namespace)

        answers = await asyncio.gather(*(check(n) for n in wanted))
        return frozenset(n for n, ok in zip(wanted, answers, strict=True) if ok)


def is_loopback(host: str | None) -> bool:
    """Whether a client address is a loopback address."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RequireReader:
    """ASGI middleware: a token for the gpupool audience, or loopback under ``--insecure-local``.

    The reader's :class:`Access` is left in the scope (:data:`ACCESS_KEY`) for the routes,
    which decide per view what it may see (:mod:`gpupool.api.scope`).

    Args:
        app: The app to protect.
        authorizer: Decides tokens; ``None``: no cluster to ask (every token is refused).
        insecure_local: Let loopback read everything without a token (never in a cluster:
            a sidecar or port-forward makes every caller look local).
    """

    def __init__(
        self, app: ASGIApp, authorizer: Authorizer | None, *, insecure_local: bool = False
    ) -> None:
        self.app = app
        self.authorizer = authorizer
        self.insecure_local = insecure_local

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve, or answer 401/503."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in ("/login", "/logout"):
            await login(scope, receive, send, self.audience)
            return
        client = scope.get("client")
        if self.insecure_local and is_loopback(client[0] if client else None):
            scope[ACCESS_KEY] = EVERYTHING
            await self.app(scope, receive, send)
            return
        token = token_of(scope)
        if not token:
            await self._refuse(
                scope, receive, send, f"a bearer token for audience {self.audience} is needed"
            )
            return
        try:
            access = await self.authorizer.access(token) if self.authorizer else None
        except ReviewUnavailableError as error:
            log.warning("token review failed: %s", error)
            await answer(scope, receive, send, 503, "the API server could not review the token")
            return
        if access is None:
            await self._refuse(
                scope,
                receive,
                send,
                f"token not authenticated for audience {self.audience} "
                f"(kubectl create token ACCOUNT --audience {self.audience})",
            )
            return
        scope[ACCESS_KEY] = access
        await self.app(scope, receive, send)

    @property
    def audience(self) -> str:
        """The audience tokens are reviewed for."""
        return getattr(self.authorizer, "audience", API_AUDIENCE)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, text: str) -> None:
        """A 401: for the dashboard's page the login form, for everything else plain text."""
        if scope["path"] == "/":
            response = login_form(self.audience, text)
            response.status_code = 401
            await response(scope, receive, send)
            return
        await answer(scope, receive, send, 401, text)


async def answer(scope: Scope, receive: Receive, send: Send, status: int, text: str) -> None:
    """A plain-text error answer (401s say which scheme)."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    await PlainTextResponse(text + "\n", status_code=status, headers=headers)(scope, receive, send)
