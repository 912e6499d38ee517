"""A thin async HTTP port to the API server, on lightkube's connection setup.

lightkube reads the kubeconfig and builds the TLS/auth-configured ``httpx2`` client; the requests
themselves are raw, because the scheduler needs things typed clients get wrong or make slow:
the Binding subresource answers with a ``Status`` that both lightkube and the official client
fail to decode; list and watch bodies are decoded straight into slim ``msgspec`` records
(:mod:`gpupool.kube.records`) rather than full API models; and the informer must see 410 Gone
itself instead of a library silently resuming "from now".

One :class:`KubeAPI` per process, long-lived: creating clients per call is the classic source of
leaked sockets and memory in Kubernetes Python code.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import KubeConfig

JsonObject = dict[str, Any]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


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
