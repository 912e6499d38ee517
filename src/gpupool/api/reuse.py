"""Reusing an expensive answer while it is fresh, so readers cannot starve the scheduler.

Building the GPU map of a 1,000-node cluster takes a second or more of CPU (bench/api_view.py),
and it runs in a thread of the scheduler's process, competing with the scheduler for the
interpreter. With one dashboard polling every two seconds that alone would take half a core; with
ten it would take everything. :class:`Fresh` bounds it: concurrent requests for the same answer
share one build, and an answer that took ``t`` seconds to build is reused for
``max(min_age, t * spacing)`` seconds, so the face spends at most about ``1 / spacing`` of a core
whatever the number of readers, while a small cluster still refreshes every ``min_age``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

MIN_AGE = 1.0
SPACING = 4.0


@dataclass
class _Built(Generic[T]):
    value: T
    at: float
    took: float


@dataclass
class Fresh(Generic[T]):
    """Answers by key, rebuilt only when stale.

    Args:
        min_age: Seconds an answer is always reused.
        spacing: An answer that took ``t`` seconds is reused for ``t * spacing`` seconds.
        clock: Monotonic seconds.
    """

    min_age: float = MIN_AGE
    spacing: float = SPACING
    clock: Callable[[], float] = time.monotonic
    _built: dict[str, _Built[T]] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def _fresh(self, key: str) -> _Built[T] | None:
        built = self._built.get(key)
        if built is None:
            return None
        age = self.clock() - built.at
        return built if age < max(self.min_age, built.took * self.spacing) else None

    async def get(self, key: str, build: Callable[[], Awaitable[T]]) -> T:
        """The answer for ``key``: reused while fresh, else built once for all waiting callers."""
        built = self._fresh(key)
        if built is not None:
            return built.value
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            built = self._fresh(key)  # another caller may have built it while we waited
            if built is not None:
                return built.value
            started = self.clock()
            value = await build()
            now = self.clock()
            self._built[key] = _Built(value, now, now - started)
            return value
