"""The scheduler's HTTP server on a real socket: health, readiness before and after sync."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from prometheus_client import CollectorRegistry, Counter

from gpupool.kube.controlplane.http import HttpServer, build_app, parse_address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9402", ("127.0.0.1", 9402)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("[::1]:9402", ("::1", 9402)),
    ],
)
def test_addresses_parse(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["9402", ":9402", "host:", "host:http", "host:70000"])
def test_bad_addresses_name_the_option(text: str) -> None:
    with pytest.raises(ValueError, match="--http-address"):
        parse_address(text)


async def test_readyz_is_503_until_ready_and_metrics_come_from_the_registry() -> None:
    registry = CollectorRegistry()
    Counter("probe_things", "Things.", registry=registry).inc(3)
    state = {"ready": False, "detail": "informer caches not synced"}
    app = build_app(registry, lambda: (bool(state["ready"]), str(state["detail"])))
    server = HttpServer(app, "127.0.0.1", 0)
    assert server.port > 0
    serving = asyncio.create_task(server.serve())
    try:
        async with httpx2.AsyncClient(base_url=server.url, timeout=10) as http:
            for _ in range(100):  # until uvicorn has started on the socket
                try:
                    health = await http.get("/healthz")
                    break
                except httpx2.TransportError:
                    await asyncio.sleep(0.05)
            assert health.status_code == 200
            not_ready = await http.get("/readyz")
            assert not_ready.status_code == 503
            assert not_ready.text == "not ready: informer caches not synced\n"
            state.update(ready=True, detail="standby")
            ready = await http.get("/readyz")
            assert (ready.status_code, ready.text) == (200, "ok: standby\n")
            metrics = await http.get("/metrics")
            assert "probe_things_total 3.0" in metrics.text
            assert (await http.get("/nothing")).status_code == 404
    finally:
        server.stop()
        await asyncio.wait_for(serving, 10)


def test_a_taken_port_raises_at_construction() -> None:
    app = build_app(CollectorRegistry(), lambda: (True, "leader"))
    first = HttpServer(app, "127.0.0.1", 0)
    try:
        with pytest.raises(OSError, match="in use"):
            HttpServer(app, "127.0.0.1", first.port)
    finally:
        first.socket.close()
