"""A thin async HTTP port to the API server, on lightkube's connection setup.

lightkube reads the kubeconfig and builds the TLS/auth-configured ``httpx2`` client; the requests
themselves are raw, because the scheduler needs things typed clients get wrong or make slow:
the Binding subresource answers with a ``Status`` that both lightkube and the official client
fail to decode; list and watch bodies are decoded straight into slim ``msgspec`` records
(:mod:`gpupool.kube.objects.records`) rather than full API models; and the informer must see 410
Gone itself instead of a library silently resuming "from now".

One :class:`KubeAPI` per process, long-lived: creating clients per call is the classic source of
leaked sockets and memory in Kubernetes Python code.

In a pod, :meth:`KubeAPI.in_cluster` connects with the pod's ServiceAccount. Its token is a
projected token that the kubelet replaces before it expires (by default hourly); a client that
read it once stops working after the token's lifetime, the classic "scheduler goes 401 after an
hour" failure. :class:`ServiceAccountToken` re-reads the file when it changes, at least every 60
seconds, and once more on a 401, as client-go does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import KubeConfig

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SERVICE_ACCOUNT_DIR_ENV = "GPUPOOL_SERVICEACCOUNT_DIR"
"""Overrides :data:`SERVICE_ACCOUNT_DIR` (tests, or a token mounted elsewhere)."""
TOKEN_REREAD_SECONDS = 60.0
"""Longest time a token read from the file is used without looking at the file again."""


class ApiError(RuntimeError):
    """The API server answered with an error status.

    Attributes:
        status: HTTP status code (409 conflict, 404 not found, 410 gone, 422 invalid...).
        reason: The ``reason`` of the returned ``Status`` (``Conflict``, ``Invalid``...).
        message: The server's message; for validation errors it names the field.
    """

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def _error_from(response: httpx2.Response, body: bytes) -> ApiError:
    try:
        status = json.loads(body)
        return ApiError(response.status_code, status.get("reason", ""), status.get("message", ""))
    except ValueError:
        return ApiError(
            response.status_code, response.reason_phrase, body[:500].decode(errors="replace")
        )


class InClusterConfigError(ValueError):
    """Not in a pod, or the pod's ServiceAccount files are missing; the message says which."""


def _file_signature(path: Path) -> tuple[int, int, int]:
    """Inode, size and modification time of the file ``path`` resolves to.

    The kubelet swaps a projected token in atomically by re-pointing a symlink, so the target's
    inode changes even when size and time happen to match.
    """
    info = path.stat()
    return (info.st_ino, info.st_size, info.st_mtime_ns)


class ServiceAccountToken(httpx2.Auth):
    """Bearer auth from a token file that the kubelet rotates.

    The token is read again when the file changed (checked on every request: one ``stat``),
    when it is older than :data:`TOKEN_REREAD_SECONDS`, and after a 401, in which case the
    request is retried once if the file held a different token.

    Args:
        path: The token file.
        max_age: Seconds after which the file is read again even if it looks unchanged.
        clock: Monotonic seconds (tests pass their own).

    Raises:
        InClusterConfigError: The file cannot be read, or is empty, on the first read.
    """

    def __init__(
        self,
        path: Path,
        max_age: float = TOKEN_REREAD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.max_age = max_age
        self.clock = clock
        self.reads = 0
        self._token = ""
        self._signature: tuple[int, int, int] | None = None
        self._read_at = 0.0
        self._read()

    def _read(self) -> None:
        try:
            signature = _file_signature(self.path)
            token = self.path.read_text(encoding="utf-8").strip()
        except OSError as error:
            if not self._token:
                raise InClusterConfigError(f"service-account token {self.path}: {error}") from None
            log.warning("keeping the current token; cannot read %s: %s", self.path, error)
            return
        if not token:
            if not self._token:
                raise InClusterConfigError(f"service-account token {self.path}: file is empty")
            log.warning("keeping the current token; %s is empty", self.path)
            return
        self._token, self._signature, self._read_at = token, signature, self.clock()
        self.reads += 1

    def token(self) -> str:
        """The current token, re-read first if the file changed or the copy is too old."""
        stale = self.clock() - self._read_at >= self.max_age
        try:
            changed = _file_signature(self.path) != self._signature
        except OSError:
            changed = False  # mid-rotation; the next request looks again
        if stale or changed:
            self._read()
        return self._token

    def auth_flow(
        self, request: httpx2.Request
    ) -> Generator[httpx2.Request, httpx2.Response, None]:
        """Send with the current token; after a 401, retry once with a newer one if any."""
        used = self.token()
        request.headers["Authorization"] = f"Bearer {used}"
        response = yield request
        if response.status_code != 401:
            return
        self._read()
        if self._token != used:
            request.headers["Authorization"] = f"Bearer {self._token}"
            yield request


class KubeAPI:
    """Raw JSON requests against one API server.

    Args:
        http: An ``httpx2.AsyncClient`` whose base URL, TLS and auth point at the API server.
    """

    def __init__(self, http: httpx2.AsyncClient) -> None:
        self.http = http

    @classmethod
    def from_kubeconfig(
        cls,
        path: Path | str,
        *,
        context: str | None = None,
        timeout: float = 30.0,
        connections: int = 16,
    ) -> KubeAPI:
        """Connect with the user and cluster of ``context`` (default: the current one).

        ``connections`` bounds the pool, and all of them are kept alive: with httpx's default
        of 20 kept-alive connections, a burst of concurrent binds closes and re-handshakes TLS
        connections all the time, which costs more CPU than the requests themselves.
        """
        config = KubeConfig.from_file(str(path)).get(context)
        if config is None:
            raise ValueError(f"{path}: no context {context!r}")
        params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(timeout), trust_env=False)
        limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
        return cls(httpx2.AsyncClient(**params.httpx_params(config), limits=limits))

    @classmethod
    def in_cluster(
        cls,
        *,
        environ: Mapping[str, str] = os.environ,
        timeout: float = 30.0,
        connections: int = 16,
    ) -> KubeAPI:
        """Connect as the pod's ServiceAccount, the way client-go's ``InClusterConfig`` does.

        The API server is ``KUBERNETES_SERVICE_HOST``:``KUBERNETES_SERVICE_PORT``; the token
        and the cluster CA are ``token`` and ``ca.crt`` in
        ``/var/run/secrets/kubernetes.io/serviceaccount`` (or ``$GPUPOOL_SERVICEACCOUNT_DIR``).

        Raises:
            InClusterConfigError: A variable or a file is missing; the message names it.
        """
        host = environ.get("KUBERNETES_SERVICE_HOST", "")
        port = environ.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise InClusterConfigError(
                "not running in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                "must both be set (or pass --kubeconfig)"
            )
        folder = Path(environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR)
        ca = folder / "ca.crt"
        try:
            context = ssl.create_default_context(cafile=str(ca))
        except (OSError, ssl.SSLError) as error:
            raise InClusterConfigError(f"cluster CA {ca}: {error}") from None
        auth = ServiceAccountToken(folder / "token")
        if ":" in host:  # an IPv6 address
            host = f"[{host}]"
        limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
        return cls(
            httpx2.AsyncClient(
                base_url=f"https://{host}:{port}",
                verify=context,
                auth=auth,
                timeout=httpx2.Timeout(timeout),
                limits=limits,
                trust_env=False,
            )
        )

    async def close(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: JsonObject | None = None,
        params: dict[str, str] | None = None,
        content_type: str = JSON,
    ) -> bytes:
        """Send one request and return the raw body.

        Raises:
            ApiError: Any status >= 400.
        """
        content = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": content_type} if content is not None else None
        response = await self.http.request(
            method, path, content=content, params=params, headers=headers
        )
        if response.status_code >= 400:
            raise _error_from(response, response.content)
        return response.content

    async def get(self, path: str, params: dict[str, str] | None = None) -> JsonObject:
        """GET a JSON object."""
        result: JsonObject = json.loads(await self.request("GET", path, params=params))
        return result

    async def create(self, path: str, body: JsonObject) -> JsonObject:
        """POST a JSON object and return what the server stored."""
        result: JsonObject = json.loads(await self.request("POST", path, body=body))
        return result

    async def create_all(
        self, path: str, bodies: Iterable[JsonObject], concurrency: int = 16
    ) -> None:
        """POST every object to ``path``, ``concurrency`` requests at a time.

        A fixed pool of workers pulls from one iterator, so a burst of 50,000 objects never
        becomes 50,000 pending tasks.
        """
        pending = iter(bodies)

        async def worker() -> None:
            for body in pending:
                await self.request("POST", path, body=body)

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def list_items(self, path: str, page_size: int = 500) -> list[JsonObject]:
        """Every object of a collection as raw JSON, page by page."""
        items: list[JsonObject] = []
        params = {"limit": str(page_size)}
        while True:
            page = await self.get(path, params)
            items.extend(page["items"])
            token = page["metadata"].get("continue")
            if not token:
                return items
            params["continue"] = token

    async def replace(self, path: str, body: JsonObject) -> JsonObject:
        """PUT a JSON object (optimistic concurrency through ``metadata.resourceVersion``)."""
        result: JsonObject = json.loads(await self.request("PUT", path, body=body))
        return result

    async def patch(self, path: str, body: JsonObject, content_type: str = MERGE_PATCH) -> None:
        """PATCH an object (merge patch by default)."""
        await self.request("PATCH", path, body=body, content_type=content_type)

    async def delete(self, path: str) -> None:
        """DELETE an object; a missing object is not an error."""
        try:
            await self.request("DELETE", path)
        except ApiError as error:
            if error.status != 404:
                raise

    @asynccontextmanager
    async def stream(self, path: str, params: dict[str, str]) -> AsyncIterator[httpx2.Response]:
        """Open a streaming GET (a watch): no read timeout, the caller owns the deadline.

        Raises:
            ApiError: The server refused the request (410 Gone for a too old resourceVersion).
        """
        timeout = httpx2.Timeout(self.http.timeout.connect, read=None)
        request = self.http.build_request("GET", path, params=params, timeout=timeout)
        response = await self.http.send(request, stream=True)
        try:
            if response.status_code >= 400:
                raise _error_from(response, await response.aread())
            yield response
        finally:
            await response.aclose()
