"""When each pod of a namespace was first seen bound, seen through the project's own Informer.

The live and memory benchmarks time binds by watching pods. They use
:class:`gpupool.kube.client.informer.Informer` rather than a LIST+WATCH loop of their own: a second
implementation would need its own answers to 410 Gone, silent watches and paginated lists, and
the review found the bench's copy answered fewer of them (no bookmarks kept, no pagination).
The stamp is taken in the handler, when the event has reached this process and been decoded.
"""

from __future__ import annotations

import asyncio
import time

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import DELETED, Informer
from gpupool.kube.objects.records import PodRecord


class BindTimes:
    """Stamps the moment each pod of ``namespace`` is first seen with ``spec.nodeName``.

    Args:
        api: Client.
        namespace: Namespace to watch (the informer lists and watches only that namespace).
        expected: ``done`` is set once this many pods are bound.
    """

    def __init__(self, api: KubeAPI, namespace: str, expected: int) -> None:
        self.namespace = namespace
        self.expected = expected
        self.bound: dict[str, float] = {}
        """Pod name -> ``time.monotonic()`` when its bind was seen."""
        self.done = asyncio.Event()
        self.informer = Informer(api, f"/api/v1/namespaces/{namespace}/pods", PodRecord, self._see)

    @property
    def synced(self) -> asyncio.Event:
        """Set once the first list is in: from then on no bind can be missed."""
        return self.informer.synced

    @property
    def events(self) -> int:
        """Watch events received so far."""
        return self.informer.stats.events

    def _see(self, kind: str, pod: PodRecord) -> None:
        name = pod.metadata.name
        if kind == DELETED or not pod.spec.node_name or name in self.bound:
            return
        self.bound[name] = time.monotonic()
        if len(self.bound) >= self.expected:
            self.done.set()

    async def run(self) -> None:
        """List, then watch until cancelled (the informer recovers from errors by itself)."""
        await self.informer.run()
