"""Serving the face on its own (no scheduler): the example cluster, the demo, the tests.

:func:`serving` runs an ASGI app on uvicorn in a thread with its own event loop, on a socket
bound before it returns (port 0 picks a free port), and stops it on exit, so a test or a demo
can hand the URL to a browser or the CLI at once and never races the server's start-up. With a
certificate it serves HTTPS (the same reloading certificate as the control plane).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import ASGIApp

from gpupool.kube.client.serving_tls import ReloadingCertificate
from gpupool.kube.controlplane.http import HttpServer

START_TIMEOUT = 30.0


@contextmanager
def serving(
    app: ASGIApp,
    host: str = "127.0.0.1",
    port: int = 0,
    tls: ReloadingCertificate | None = None,
) -> Iterator[str]:
    """Serve ``app`` at ``host:port`` in a background thread; yields the base URL.

    Raises:
        OSError: The address cannot be bound.
        RuntimeError: The server did not start in time.
    """
    server = HttpServer(Starlette(routes=[Mount("/", app=app)]), host, port, tls)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(
        target=loop.run_until_complete, args=(server.serve(),), name="gpupool-face", daemon=True
    )
    thread.start()
    try:
        deadline = threading.Event()
        for _ in range(int(START_TIMEOUT * 20)):
            if server.server.started:
                break
            deadline.wait(0.05)
        else:
            raise RuntimeError(f"the server on {server.url} did not start")
        yield server.url
    finally:
        loop.call_soon_threadsafe(server.stop)
        thread.join(timeout=START_TIMEOUT)
        loop.close()
