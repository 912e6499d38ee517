"""An informer: a local cache of one kind of object, kept current by LIST and WATCH.

The state machine is LISTING -> WATCHING -> (error) -> WATCHING again from the last
resourceVersion, or LISTING again when the server says 410 Gone. Lessons from the issue trackers
(python-ecosystem.md §1.4) are built in:

* 410 Gone is normal. A relist *diffs* against the cache and reports objects that vanished
  during the gap as deletions; the watch is never silently resumed "from now".
* A watch can go quiet without closing. Bookmarks are requested (the server sends one about
  every minute), and a stream that delivers nothing for ``inactivity_timeout`` is abandoned.
* The server closes each watch after ``timeoutSeconds``; the client has no read timeout of its
  own on streams, so the two never fight.
* LISTs are paginated, so 50k pods do not arrive as one huge body.
* Connection errors (an API server restart) back off and retry forever; the process recovers
  by itself.

Handlers are synchronous and cheap: they update caches and wake the consumer. Records are
:mod:`gpupool.kube.objects.records` structs keyed by uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic

import httpx2
import msgspec

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.objects.records import ListPage, Record, WatchEvent
from gpupool.retry import Backoff

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
FIRST_RETRY = 0.2
"""Seconds before the first retry after a connection error (then doubling): an API server
restart takes seconds, and every replica's watches retry at once."""
Handler = Callable[[str, Record], None]


class _GoneError(Exception):
    """The watch's resourceVersion is too old: relist."""


class _Status(msgspec.Struct, frozen=True):
    code: int = 0
    reason: str = ""
    message: str = ""


class _Bookmark(msgspec.Struct, frozen=True):
    class _Meta(msgspec.Struct, frozen=True, rename="camel"):
        resource_version: str = ""

    metadata: _Meta = _Meta()


@dataclass
class InformerStats:
    """Counters a metrics endpoint can export."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    gone: int = 0
    errors: int = 0
    inactivity_timeouts: int = 0


class Informer(Generic[Record]):
    """Keeps ``store`` equal to the server's objects at ``path`` and reports every change.

    Args:
        api: The API port.
        path: Collection path (``/api/v1/pods``).
        record_type: The slim record type to decode items into.
        handler: Called as ``handler(event_type, record)`` for every change, in order.
        field_selector: Optional server-side field selector.
        page_size: Items per LIST page.
        watch_timeout: Server-side watch duration in seconds (the server then closes it).
        inactivity_timeout: Seconds without any line before a watch is abandoned.
        max_backoff: Longest wait between retries after a connection error (the first is
            :data:`FIRST_RETRY`, doubling).
    """

    def __init__(
        self,
        api: KubeAPI,
        path: str,
        record_type: type[Record],
        handler: Handler[Record],
        *,
        field_selector: str = "",
        page_size: int = 500,
        watch_timeout: int = 300,
        inactivity_timeout: float = 70.0,
        max_backoff: float = 5.0,
    ) -> None:
        self.api = api
        self.path = path
        self.record_type = record_type
        self.handler = handler
        self.field_selector = field_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.inactivity_timeout = inactivity_timeout
        self.backoff = Backoff(min(FIRST_RETRY, max_backoff), max_backoff)
        self.store: dict[str, Record] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.stats = InformerStats()
        self._relist = asyncio.Event()
        self._relisted = asyncio.Event()
        self._page_decoder: msgspec.json.Decoder[ListPage[Record]] = msgspec.json.Decoder(
            ListPage[record_type]  # type: ignore[valid-type]
        )
        self._event_decoder = msgspec.json.Decoder(WatchEvent[record_type])  # type: ignore[valid-type]

    async def run(self) -> None:
        """List, then watch forever (until cancelled)."""
        delays = self.backoff.delays()
        need_list = True
        while True:
            try:
                if need_list or self._relist.is_set():
                    self._relist.clear()
                    await self._list()
                    need_list = False
                await self._watch()
                delays = self.backoff.delays()
            except _GoneError:
                self.stats.gone += 1
                log.info(
                    "%s: 410 Gone at resourceVersion %s; relisting",
                    self.path,
                    self.resource_version,
                )
                need_list = True
            except asyncio.CancelledError:
                raise
            except (
                httpx2.HTTPError,
                ApiError,
                OSError,
                TimeoutError,
                msgspec.DecodeError,
            ) as error:
                self.stats.errors += 1
                delay = next(delays)
                log.warning("%s: %s; retrying in %.1f s", self.path, error, delay)
                await asyncio.sleep(delay)

    async def resync(self) -> None:
        """Relist now, breaking the running watch, and return once the cache reflects it.

        Used when a replica becomes leader: it must decide from a fresh, consistent read.
        """
        target = self.stats.lists + 1
        self._relisted.clear()
        self._relist.set()
        while self.stats.lists < target:
            await self._relisted.wait()
            self._relisted.clear()

    async def _list(self) -> None:
        fresh: dict[str, Record] = {}
        params = {"limit": str(self.page_size)}
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        version = ""
        while True:
            body = await self.api.request("GET", self.path, params=params)
            page = self._page_decoder.decode(body)
            for item in page.items:
                fresh[item.metadata.uid] = item
            version = page.metadata.resource_version or version
            if not page.metadata.continue_:
                break
            params["continue"] = page.metadata.continue_
        self.stats.lists += 1
        old, self.store = self.store, fresh
        for uid, record in fresh.items():
            previous = old.get(uid)
            if previous is None:
                self.handler(ADDED, record)
            elif previous.metadata.resource_version != record.metadata.resource_version:
                self.handler(MODIFIED, record)
        for uid, record in old.items():
            if uid not in fresh:
                self.handler(DELETED, record)
        self.resource_version = version
        self.synced.set()
        self._relisted.set()

    async def _watch(self) -> None:
        params = {
            "watch": "1",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout),
        }
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        self.stats.watches += 1
        relist_wait = asyncio.ensure_future(self._relist.wait())
        try:
            async with self.api.stream(self.path, params) as response:
                lines = response.aiter_lines().__aiter__()
                while not self._relist.is_set():
                    next_line = asyncio.ensure_future(lines.__anext__())
                    try:
                        done, _ = await asyncio.wait(
                            {next_line, relist_wait},
                            timeout=self.inactivity_timeout,
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                    finally:
                        if not next_line.done():
                            next_line.cancel()
                            with contextlib.suppress(BaseException):
                                await next_line
                    if next_line not in done:
                        if not done:
                            self.stats.inactivity_timeouts += 1
                            log.warning("%s: watch silent; reconnecting", self.path)
                        return
                    try:
                        line = next_line.result()
                    except StopAsyncIteration:
                        return
                    if line:
                        self._apply(line)
        except ApiError as error:
            if error.status == 410:
                raise _GoneError from None
            raise
        finally:
            relist_wait.cancel()

    def _apply(self, line: str) -> None:
        event = self._event_decoder.decode(line)
        kind = event.type
        if kind == "ERROR":
            status = msgspec.json.decode(event.object, type=_Status)
            if status.code == 410:
                raise _GoneError
            raise ApiError(status.code, status.reason, status.message)
        if kind == "BOOKMARK":
            bookmark = msgspec.json.decode(event.object, type=_Bookmark)
            self.resource_version = bookmark.metadata.resource_version or self.resource_version
            return
        record = msgspec.json.decode(event.object, type=self.record_type)
        self.stats.events += 1
        self.resource_version = record.metadata.resource_version
        uid = record.metadata.uid
        if kind == DELETED:
            self.store.pop(uid, None)
        else:
            self.store[uid] = record
        self.handler(kind, record)
