"""Informers that are listed, watched and relisted together, like one cache.

The scheduler's DRA watches (claims, templates, classes, slices) and its storage watches
(claims, volumes, classes, CSINodes, attachments) each feed one book, and the leader may not
decide before all of a book's informers have listed once. Each group says which informers it
holds; syncing, running, relisting and the "something changed" callback after every event are
the same for all of them, and live here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from gpupool.kube.client.informer import Informer

Record = TypeVar("Record")


class InformerGroup:
    """Informers run and relisted together; :attr:`changed` is called after every event.

    Args:
        changed: Called after every change (the scheduler wakes its loop there).
    """

    def __init__(self, changed: Callable[[], None]) -> None:
        self.changed = changed

    def informers(self) -> tuple[Informer[Any], ...]:
        """The group's informers (each group lists its own)."""
        raise NotImplementedError

    def _wrap(self, handler: Callable[[str, Record], None]) -> Callable[[str, Record], None]:
        """``handler``, then :attr:`changed`."""

        def handle(kind: str, record: Record) -> None:
            handler(kind, record)
            self.changed()

        return handle

    @property
    def synced(self) -> bool:
        """Whether every informer of the group has completed its first list."""
        return all(informer.synced.is_set() for informer in self.informers())

    async def run(self) -> None:
        """List and watch until cancelled."""
        await asyncio.gather(*(informer.run() for informer in self.informers()))

    async def resync(self) -> None:
        """Relist them all (a new term as leader)."""
        await asyncio.gather(*(informer.resync() for informer in self.informers()))
